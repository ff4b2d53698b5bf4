"""A slice of torch's own ``DistributedTest._DistTestBase`` on two runners.

torch's distributed test module reads ``BACKEND`` and ``WORLD_SIZE`` from the environment
once, at import (module constants), so :func:`configure` must run before it is imported;
:mod:`torchsuite.cases` calls it first.  Importing this package imports no torch.
"""

from __future__ import annotations

from ._slice import SLICE, WORLD_SIZE, configure

__all__ = ["SLICE", "WORLD_SIZE", "configure"]
