"""Synthetic suite results for the report machinery's tests (and for eyeballing the HTML).

Run ``python -m tests.conformance_machinery._synthetic OUTDIR`` from the repo root to write a
report from made-up verdicts into OUTDIR.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from tpbcast.conformance import (
    CheckResult,
    ImplementationInfo,
    Spec,
    SuiteResult,
    Verdict,
    aggregate,
    default_spec,
    write_reports,
)

STARTED = datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC)

LONG_MESSAGE = (
    "rank 0 (pid 4711) raised PeerClosedError during phase 'broadcast': peer 2 closed the "
    "connection after 65536 of 8388608 bytes (elapsed 0.41 s, path /tmp/tpb-x/g_0.sock, "
    'errno EPIPE)\n\nTraceback (most recent call last):\n  File "target.py", line 12\n'
    "    bc.broadcast(buf)\nPeerClosedError: peer 2 closed"
)


def synthetic_checks() -> list[CheckResult]:
    """A mix that exercises every verdict and every aggregation rule."""
    return [
        CheckResult("conformance/test_wire.py::test_socket_name", ("WIRE-1",), Verdict.PASS, 0.21),
        CheckResult("conformance/test_wire.py::test_rank_bytes", ("WIRE-2", "WIRE-3"), "PASS", 0.3),
        # WIRE-4: one PASS, one FAIL -> FAIL (MUST failure)
        CheckResult("conformance/test_wire.py::test_probe_order[2]", ("WIRE-4",), "PASS", 0.4),
        CheckResult(
            "conformance/test_wire.py::test_probe_order[4]",
            ("WIRE-4",),
            Verdict.FAIL,
            0.9,
            failing_rank=0,
            message="WIRE-4 MUST: probe sent to peer 1 before peer 3 announced",
        ),
        # TIME-5: ERROR -> ERROR (MUST error)
        CheckResult(
            "conformance/test_time.py::test_io_deadline",
            ("TIME-5",),
            Verdict.ERROR,
            30.0,
            failing_rank=1,
            message="harness timed out rank 1 (TIMED_OUT); no verdict reached",
        ),
        # FAULT-2: FAIL with a long multi-line message
        CheckResult(
            "conformance/test_fault.py::test_root_death",
            ("FAULT-2", "FAULT-3"),
            Verdict.FAIL,
            1.2,
            failing_rank=2,
            message=LONG_MESSAGE,
            details={"seed": "1234", "replay": "pytest --tpbcast-seed 1234 -k root_death"},
        ),
        # BCAST-4 (SHOULD) FAIL: listed after MUST failures
        CheckResult(
            "conformance/test_bcast.py::test_root_before_noop",
            ("BCAST-4",),
            Verdict.FAIL,
            0.05,
            failing_rank=0,
            message="BCAST-4 SHOULD: broadcast(root=1) at world_size 1 returned without error",
        ),
        # RESET-9: UNSUPPORTED (capability not declared)
        CheckResult(
            "conformance/test_reset.py::test_generation",
            ("RESET-9",),
            Verdict.UNSUPPORTED,
            0.0,
            message="needs capability 'generation', which reference-lite does not declare",
        ),
        # SEC-6: PASS + UNSUPPORTED -> UNSUPPORTED (an incidental PASS never outweighs a
        # check that could not run)
        CheckResult("conformance/test_sec.py::test_peercred_same_uid", ("SEC-6",), "PASS", 0.2),
        CheckResult(
            "conformance/test_sec.py::test_peercred_foreign",
            ("SEC-6",),
            Verdict.UNSUPPORTED,
            message="no second uid available",
        ),
        # a NOT_TESTED check is ignored
        CheckResult("conformance/test_sec.py::test_skipped", ("SEC-7",), Verdict.NOT_TESTED),
        # BCAST-13: PASS + NOT_APPLICABLE (staged through another transport) -> PASS
        CheckResult("conformance/test_bcast.py::test_poisoned", ("BCAST-13",), "PASS", 0.3),
        CheckResult(
            "conformance/test_bcast.py::test_poisoned_by_rogue",
            ("BCAST-13",),
            Verdict.NOT_APPLICABLE,
            message="not staged: the test stages its fault through uds-v1",
        ),
        # BCAST-14: only NOT_APPLICABLE checks -> UNSUPPORTED (applies, never staged)
        CheckResult(
            "conformance/test_bcast.py::test_reset_race_rogue",
            ("BCAST-14",),
            Verdict.NOT_APPLICABLE,
            message="not staged: the test stages its fault through uds-v1",
        ),
    ]


def synthetic_suite(spec: Spec | None = None, *, name: str = "reference-lite") -> SuiteResult:
    spec = spec or default_spec()
    return aggregate(
        spec,
        synthetic_checks(),
        implementation=ImplementationInfo(
            spec="tpbcast.reference_impl.conformance_adapter:make",
            name=name,
            version="0.1.0",
            capabilities=frozenset({"deadlines", "multi_buffer", "tensors"}),
        ),
        started=STARTED,
        duration=33.26,
        seed=1234,
    )


def all_pass_suite(spec: Spec | None = None) -> SuiteResult:
    spec = spec or default_spec()
    checks = [CheckResult(f"t::{c.id}", (c.id,), Verdict.PASS, 0.01) for c in spec]
    return aggregate(
        spec,
        checks,
        implementation=ImplementationInfo(spec="other:make", name="other-impl", version="2.0"),
        started=STARTED,
        duration=1.5,
        seed=7,
    )


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/synthetic")
    files = write_reports(synthetic_suite(), out)
    write_reports([synthetic_suite(), all_pass_suite()], out / "side_by_side")
    print(files.html)
