"""What the reports say about clauses left unjudged, and about absent MAY options.

Two rules of ``tpbcast.conformance._results``: each core UNSUPPORTED clause names what the
implementation did not declare (a capability, or ``adapter:<check>`` for what an adapter
answered itself), read from the messages the real classes write; and a MAY clause whose
option a test saw absent holds (PASS, named as absent), while the same record against a
MUST or SHOULD clause is a suite defect (ERROR), never a PASS.
"""

from __future__ import annotations

from tpbcast.conformance import CheckResult, ImplementationInfo, Verdict, aggregate, default_spec
from tpbcast.conformance._checks import Check, begin, end, record_absent
from tpbcast.conformance._report_json import json_document, suite_from_json
from tpbcast.conformance._results import OPTIONAL_ABSENT, needs_of_message
from tpbcast.conformance._verdicts import Unsupported, require
from tpbcast.harness import CapabilityMissing, EngineNotAsked
from tpbcast.harness.adapter import ExecNotAsked


class _Impl:
    name = "x"

    @staticmethod
    def supports(capability: str) -> bool:
        return False


def _require_message() -> str:
    try:
        require(_Impl(), "generation")
    except Unsupported as exc:
        return str(exc.msg)
    raise AssertionError("require did not skip")


def test_needs_are_read_from_the_real_classes_messages() -> None:
    assert needs_of_message(_require_message()) == ("generation",)
    assert needs_of_message(str(CapabilityMissing("tensors", "x"))) == ("tensors",)
    not_asked = EngineNotAsked("peer_buffer", "rank 1: buffer 0 is read-only", "SGLang 0.5")
    assert needs_of_message(f"rank 1: {not_asked}") == ("adapter:peer_buffer",)
    lacks = EngineNotAsked("read_only_buffer", "buffer 0 is read-only", "vLLM", "receive_buffers")
    assert needs_of_message(f"RESET-4: rank 1: {lacks}") == ("engine:receive_buffers",)
    assert needs_of_message(str(ExecNotAsked("int_range", "9e9", ("drv",)))) == ("exec:int_range",)
    assert needs_of_message("UNSUPPORTED (precondition): no network namespaces") == ()
    assert needs_of_message("RESET-4: not stageable on this implementation: x") == ()


def test_core_unsupported_names_what_was_not_declared() -> None:
    spec = default_spec()
    impl = ImplementationInfo(name="x", capabilities=frozenset({"deadlines"}), transport="tcp")
    checks = [
        CheckResult("t::a", ("RESET-9",), Verdict.UNSUPPORTED, message=_require_message()),
        CheckResult(
            "t::b",
            ("BCAST-11",),
            Verdict.UNSUPPORTED,
            message=f"rank 1: {EngineNotAsked('peer_buffer', 'read-only', 'engine')}",
        ),
        CheckResult(
            "t::c", ("INIT-6",), Verdict.UNSUPPORTED, message="INIT-6: not stageable: a reason"
        ),
        CheckResult("t::d", ("INIT-1",), Verdict.PASS),
    ]
    suite = aggregate(spec, checks, implementation=impl)
    got = {u.clause_id: u.needs for u in suite.core_unsupported()}
    assert got == {"RESET-9": ("generation",), "BCAST-11": ("adapter:peer_buffer",), "INIT-6": ()}
    doc = json_document(suite)
    assert [e["id"] for e in doc["summary"]["core_unsupported"]] == list(got)
    again = suite_from_json(doc, spec)
    assert {u.clause_id: u.needs for u in again.core_unsupported()} == got


def _absent(cid: str) -> CheckResult:
    log = begin()
    try:
        record_absent(cid, "a second call waited its turn")
    finally:
        end()
    (check,) = log.checks
    assert isinstance(check, Check) and check.verdict is Verdict.PASS
    return CheckResult("t::absent", (cid,), check.verdict, message=check.message)


def test_an_absent_option_passes_a_may_clause_and_is_named() -> None:
    suite = aggregate(default_spec(), [_absent("BCAST-15")])
    result = suite.clause("BCAST-15")
    assert result.verdict is Verdict.PASS and result.is_optional_absent
    assert OPTIONAL_ABSENT in result.message
    assert [r.clause.id for r in suite.optional_absent] == ["BCAST-15"]
    assert json_document(suite)["summary"]["optional_absent"] == ["BCAST-15"]
    assert suite.core_unsupported() == ()


def test_an_option_seen_present_is_not_absent() -> None:
    present = CheckResult("t::p", ("BCAST-15",), Verdict.PASS, message="BCAST-15: says so")
    result = aggregate(default_spec(), [_absent("BCAST-15"), present]).clause("BCAST-15")
    assert result.verdict is Verdict.PASS and not result.is_optional_absent


def test_absence_never_passes_a_must_or_should_clause() -> None:
    """The mutant of the rule: a MUST behaviour recorded as an absent option would PASS."""
    suite = aggregate(default_spec(), [_absent("INIT-11"), _absent("FAULT-10")])
    for cid in ("INIT-11", "FAULT-10"):
        result = suite.clause(cid)
        assert result.verdict is Verdict.ERROR, cid
        assert "suite defect" in result.message and not result.is_optional_absent
