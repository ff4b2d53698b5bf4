"""An adapter earns its engine nothing: what an adapter decides itself is never a PASS.

An adapter that checks ranks on its engine's behalf and says so (``EngineNotAsked``, the
adapter contract's "the engine was never asked") gets INIT-1 UNSUPPORTED, naming the
decision; the same adapter refusing with a plain ``ValueError`` (its mutant: the refusal
passed off as the engine's) gets INIT-1 PASS.  Both run the real suite's INIT-1 tests in a
subprocess, so the suite's ``attempt``/``_watch.Call`` and the verdict rules are what is
judged, not a stand-in.
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
    (tmp_path / "checking_adapter.py").write_text(textwrap.dedent(_ADAPTER.format(refusal=refusal)))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpbcast.conformance",
            "--tpbcast-impl=checking_adapter:make",
            "--clauses=INIT-1",
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
    clauses = {c["id"]: c for c in json.loads(report.read_text())["clauses"]}
    assert clauses["INIT-1"]["verdict"] == verdict, proc.stdout
    if verdict == "UNSUPPORTED":
        assert "the engine was never asked" in clauses["INIT-1"]["message"]
