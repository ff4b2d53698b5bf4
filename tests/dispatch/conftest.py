"""Import torch (and numpy) once in the pytest process, never run a torch op here.

Forked ranks then inherit the loaded modules (~10 ms per fork instead of ~1 s
of ``import torch`` per rank).  The parent must not run a torch op: the OpenMP
pool would hang forked children (DESIGN.md, "Fork safety").
"""

from __future__ import annotations

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torch")
pytest.importorskip("torch.distributed")
