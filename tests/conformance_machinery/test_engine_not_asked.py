"""An adapter earns its engine nothing: what an adapter decides itself is never a PASS.

An adapter that checks ranks on its engine's behalf and says so (``EngineNotAsked``, the
adapter contract's "the engine was never asked") gets INIT-1 UNSUPPORTED, naming the
decision; the same adapter refusing with a plain ``ValueError`` (its mutant: the refusal
passed off as the engine's) gets INIT-1 PASS.  Both run the real suite's INIT-1 tests in a
subprocess, so the suite's ``attempt``/``_watch.Call`` and the verdict rules are what is
judged, not a stand-in.

An engine with no not-initialized state (its adapter keeps that state, and says so with
``EngineNotAsked(..., "lifecycle")``) FAILs the clauses about that state, BCAST-2, RESET-4
and INIT-12; the mutant adapter answering from its own bookkeeping gets them PASS, which is
exactly what the contract's one way to say "never asked" exists to prevent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_ADAPTER = '''
from tpbcast.harness.adapter import EngineNotAsked
from tpbcast.reference_impl.conformance_adapter import make as make_engine

REFUSAL = {refusal!r}


class CheckingAdapter:
    """Checks the arguments itself, then hands the call to an engine it never asked."""

    name = "checking adapter"

    def __init__(self):
        self._engine = make_engine()

    def initialize(self, rank, world_size, base_path):
        if world_size < 1 or not 0 <= rank < world_size:
            detail = f"rank {{rank}} of {{world_size}} refused by the adapter"
            if REFUSAL == "EngineNotAsked":
                raise EngineNotAsked("rank_range", detail, "the engine")
            raise ValueError(detail)
        self._engine.initialize(rank, world_size, base_path)

    def broadcast(self, buffer, root=0):
        self._engine.broadcast(buffer, root)

    def reset(self):
        self._engine.reset()

    def is_initialized(self):
        return self._engine.is_initialized()


def make():
    return CheckingAdapter()
'''


@pytest.mark.parametrize(
    ("refusal", "verdict"),
    [("EngineNotAsked", "UNSUPPORTED"), ("ValueError", "PASS")],
    ids=["says-engine-not-asked", "mutant-passes-its-own-check-off"],
)
def test_an_adapter_that_validates_for_its_engine_earns_no_pass(tmp_path, refusal, verdict):
    clauses = _run_suite(tmp_path, _ADAPTER.format(refusal=refusal), "INIT-1")
    assert clauses["INIT-1"]["verdict"] == verdict, clauses["INIT-1"]
    if verdict == "UNSUPPORTED":
        assert "the engine was never asked" in clauses["INIT-1"]["message"]


_STATELESS_ADAPTER = '''
from tpbcast.harness.adapter import EngineNotAsked
from tpbcast.reference_impl.conformance_adapter import make as make_engine

SAYS_SO = {says_so!r}


class StatelessAdapter:
    """Over an engine with no not-initialized state (an object exists only while it is
    initialized, as vLLM's queue): the adapter keeps the state the contract asks about."""

    name = "stateless adapter"

    def __init__(self):
        self._engine = None

    def _no_state(self, what):
        if SAYS_SO:
            raise EngineNotAsked(what, "the engine has no such state", "the engine", "lifecycle")

    def initialize(self, rank, world_size, base_path):
        engine = make_engine()
        engine.initialize(rank, world_size, base_path)
        self._engine = engine

    def broadcast(self, buffer, root=0):
        if self._engine is None:
            self._no_state("not_initialized")
            raise RuntimeError("not initialized (the adapter's bookkeeping)")
        self._engine.broadcast(buffer, root)

    def reset(self):
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.reset()

    def is_initialized(self):
        self._no_state("is_initialized")
        return self._engine is not None


def make():
    return StatelessAdapter()
'''


@pytest.mark.parametrize(
    ("says_so", "verdict"),
    [(True, "FAIL"), (False, "PASS")],
    ids=["says-engine-has-no-state", "mutant-answers-from-its-own-bookkeeping"],
)
def test_an_engine_without_a_lifecycle_fails_the_clauses_about_it(tmp_path, says_so, verdict):
    """BCAST-2, RESET-4 and INIT-12 are about the not-initialized state (``about``): an
    engine that has none FAILs them, never UNSUPPORTED and never PASS by the adapter's
    bookkeeping; the mutant that passes its bookkeeping off as the engine's gets PASS."""
    clauses = _run_suite(
        tmp_path, _STATELESS_ADAPTER.format(says_so=says_so), "INIT-12,BCAST-2,RESET-4"
    )
    for cid in ("INIT-12", "BCAST-2", "RESET-4"):
        assert clauses[cid]["verdict"] == verdict, clauses[cid]


def _run_suite(tmp_path, source, clauses):
    """The real suite on ``clauses`` against the adapter in ``source``: its clause records."""
    (tmp_path / "suite_adapter.py").write_text(textwrap.dedent(source))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpbcast.conformance",
            "--tpbcast-impl=suite_adapter:make",
            f"--clauses={clauses}",
            f"--report-dir={out}",
            "-n",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    report = out / "conformance.json"
    assert report.exists(), proc.stdout + proc.stderr
    return {c["id"]: c for c in json.loads(report.read_text())["clauses"]}
