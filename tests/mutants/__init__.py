"""One-defect implementations: each breaks the reference in exactly one way.

A conformance suite is only as trustworthy as its ability to fail wrong implementations.
Each module ``m_<defect>.py`` here is the smallest wrong change of one behaviour, applied
to the reference (kept apart from it: the reference itself stays correct):

* ``DEFECT``: one sentence, what is wrong (shown in the kill matrix);
* ``KILLS``: the clause ids the suite must judge FAIL for it (its intended clauses);
* ``FAST``: True if CI's quick subset runs it (cheap to judge: its ``KILLS`` clauses run
  in a few seconds);
* ``MUST_PASS`` (optional, default False): the defect must break no MUST clause (a control
  row: ``m_wording`` changes only error messages, ``m_no_capabilities`` only what it
  declares), so any MUST FAIL or ERROR in its row is a defect of the suite;
* ``make()``: the adapter factory (``--tpbcast-impl mutants.m_<defect>:make`` with
  ``tests`` on ``PYTHONPATH``).

A mutant may monkeypatch reference modules at import time: each suite run judges one
implementation in its own processes, so the patch never leaks into another run.  The
matrix (``nox -s mutants``, ``python tools/mutants.py``; ``tests/test_mutants.py`` runs
the FAST ones in CI, limited to their ``KILLS``) runs the suite against every
mutant and writes ``reports/mutants/`` (mutant x clause, MUST/SHOULD marked).
"""
