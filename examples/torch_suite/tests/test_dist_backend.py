"""torch's own ``_DistTestBase`` slice, collected by pytest and run on tpbcast's harness.

The class is imported from ``torchsuite.cases``: torch's ``TestDistBackend`` +
``DistributedTest._DistTestBase`` from the installed wheel, with
``tpbcast.fixtures.torch.MultiProcessTestCase`` as the first base.  pytest collects it like
any ``unittest.TestCase``; ``python -m unittest torchsuite.cases.TestDistBackendOnHarness``
runs the same tests without pytest.
"""

from __future__ import annotations

from torchsuite.cases import TestDistBackendOnHarness

__all__ = ["TestDistBackendOnHarness"]
