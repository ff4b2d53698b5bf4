"""``global_mean``: the element-wise mean of a tensor over the ranks of a process group."""

from __future__ import annotations

from typing import Any


def global_mean(values: Any, group: Any = None) -> Any:
    """Return the element-wise mean of ``values`` over every rank of ``group``.

    One ``all_reduce`` (SUM) on a float64 copy, divided by the group size; ``values`` is
    left untouched.  Every rank of the group must call it (it is a collective).
    """
    import torch
    import torch.distributed as dist

    total = values.detach().to(torch.float64, copy=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return total / dist.get_world_size(group)
