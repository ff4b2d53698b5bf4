"""The reference declaring no capabilities (as a bare ctypes binding of upstream would).

Nothing is wrong with its behaviour: every clause that needs a capability becomes
UNSUPPORTED, and every clause it is judged on holds.  What it proves is the report: the
MUST clauses it was not judged on are counted and named (``must_not_judged``), with the
capabilities that would unlock them, and the headline never claims full conformance
("PASS for the judged MUST clauses only", not "every MUST clause was judged and holds").
It has no clause to FAIL (``KILLS`` is empty); ``tests/test_mutants.py`` checks the
summary instead, and the matrix flags any MUST FAIL it gets.
"""

from __future__ import annotations

from ._base import Delegating

DEFECT = "declares no capabilities (behaviour is the reference's): only the core is judged"
KILLS: tuple[str, ...] = ()
FAST = False
# Beyond the convention: no MUST clause may FAIL (see m_wording).
MUST_PASS = True


class NoCapabilities(Delegating):
    capabilities: frozenset[str] = frozenset()
    name = "m_no_capabilities"


def make() -> NoCapabilities:
    return NoCapabilities()
