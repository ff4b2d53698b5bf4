"""Self-tests of the conformance plugin and ``python -m tpbcast.conformance``.

Each test writes a tiny clause registry (every area needs a clause; only WIRE-1 MUST,
WIRE-2 SHOULD and INIT-1 MUST need tests) and a few test files citing it, then runs
pytest in a subprocess with ``-p tpbcast.conformance.plugin --tpbcast-registry ...`` and
judges the exit status, the terminal output and the JSON report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tpbcast.conformance.spec import AREAS

_CLAUSE = """
[[clause]]
id = "{id}"
area = "{area}"
level = "{level}"
title = "{id} title"
requirement = "The implementation does {id}."
rationale = "Self-test registry."
"""


def _registry(required=(("WIRE-1", "MUST"), ("WIRE-2", "SHOULD"), ("INIT-1", "MUST"))):
    parts = ['[spec]\nname = "self-test spec"\nversion = "0.1"\nretired = []\n']
    for area in AREAS:
        parts.append(f'[[area]]\nid = "{area}"\ntitle = "{area}"\nsummary = "Area {area}."\n')
    have = {cid.split("-")[0] for cid, _ in required}
    clauses = list(required) + [(f"{a}-9", "MAY") for a in AREAS if a not in have]
    for cid, level in clauses:
        parts.append(_CLAUSE.format(id=cid, area=cid.split("-")[0], level=level))
    return "\n".join(parts)


PASSING = """
import pytest

@pytest.mark.clause("WIRE-1")
def test_wire1():
    pass

@pytest.mark.clause("WIRE-2")
def test_wire2():
    pass

@pytest.mark.clause("INIT-1")
def test_init1():
    pass
"""


@pytest.fixture
def suite(pytester):
    """Write the registry; return a runner: run(test_source, *args) -> (result, json)."""
    registry = pytester.path / "reg.toml"
    registry.write_text(_registry())
    out = pytester.path / "out"

    def run(source, *args, name="test_suite"):
        pytester.makepyfile(**{name: textwrap.dedent(source)})
        result = pytester.runpytest_subprocess(
            "-p",
            "tpbcast.conformance.plugin",
            f"--tpbcast-registry={registry}",
            f"--tpbcast-report-dir={out}",
            "-p",
            "no:cacheprovider",
            *args,
        )
        report = out / "conformance.json"
        doc = json.loads(report.read_text()) if report.exists() else None
        return result, doc

    return run


def _verdicts(doc):
    return {c["id"]: c["verdict"] for c in doc["clauses"]}


def test_all_pass_exit_zero_and_reports_written(suite, pytester):
    result, doc = suite(PASSING)
    assert result.ret == 0, result.stdout.str()
    assert _verdicts(doc)["WIRE-1"] == "PASS"
    assert _verdicts(doc)["HYG-9"] == "NOT_TESTED", "a MAY clause without a test"
    assert {"index.html", "conformance.md", "SPEC.md"} <= {
        p.name for p in (pytester.path / "out").iterdir()
    }
    result.stdout.fnmatch_lines(["*tpbcast conformance*", "MUST*PASS 2*", "conformance passed"])


def test_unknown_clause_id_fails_the_run(suite):
    result, doc = suite(PASSING + '\n@pytest.mark.clause("WIRE-99")\ndef test_typo():\n    pass\n')
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*cites unknown clause id 'WIRE-99'*"])
    assert doc is None, "no verdicts may be reported when the registry check fails"


def test_test_without_clause_fails_the_run(suite):
    result, _ = suite(PASSING + "\ndef test_uncited():\n    pass\n")
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*test_uncited*cites no clause*"])


def test_must_clause_without_test_fails_the_run(suite):
    source = PASSING.replace('@pytest.mark.clause("INIT-1")', '@pytest.mark.clause("WIRE-1")')
    result, _ = suite(source)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*MUST clause INIT-1 (INIT-1 title) has no test*"])


def test_should_clause_without_test_fails_the_run(suite):
    source = PASSING.replace('@pytest.mark.clause("WIRE-2")', '@pytest.mark.clause("WIRE-1")')
    result, _ = suite(source)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*SHOULD clause WIRE-2*has no test*"])


def test_registry_problem_fails_under_xdist_too(suite):
    pytest.importorskip("xdist")
    result, _ = suite(
        PASSING + '\n@pytest.mark.clause("NOPE-1")\ndef test_x():\n    pass\n', "-n", "2"
    )
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*cites unknown clause id 'NOPE-1'*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_unsupported_capability_is_neither_pass_nor_fail(suite):
    source = PASSING.replace(
        "def test_wire2():\n    pass",
        "def test_wire2():\n"
        "    from tpbcast.conformance.plugin import require\n"
        "    class Impl:\n"
        "        name = 'fake'\n"
        "        def supports(self, cap):\n"
        "            return False\n"
        "    require(Impl(), 'deadlines')\n",
    )
    result, doc = suite(source)
    assert result.ret == 0
    assert _verdicts(doc)["WIRE-2"] == "UNSUPPORTED"
    check = next(c for c in doc["checks"] if c["test_id"].endswith("test_wire2"))
    assert "does not declare capability 'deadlines'" in check["message"]


def test_must_failure_exits_non_zero(suite):
    result, doc = suite(
        PASSING.replace(
            "def test_wire1():\n    pass", "def test_wire1():\n    assert 1 == 2, 'WIRE-1: no'"
        )
    )
    assert result.ret == 1
    assert _verdicts(doc)["WIRE-1"] == "FAIL"
    assert doc["summary"]["must_failures"] == ["WIRE-1"]
    result.stdout.fnmatch_lines(["MUST FAIL: WIRE-1*", "conformance FAILED*"])


def test_should_failure_keeps_exit_zero(suite):
    result, doc = suite(
        PASSING.replace("def test_wire2():\n    pass", "def test_wire2():\n    assert False")
    )
    assert result.ret == 0, "a SHOULD failure must not fail the run"
    assert _verdicts(doc)["WIRE-2"] == "FAIL"


def test_non_assertion_exception_is_error(suite):
    result, doc = suite(
        PASSING.replace(
            "def test_init1():\n    pass", "def test_init1():\n    raise TypeError('suite bug')"
        )
    )
    assert _verdicts(doc)["INIT-1"] == "ERROR"
    assert result.ret == 1, "a MUST clause that could not be judged fails the run"


def test_setup_failure_is_error(suite):
    source = (
        "import pytest\n\n@pytest.fixture\ndef broken():\n    assert False, 'cannot stage'\n"
        + PASSING.replace("def test_init1():", "def test_init1(broken):")
    )
    _, doc = suite(source)
    assert _verdicts(doc)["INIT-1"] == "ERROR"


def _run_init1(suite, body):
    """Run PASSING with INIT-1's test replaced by ``body`` (which gets ``tpbcast_run``)."""
    source = PASSING.replace("def test_init1():\n    pass", "def test_init1(tpbcast_run):\n" + body)
    result, doc = suite(source)
    return result, next(c for c in doc["clauses"] if c["id"] == "INIT-1")


def test_rank_failure_is_fail_with_failing_rank(suite):
    result, clause = _run_init1(
        suite,
        "    def target(ctx):\n"
        "        assert ctx.rank != 1, 'INIT-1: rank 1 disagrees'\n"
        "    tpbcast_run(target, 2)\n",
    )
    assert clause["verdict"] == "FAIL" and clause["failing_rank"] == 1, clause
    assert "rank 1" in clause["message"]
    assert result.ret == 1


def test_hard_check_naming_a_rank_is_fail_with_that_rank(suite):
    """A hard check in the test body that names a rank carries it as a field
    (``CheckFailed``, what ``_support.check(..., rank=n)`` raises outside a check log)."""
    result, clause = _run_init1(
        suite,
        "    from tpbcast.conformance._checks import CheckFailed\n"
        "    raise CheckFailed('INIT-1', 'INIT-1: four slots are filled -- rank 2: got 3', 2)\n",
    )
    assert clause["verdict"] == "FAIL" and clause["failing_rank"] == 2, clause
    assert clause["message"] == "INIT-1: four slots are filled -- rank 2: got 3", (
        "the report keeps the clause message without pytest's re-explanation",
        clause["message"],
    )
    assert result.ret == 1


def test_plain_assertion_names_its_clause_but_its_text_is_not_parsed_for_a_rank(suite):
    """A hand-written ``assert`` is attributed to the clause its message starts with; the
    failing rank comes only from a field, never from the wording of a message."""
    result, clause = _run_init1(
        suite,
        "    observed = 3\n"
        "    assert observed == 4, 'INIT-1: four slots are filled -- rank 2: got 3'\n",
    )
    assert clause["verdict"] == "FAIL" and clause["failing_rank"] is None, clause
    assert clause["message"] == "INIT-1: four slots are filled -- rank 2: got 3", clause
    assert result.ret == 1


def test_rank_that_could_not_stage_its_fault_is_error(suite):
    """``precondition`` failing inside a rank: nothing was judged, so ERROR, not FAIL."""
    result, clause = _run_init1(
        suite,
        "    from tpbcast.conformance.tests._support import precondition\n"
        "    def target(ctx):\n"
        "        precondition('INIT-1', ctx.rank != 1, 'the fault did not happen: no rogue')\n"
        "    tpbcast_run(target, 2)\n",
    )
    assert clause["verdict"] == "ERROR" and clause["failing_rank"] == 1, clause
    assert "no rogue" in clause["message"], clause["message"]
    assert result.ret == 1, "a MUST clause that could not be judged fails the run"


_NOT_ASKED = (
    "    from tpbcast.conformance.tests import _support, _watch\n"
    "    from tpbcast.harness.adapter import ExecNotAsked\n"
    "    def refuse():\n"
    "        raise ExecNotAsked('read_only_buffer', 'a read-only bytes', ('./drv',))\n"
)


@pytest.mark.parametrize("how", ["attempt", "watch"])
def test_a_call_refused_before_the_implementation_is_unsupported_in_a_rank(suite, how):
    """The exec: adapter refusing a call itself (``ExecNotAsked``, a ``CapabilityMissing``)
    inside a rank, where the test would count any exception as the refusal its clause
    wants: ``attempt`` and ``_watch.Call`` let it through, the rank fails with it, and the
    verdict is UNSUPPORTED with the adapter's message, never PASS nor FAIL."""
    calls = {
        "attempt": "            raised = _support.attempt(refuse)\n",
        "watch": "            call = _watch.Call(refuse)\n"
        "            call.wait(10)\n"
        "            raised = call.ended().raised\n",
    }
    result, clause = _run_init1(
        suite,
        _NOT_ASKED + "    def target(ctx):\n"
        "        if ctx.rank == 1:\n"
        + calls[how]
        + "            assert raised is not None, 'INIT-1: the call is refused'\n"
        "    tpbcast_run(target, 2)\n",
    )
    assert clause["verdict"] == "UNSUPPORTED", clause
    assert "the driver was never asked" in clause["message"], clause["message"]
    assert "rank 1" in clause["message"], clause["message"]
    assert result.ret == 0, "UNSUPPORTED is neither PASS nor FAIL"


def test_a_rank_the_adapter_answered_for_never_makes_its_group_fail(suite):
    """A group run to expect failures, where one rank's adapter raised EngineNotAsked: the
    test reads that rank's status as the implementation's and FAILs its clause.  The rank
    was never judged, so the clause is UNSUPPORTED, naming the rank and the decision."""
    result, clause = _run_init1(
        suite,
        "    from tpbcast.conformance.tests import _support\n"
        "    from tpbcast.harness import EngineNotAsked, Status\n"
        "    def target(ctx):\n"
        "        if ctx.rank == 1:\n"
        "            raise EngineNotAsked('rank_range', 'rank 1 refused', 'the engine')\n"
        "    result = tpbcast_run(target, 2, expect_failure=True, fail_fast=False)\n"
        "    for outcome in result.outcomes:\n"
        "        _support.check('INIT-1', outcome.status is Status.OK, 'every rank returns',\n"
        "                       outcome.status, rank=outcome.rank)\n",
    )
    assert clause["verdict"] == "UNSUPPORTED", clause
    assert "rank 1" in clause["message"] and "the engine was never asked" in clause["message"]
    assert result.ret == 0, "UNSUPPORTED is neither PASS nor FAIL"


def test_hung_rank_is_error_not_fail(suite):
    result, clause = _run_init1(
        suite,
        "    import threading\n"
        "    def target(ctx):\n"
        "        if ctx.rank == 1:\n"
        "            threading.Event().wait(60)\n"
        "    tpbcast_run(target, 2, timeout=1.0)\n",
    )
    assert clause["verdict"] == "ERROR" and clause["failing_rank"] == 1, clause
    assert "inconclusive" in clause["message"]
    assert result.ret == 1, "a MUST clause that could not be judged fails the run"


def test_clause_selection_runs_only_matching_tests(suite):
    # INIT-1 has no test here, but it is not selected, so the coverage check passes.
    source = PASSING.replace("def test_init1():\n    pass", "def test_init1():\n    assert False")
    result, doc = suite(source.replace('"INIT-1"', '"WIRE-1"'), "--tpbcast-clauses=WIRE-2")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, deselected=2)
    assert [c["id"] for c in doc["clauses"]] == ["WIRE-2"]


def test_unknown_selector_is_a_usage_error(suite):
    result, _ = suite(PASSING, "--tpbcast-clauses=BOGUS")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--tpbcast-clauses*BOGUS*"])


def test_verdict_properties_reach_junit(suite, pytester):
    junit = pytester.path / "junit.xml"
    suite(PASSING, f"--junitxml={junit}")
    text = junit.read_text()
    assert 'name="clause" value="WIRE-1"' in text
    assert 'name="tpbcast_verdict" value="PASS"' in text


def _main(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "tpbcast.conformance", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_list_prints_clauses_without_running(tmp_path):
    proc = _main("--list", "WIRE-1", "INIT", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["WIRE-1", "MUST"]
    assert all(line.startswith(("WIRE-1 ", "INIT-")) for line in lines)
    assert not (tmp_path / "reports").exists(), "--list must not run anything"


def test_list_rejects_unknown_prefix(tmp_path):
    proc = _main("--list", "BOGUS", cwd=tmp_path)
    assert proc.returncode == 4
    assert "BOGUS" in proc.stderr


def test_main_builds_the_pytest_command(tmp_path):
    from tpbcast.conformance.__main__ import _parser, build_pytest_args

    args = _parser().parse_args(
        [
            "WIRE",
            "--clauses",
            "INIT-3,SEC",
            "--tpbcast-seed",
            "7",
            "-n",
            "0",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )
    argv = build_pytest_args(args, ["-x"])
    tests_dir = Path(argv[0])
    assert (tests_dir / "__init__.py").exists() and tests_dir.name == "tests"
    assert "--tpbcast-clauses=WIRE,INIT-3,SEC" in argv
    assert "--tpbcast-seed=7" in argv
    assert f"--junitxml={tmp_path / 'r' / 'junit.xml'}" in argv
    assert argv[-1] == "-x"
    at = argv.index("tpbcast.conformance.plugin")
    assert argv[at - 1] == "-p"


_MUTANTS = '''
from tpbcast.reference_impl.conformance_adapter import CAPABILITIES, ReferenceAdapter


class Base:
    """The reference behind the adapter contract, with one behaviour broken per subclass."""

    capabilities = CAPABILITIES - {"dispatch", "base_path"}
    name = "mutant"
    version = "0"

    def __init__(self):
        self._a = ReferenceAdapter()

    def set_deadlines(self, **kw):
        return self._a.set_deadlines(**kw)

    def set_abstract_namespace(self, enabled):
        return self._a.set_abstract_namespace(enabled)

    @property
    def generation(self):
        return self._a.generation

    def initialize(self, *a):
        return self._a.initialize(*a)

    def broadcast(self, buf, root=0):
        return self._a.broadcast(buf, root)

    def reset(self):
        return self._a.reset()

    def is_initialized(self):
        return self._a.is_initialized()


class IgnoreRoot(Base):
    def broadcast(self, buf, root=0):
        return self._a.broadcast(buf, 0)


class AlwaysInitialized(Base):
    def is_initialized(self):
        return True


class ResetLeaks(Base):
    def reset(self):
        pass
'''


@pytest.mark.parametrize(
    ("mutant", "clause"),
    [("IgnoreRoot", "BCAST-3"), ("AlwaysInitialized", "INIT-12"), ("ResetLeaks", "RESET-2")],
)
def test_suite_kills_mutants_of_the_reference(tmp_path, mutant, clause):
    """The suite is only worth running if it fails broken implementations: each mutant
    breaks one behaviour, and the clause about it must come out FAIL (exit status 1)."""
    (tmp_path / "mutants.py").write_text(_MUTANTS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpbcast.conformance",
            clause,
            "-n",
            "0",
            f"--tpbcast-impl=mutants:{mutant}",
            f"--report-dir={tmp_path / 'r'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
        check=False,
    )
    doc = json.loads((tmp_path / "r" / "conformance.json").read_text())
    assert _verdicts(doc)[clause] == "FAIL", proc.stdout[-3000:]
    assert proc.returncode == 1


def test_unstaged_fault_is_error_not_fail():
    """A fault test whose fault did not happen judged nothing: ERROR, never FAIL or PASS."""
    from tpbcast.conformance._checks import PreconditionError
    from tpbcast.conformance._verdicts import judge_exception
    from tpbcast.conformance.tests._support import precondition

    precondition("FAULT-2", True, "holds: nothing raised")
    with pytest.raises(PreconditionError) as info:
        precondition("FAULT-2", False, "the fault did not happen: peer 1 was never killed")
    judgement = judge_exception("call", info.value, info.exconly())
    assert judgement.verdict.name == "ERROR", judgement
    assert judgement.clause_id == "FAULT-2", "a precondition is ERROR for its own clause only"
    assert "no verdict" in judgement.message, judgement.message
    assert "peer 1 was never killed" in judgement.message, judgement.message


# --------------------------------------------------------------------- per-check verdicts

TWO_CLAUSES = """
import pytest
from tpbcast.conformance.tests import _support as s

@pytest.mark.clause("WIRE-1")
def test_wire1():
    pass

@pytest.mark.clause("INIT-1", "WIRE-2")
def test_init1_and_wire2():
{body}
"""


def _checks_of(doc, cid):
    clause = next(c for c in doc["clauses"] if c["id"] == cid)
    return clause["verdict"], [(ch["verdict"], ch["message"]) for ch in clause["checks"]]


def _run_two(suite, body):
    return suite(TWO_CLAUSES.format(body=textwrap.indent(textwrap.dedent(body), "    ")))


def test_a_should_check_never_decides_the_must_clause_of_the_same_test(suite):
    """Wording (WIRE-2, SHOULD) fails first; the MUST check after it still runs and holds."""
    result, doc = _run_two(
        suite,
        """
        s.check("WIRE-2", "0x5a" in "bad probe 0x13", "the error shows 0x5a", "bad probe 0x13")
        s.check("INIT-1", True, "a wrong probe is refused")
        """,
    )
    must, must_checks = _checks_of(doc, "INIT-1")
    should, should_checks = _checks_of(doc, "WIRE-2")
    assert (must, should) == ("PASS", "FAIL"), doc["clauses"]
    assert must_checks == [("PASS", "INIT-1: a wrong probe is refused")]
    assert should_checks[0][1].startswith("WIRE-2: the error shows 0x5a -- got bad probe")
    assert result.ret == 0, "a SHOULD FAIL alone never fails the run"
    result.assert_outcomes(passed=1, failed=1)  # pytest still shows the test failed


def test_a_failed_check_does_not_hide_the_later_checks(suite):
    result, doc = _run_two(
        suite,
        """
        s.check("INIT-1", False, "first MUST check", "no")
        s.check("INIT-1", False, "second MUST check", "no either")
        s.check("WIRE-2", True, "the SHOULD check")
        """,
    )
    verdict, checks = _checks_of(doc, "INIT-1")
    assert verdict == "FAIL" and [v for v, _ in checks] == ["FAIL", "FAIL"], checks
    assert _checks_of(doc, "WIRE-2")[0] == "PASS"
    assert "second MUST check" in result.stdout.str(), "pytest's output shows every failure"
    assert result.ret == 1


def test_a_hard_failure_names_its_clause_and_leaves_the_rest_unjudged(suite):
    """An assert naming WIRE-2 stops the test: INIT-1 was never checked, so it is ERROR."""
    result, doc = _run_two(suite, "assert False, 'WIRE-2: wording -- got nothing'\n")
    assert _checks_of(doc, "WIRE-2")[0] == "FAIL"
    verdict, checks = _checks_of(doc, "INIT-1")
    assert verdict == "ERROR" and "not judged" in checks[0][1], checks
    assert result.ret == 1


def test_a_check_inside_a_rank_is_hard_and_still_names_its_clause(suite):
    """A rank's copy of the check log is never read: there a failed check raises."""
    source = TWO_CLAUSES.replace(
        "def test_init1_and_wire2():", "def test_init1_and_wire2(tpbcast_run):"
    )
    body = (
        "    def target(ctx):\n"
        "        s.check('WIRE-2', ctx.rank != 1, 'ranks agree', 'disagreement', rank=ctx.rank)\n"
        "    tpbcast_run(target, 2)\n"
    )
    _, doc = suite(source.format(body=body), name="test_rank_check")
    verdict, checks = _checks_of(doc, "WIRE-2")
    assert verdict == "FAIL" and "rank 1: got disagreement" in checks[0][1], checks
    clause = next(c for c in doc["clauses"] if c["id"] == "WIRE-2")
    assert clause["failing_rank"] == 1
    assert _checks_of(doc, "INIT-1")[0] == "ERROR", "INIT-1 was not reached"


def test_a_check_of_a_clause_the_test_does_not_cite_is_a_suite_defect(suite):
    _, doc = suite(
        PASSING.replace(
            "def test_init1():\n    pass",
            "def test_init1():\n"
            "    from tpbcast.conformance.tests import _support as s\n"
            "    s.check('WIRE-1', True, 'not cited here')\n",
        )
    )
    verdict, checks = _checks_of(doc, "WIRE-1")
    assert verdict == "ERROR" and any("suite defect" in m for _, m in checks), checks
