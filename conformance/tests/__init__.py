"""The conformance tests: each cites the clause ids it judges (``@pytest.mark.clause``).

Run them with ``python -m tpbcast.conformance`` (which loads the conformance plugin);
they talk to the implementation only through the adapter contract (DESIGN.md) and never
import ``tpbcast.reference_impl``.  Shared building blocks live in ``_support.py``.
"""
