"""Self-tests of transport profiles: NOT_APPLICABLE, ``staged_via`` and per-clause staging.

Each rule is run end to end through the plugin (a tiny registry, a tiny implementation
declaring ``transport = "shm"``, pytest in a subprocess) and judged on the JSON report: a
clause of another transport's scope is NOT_APPLICABLE whatever its test did (never FAIL,
never PASS, never in the exit status); a test staged through another transport is not run
and never makes its core clause PASS; the fuzz helper's staging is judged per clause; a
transport profile is added by one row of the harness's table, and everything else (the
registry's validation, ``--list``, SPEC.md, ``staged_via``, the reports) follows it; an
implementation that cannot be loaded stops the run before any test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tpbcast.conformance import _checks
from tpbcast.conformance._results import Verdict
from tpbcast.conformance.spec import AREAS
from tpbcast.conformance.tests import _fuzz
from tpbcast.harness.adapter import UnknownTransportError, parse_transport

_CLAUSE = """
[[clause]]
id = "{id}"
area = "{area}"
level = "{level}"
scope = {scope}
title = "{id} title"
requirement = "The implementation does {id}."
rationale = "Self-test registry."
"""

# WIRE-1 and WIRE-2 belong to the Unix-socket wire; INIT-1 and BCAST-1 to every transport.
_REQUIRED = (
    ("WIRE-1", "MUST", "uds-v1"),
    ("WIRE-2", "MUST", "uds-v1"),
    ("INIT-1", "MUST", "core"),
    ("BCAST-1", "MUST", "core"),
)

_IMPL = '''
class ShmLike:
    """Declares the shared-memory transport; members are never called by these tests."""

    transport = {transport!r}
    name = "shm-like"
    version = "1"

    def initialize(self, rank, world_size, base_path):
        pass

    def broadcast(self, buffer, root=0):
        pass

    def reset(self):
        pass

    def is_initialized(self):
        return False


def make():
    return ShmLike()
'''


def _registry(extra: tuple[tuple[str, str, object], ...] = ()) -> str:
    parts = ['[spec]\nname = "self-test spec"\nversion = "0.1"\nretired = []\n']
    for area in AREAS:
        parts.append(f'[[area]]\nid = "{area}"\ntitle = "{area}"\nsummary = "Area {area}."\n')
    have = {cid.split("-")[0] for cid, _, _ in _REQUIRED}
    clauses = [
        *_REQUIRED,
        *extra,
        *((f"{a}-9", "MAY", "core") for a in AREAS if a not in have),
    ]
    for cid, level, scope in clauses:
        toml_scope = json.dumps(scope)  # a string or a list of strings, both valid TOML
        parts.append(_CLAUSE.format(id=cid, area=cid.split("-")[0], level=level, scope=toml_scope))
    return "\n".join(parts)


@pytest.fixture
def run_suite(pytester):
    """run(test_source, transport="shm") -> (result, verdict per clause, json document)."""
    registry = pytester.path / "reg.toml"
    registry.write_text(_registry())
    out = pytester.path / "out"

    def run(source, *, transport="shm", extra_clauses=(), plugins=()):
        if extra_clauses:
            registry.write_text(_registry(extra_clauses))
        pytester.makepyfile(
            impl_under_test=_IMPL.format(transport=transport),
            test_profiles=textwrap.dedent(source),
        )
        result = pytester.runpytest_subprocess(
            *(arg for plugin in plugins for arg in ("-p", plugin)),
            "-p",
            "tpbcast.conformance.plugin",
            f"--tpbcast-registry={registry}",
            f"--tpbcast-report-dir={out}",
            "--tpbcast-impl=impl_under_test:make",
            "-p",
            "no:cacheprovider",
        )
        report = out / "conformance.json"
        doc = json.loads(report.read_text()) if report.exists() else None
        verdicts = {c["id"]: c["verdict"] for c in doc["clauses"]} if doc else {}
        return result, verdicts, doc

    return run


# A wire test that would FAIL if it ran, a core test that passes, and a test citing both
# whose group "fails" with an exception naming no clause.
MIXED = """
import pytest

@pytest.mark.clause("WIRE-1")
def test_wire_only():
    raise AssertionError("WIRE-1: a rogue peer could not connect")

@pytest.mark.clause("WIRE-2", "INIT-1")
def test_wire_and_core():
    raise RuntimeError("the rank group failed: rank 1 raised ConnectionRefusedError")

@pytest.mark.clause("BCAST-1")
def test_core():
    pass
"""


def test_clause_of_another_transport_is_not_applicable_and_never_fails_the_run(run_suite):
    result, verdicts, doc = run_suite(MIXED)
    assert verdicts["WIRE-1"] == "NOT_APPLICABLE"  # its test would have FAILed
    # A failure naming no clause decides INIT-1 (ERROR) but never WIRE-2.
    assert verdicts["WIRE-2"] == "NOT_APPLICABLE"
    assert verdicts["INIT-1"] == "ERROR"
    assert verdicts["BCAST-1"] == "PASS"
    assert doc["implementation"]["transport"] == "shm"
    assert doc["summary"]["not_applicable"] == ["WIRE-1", "WIRE-2"]
    assert doc["summary"]["must_failures"] == ["INIT-1"]
    assert "NOT_APPLICABLE 2" in result.stdout.str()
    assert "transport shm" in result.stdout.str()
    wire2_checks = next(c for c in doc["clauses"] if c["id"] == "WIRE-2")["checks"]
    assert [c["verdict"] for c in wire2_checks] == ["NOT_APPLICABLE"]
    wire = next(c for c in doc["clauses"] if c["id"] == "WIRE-1")
    assert wire["scope"] == "uds-v1" and "not part of" in wire["message"]


def test_the_same_tests_judge_every_clause_on_the_clauses_own_transport(run_suite):
    _, verdicts, _ = run_suite(MIXED, transport="uds-v1")
    assert verdicts["WIRE-1"] == "FAIL"
    assert verdicts["WIRE-2"] == "ERROR"
    assert verdicts["BCAST-1"] == "PASS"


STAGED = """
import pytest

@pytest.mark.clause("INIT-1")
@pytest.mark.staged_via("uds-v1")
def test_staged_through_a_rogue_socket_peer():
    raise AssertionError("INIT-1: must never run against another transport")

@pytest.mark.clause("BCAST-1")
@pytest.mark.staged_via("uds-v1")
def test_staged_through_the_wire():
    raise AssertionError("BCAST-1: must never run against another transport")

@pytest.mark.clause("BCAST-1")
def test_staged_with_process_faults():
    pass

@pytest.mark.clause("WIRE-1", "WIRE-2")
def test_wire():
    pass
"""


def test_a_test_staged_through_another_transport_is_not_run_and_never_passes(run_suite):
    result, verdicts, doc = run_suite(STAGED)
    assert result.ret == 0, result.stdout.str()  # the AssertionErrors never ran
    # INIT-1's only test could not be staged: UNSUPPORTED, never PASS.
    assert verdicts["INIT-1"] == "UNSUPPORTED"
    init = next(c for c in doc["clauses"] if c["id"] == "INIT-1")
    assert "not staged on this transport" in init["message"]
    assert init["checks"][0]["verdict"] == "NOT_APPLICABLE"
    # BCAST-1 is judged by the test that could be staged; the other check is absent.
    assert verdicts["BCAST-1"] == "PASS"
    bcast = next(c for c in doc["clauses"] if c["id"] == "BCAST-1")
    assert bcast["check_summary"] == "NOT_APPLICABLE 1, PASS 1 of 2 check(s)"


def test_list_shows_each_clauses_scope() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tpbcast.conformance", "--list", "WIRE-6", "BCAST-1", "FALLBACK-1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = [line.split()[:3] for line in proc.stdout.splitlines()]
    assert ["WIRE-6", "MUST", "uds-v1"] in rows, proc.stdout
    assert ["BCAST-1", "MUST", "core"] in rows, proc.stdout
    assert ["FALLBACK-1", "MUST", "dispatch"] in rows, proc.stdout


def test_an_unknown_transport_is_refused_with_a_hint() -> None:
    assert parse_transport(None) == "uds-v1"
    assert parse_transport("shm") == "shm"
    with pytest.raises(UnknownTransportError, match=r"unknown transport 'shmm'.*'shm'") as info:
        parse_transport("shmm", source="x:make transport")
    assert "TRANSPORT_PROFILES" in str(info.value) and "uds-v1, uds-framed, shm" in str(info.value)


# --------------------------------------------------------------------------- fuzz staging


def _fuzz_verdicts(tally: _fuzz.Tally, clauses=("TIME-4", "TIME-5")) -> dict[str, Verdict]:
    log = _checks.begin()
    try:
        _fuzz._judge_staging(clauses, set(), tally, "fuzz", "summary")
    finally:
        _checks.end()
    return {check.clause_id: check.verdict for check in log.checks}


def test_fuzz_clause_no_staged_case_judged_is_unsupported_not_pass() -> None:
    tally = _fuzz.Tally()
    for _ in range(4):
        tally.judge("case", [_fuzz.Judged("TIME-4", True, "s")], staged=True)
    tally.judge("case", [_fuzz.Judged("TIME-5", True, "s")], staged=False)
    # TIME-5 "held" only in a case the rogue could not stage: it judged nothing.
    assert _fuzz_verdicts(tally) == {"TIME-4": Verdict.PASS, "TIME-5": Verdict.UNSUPPORTED}


def test_fuzz_staging_limit_applies_to_every_clause_not_only_the_first() -> None:
    tally = _fuzz.Tally()
    both = [_fuzz.Judged("TIME-4", True, "s"), _fuzz.Judged("TIME-5", True, "s")]
    tally.judge("case", both, staged=True)
    for _ in range(3):
        tally.judge("case", both, staged=False)  # 3 of 4 cases unstaged: inconclusive
    assert _fuzz_verdicts(tally) == {"TIME-4": Verdict.ERROR, "TIME-5": Verdict.ERROR}


def test_a_staged_via_typo_fails_the_registry_check(run_suite):
    result, _, doc = run_suite(
        """
import pytest

@pytest.mark.clause("INIT-1")
@pytest.mark.staged_via("uds_v1")
def test_typo():
    pass
"""
    )
    assert result.ret == 4, result.stdout.str()
    result.stdout.fnmatch_lines(["*staged_via('uds_v1') names no transport*"])
    assert doc is None


# --------------------------------------------------------------------------- one table

_NEW_ROW = """
'''A plugin that adds one transport profile: the single place a new transport is declared.'''

from tpbcast.harness import _transports

_transports.TRANSPORT_PROFILES = (
    *_transports.TRANSPORT_PROFILES,
    _transports.TransportProfile("tcp-selftest", "a transport added by a self-test"),
)
"""

# One clause owned by the new profile, one shared by uds-v1 and the new profile.
_NEW_CLAUSES = (
    ("WIRE-5", "MUST", "tcp-selftest"),
    ("WIRE-6", "SHOULD", ["uds-v1", "tcp-selftest"]),
)

NEW_PROFILE_TESTS = """
import pytest

@pytest.mark.clause("WIRE-5")
@pytest.mark.staged_via("tcp-selftest")
def test_staged_through_the_new_transport():
    pass

@pytest.mark.clause("WIRE-6")
@pytest.mark.staged_via("uds-v1", "tcp-selftest")
def test_staged_through_either_wire():
    pass

@pytest.mark.clause("WIRE-1", "WIRE-2", "INIT-1", "BCAST-1")
def test_the_rest():
    pass
"""


def test_a_profile_added_by_one_row_of_the_table_is_judged_end_to_end(run_suite, pytester):
    pytester.makepyfile(add_profile=_NEW_ROW)
    result, verdicts, doc = run_suite(
        NEW_PROFILE_TESTS,
        transport="tcp-selftest",
        extra_clauses=_NEW_CLAUSES,
        plugins=("add_profile",),
    )
    assert result.ret == 0, result.stdout.str()
    assert doc["implementation"]["transport"] == "tcp-selftest"
    assert verdicts["WIRE-5"] == "PASS"  # its own clause, staged through its own transport
    assert verdicts["WIRE-6"] == "PASS"  # shared with uds-v1; staged_via names both
    assert verdicts["WIRE-1"] == verdicts["WIRE-2"] == "NOT_APPLICABLE"  # uds-v1 only
    assert verdicts["INIT-1"] == verdicts["BCAST-1"] == "PASS"
    scopes = {c["id"]: c["scope"] for c in doc["clauses"]}
    assert scopes["WIRE-5"] == "tcp-selftest"
    assert scopes["WIRE-6"] == "uds-v1, tcp-selftest"
    # The same registry judged for a uds-v1 implementation: the new profile's own clause is
    # not its business, the shared one is.
    _, on_v1, _ = run_suite(
        NEW_PROFILE_TESTS, transport="uds-v1", extra_clauses=_NEW_CLAUSES, plugins=("add_profile",)
    )
    assert on_v1["WIRE-5"] == "NOT_APPLICABLE"
    assert on_v1["WIRE-6"] == "PASS"


def test_without_its_row_the_same_profile_is_refused(run_suite):
    """The mutant of the test above: the row left out, the registry refuses the scope."""
    result, _, doc = run_suite(NEW_PROFILE_TESTS, transport="uds-v1", extra_clauses=_NEW_CLAUSES)
    assert result.ret != 0, result.stdout.str()
    assert doc is None
    out = result.stdout.str() + result.stderr.str()
    assert "scope 'tcp-selftest' is not one of" in out


def test_the_table_row_reaches_the_loader_the_spec_and_its_markdown(monkeypatch) -> None:
    from tpbcast.conformance.spec import load_spec, scopes
    from tpbcast.conformance.spec._markdown import render_markdown
    from tpbcast.harness import _transports

    row = _transports.TransportProfile("tcp-selftest", "a transport added by a self-test")
    monkeypatch.setattr(_transports, "TRANSPORT_PROFILES", (*_transports.TRANSPORT_PROFILES, row))
    assert parse_transport("tcp-selftest") == "tcp-selftest"
    assert scopes()[-2:] == ("tcp-selftest", "dispatch")
    with pytest.raises(UnknownTransportError, match="tcp-selftest"):
        parse_transport("tcp_selftest")  # the error lists the table, the new row included
    row_md = "| `tcp-selftest` | transport `tcp-selftest` | a transport added by a self-test |"
    assert row_md in render_markdown(load_spec())


def test_an_implementation_that_cannot_be_loaded_stops_the_run_with_one_error(run_suite):
    result, _, doc = run_suite(MIXED, transport="udsv1")
    assert result.ret == 4, result.stdout.str()  # pytest's usage-error exit status
    err = result.stderr.str()
    assert err.count("cannot load tpbcast implementation") == 1, err
    assert "unknown transport 'udsv1'" in err
    assert "did you mean 'uds-v1'" in err
    assert "TRANSPORT_PROFILES" in err
    assert doc is None  # no report of one ERROR per test saying the same thing
    assert "passed" not in result.stdout.str()
