"""The harness façade exports exactly its public names, each one defined."""

from __future__ import annotations

import inspect

from tpbcast import harness


def test_all_names_exist_and_match_the_public_namespace() -> None:
    assert len(set(harness.__all__)) == len(harness.__all__)
    assert all(hasattr(harness, name) for name in harness.__all__)
    public = {
        name
        for name, value in vars(harness).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert set(harness.__all__) == public
