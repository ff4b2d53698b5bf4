"""The same torch test class on two runners: torch's spawn runner and tpbcast's fork harness.

Both are torch's own ``TestDistBackend`` + ``DistributedTest._DistTestBase`` imported from
the installed wheel (nothing copied) and differ in one base class.  Tests outside
:data:`~torchsuite.SLICE` are hidden from the loaders (set to ``None``: not callable), so
``python -m unittest`` and pytest collect the slice only.  The classes live at module
level because torch's spawn runner pickles ``cls._run`` by name for its children.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ._slice import SLICE, configure

configure()  # before distributed_test is imported: it reads BACKEND/WORLD_SIZE once

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    Barrier,
    DistributedTest,
    TestDistBackend,
    default_pg_timeout,
)

from tpbcast.fixtures.torch import MultiProcessTestCase  # noqa: E402

__all__ = ["TestDistBackendOnHarness", "TestDistBackendOnWarmGroup", "TestDistBackendWithSpawn"]


class TestDistBackendOnHarness(
    MultiProcessTestCase, TestDistBackend, DistributedTest._DistTestBase
):
    """On tpbcast's fork harness: the one change is the first base class."""

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()  # as torch's own test file does; forks nothing here


class TestDistBackendOnWarmGroup(
    MultiProcessTestCase, TestDistBackend, DistributedTest._DistTestBase
):
    """On one warm group per class: the process group is made once per fork
    (``tpbcast_warm_setup``) and each test runs only its method in the ranks; torch's
    per-test ``init_process_group`` and its two file barriers around each test are what
    the warm mode saves.  A test that destroys the default group re-forks the group."""

    tpbcast_warm = True

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()

    @classmethod
    def tpbcast_warm_setup(cls, rank: int, world_size: int, store_path: str) -> None:
        import torch.distributed as dist

        dist.init_process_group(
            init_method=f"file://{store_path}",
            backend="gloo",
            world_size=world_size,
            rank=rank,
            timeout=timedelta(seconds=default_pg_timeout),
        )

    @classmethod
    def tpbcast_warm_test(
        cls, rank: int, test_name: str, file_name: str, kwargs: dict[str, Any]
    ) -> None:
        test = cls(test_name)
        test.rank = rank
        test.file_name = file_name
        Barrier.barrier_id = 0  # what a fresh rank starts from (the parent's Barrier.init)
        test.run_test(test_name, None)


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
_hide_others(TestDistBackendOnWarmGroup)
_hide_others(TestDistBackendWithSpawn)
