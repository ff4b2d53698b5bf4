"""distmean: the mean of a tensor across torch.distributed ranks, and a shape-hint channel.

Importing distmean is cheap: torch is imported by the functions that need it.
"""

from __future__ import annotations

from ._hints import HintChannel, open_hint_channel
from ._mean import global_mean

__all__ = ["HintChannel", "global_mean", "open_hint_channel"]
