"""Which tests of ``_DistTestBase`` the example runs, and the environment they read."""

from __future__ import annotations

import os
from typing import Final

WORLD_SIZE: Final = 2

#: CPU (gloo) tests of ``torch.testing._internal.distributed.distributed_test
#: .DistributedTest._DistTestBase``, by name.  Collectives, point-to-point, object
#: collectives and group API; the ``*_group_*`` ones need 3 ranks and skip at world size 2
#: by exit code (torch's ``TEST_SKIPS["small_worldsize"]``, 73), ``test_ddp_has_finalized``
#: needs NCCL and skips in the parent (a ``unittest.skip`` decorator).
SLICE: Final = (
    "test_get_rank",
    "test_get_backend",
    "test_get_rank_size_full_group",
    "test_destroy_full_group",
    "test_broadcast",
    "test_broadcast_full_group",
    "test_broadcast_group",
    "test_broadcast_object_list",
    "test_reduce_sum",
    "test_reduce_product",
    "test_reduce_min",
    "test_reduce_max",
    "test_reduce_full_group_sum",
    "test_reduce_full_group_product",
    "test_reduce_full_group_min",
    "test_reduce_full_group_max",
    "test_reduce_sum_twice",
    "test_reduce_group_sum",
    "test_all_reduce_sum",
    "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex",
    "test_all_reduce_product",
    "test_all_reduce_min",
    "test_all_reduce_max",
    "test_all_reduce_full_group_sum",
    "test_all_reduce_full_group_product",
    "test_all_reduce_full_group_min",
    "test_all_reduce_full_group_max",
    "test_all_reduce_group_sum",
    "test_all_reduce_coalesced_sum",
    "test_all_reduce_coalesced_max",
    "test_scatter",
    "test_scatter_checks",
    "test_scatter_full_group",
    "test_scatter_object_list",
    "test_gather",
    "test_gather_checks",
    "test_gather_full_group",
    "test_gather_object",
    "test_all_gather",
    "test_all_gather_complex",
    "test_all_gather_full_group",
    "test_all_gather_coalesced_simple",
    "test_all_gather_object_default_pg",
    "test_all_to_all_single_equal_split",
    "test_barrier",
    "test_barrier_full_group",
    "test_send_recv",
    "test_send_recv_any_source",
    "test_send_recv_with_tag",
    "test_isend",
    "test_irecv",
    "test_batch_isend_irecv_gloo",
    "test_batch_isend_irecv_gloo_tags",
    "test_ddp_has_finalized",
)


def configure(world_size: int = WORLD_SIZE) -> None:
    """Set what ``distributed_test`` reads at import (``BACKEND``, ``WORLD_SIZE``); must run
    before the module is imported, in the process that imports it."""
    os.environ["BACKEND"] = "gloo"
    os.environ["WORLD_SIZE"] = str(world_size)
