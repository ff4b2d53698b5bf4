"""The same torch test class on two runners: torch's spawn runner and tpbcast's fork harness.

Both are torch's own ``TestDistBackend`` + ``DistributedTest._DistTestBase`` imported from
the installed wheel (nothing copied) and differ in one base class.  Tests outside
:data:`~torchsuite.SLICE` are hidden from the loaders (set to ``None``: not callable), so
``python -m unittest`` and pytest collect the slice only.  The classes live at module
level because torch's spawn runner pickles ``cls._run`` by name for its children.
"""

from __future__ import annotations

from typing import Any

from ._slice import SLICE, configure

configure()  # before distributed_test is imported: it reads BACKEND/WORLD_SIZE once

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

from tpbcast.fixtures.torch import MultiProcessTestCase  # noqa: E402

__all__ = ["TestDistBackendOnHarness", "TestDistBackendWithSpawn"]


class TestDistBackendOnHarness(
    MultiProcessTestCase, TestDistBackend, DistributedTest._DistTestBase
):
    """On tpbcast's fork harness: the one change is the first base class."""

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()  # as torch's own test file does; forks nothing here


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """torch's own arrangement (``test/distributed/test_distributed_spawn.py``)."""

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()


def _hide_others(cls: Any) -> None:
    for name in dir(DistributedTest._DistTestBase):
        if name.startswith("test") and name not in SLICE:
            setattr(cls, name, None)


_hide_others(TestDistBackendOnHarness)
_hide_others(TestDistBackendWithSpawn)
