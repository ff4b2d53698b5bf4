"""``python -m tpbcast.conformance.adapters.exec [--path]``: print or become the native
example's driver (see :mod:`.native`)."""

from __future__ import annotations

import sys

from .native import main

sys.exit(main(sys.argv))
