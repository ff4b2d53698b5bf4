"""DESIGN.md's layer diagram says what the import-linter contracts enforce.

The diagram is what a newcomer reads; the contracts in pyproject.toml are what lint
checks.  If one changes without the other, this fails and names the difference.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tpbcast import harness

REPO = Path(__file__).resolve().parent.parent
DESIGN = (REPO / "DESIGN.md").read_text(encoding="utf-8")
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "importlinter"
]["contracts"]


def _diagram() -> str:
    section = DESIGN.split("## Layers and imports", 1)[1]
    return section.split("```", 2)[1]


def _contract(name_start: str) -> dict[str, object]:
    found = [c for c in CONTRACTS if str(c["name"]).startswith(name_start)]
    assert len(found) == 1, f"one import-linter contract named {name_start!r}: {found}"
    return found[0]


def test_the_layer_chain_is_the_layers_contract() -> None:
    first = next(line for line in _diagram().splitlines() if line.strip())
    chain = re.findall(r"tpbcast\.\w+", first)
    assert chain == _contract("Layers:")["layers"]


def _drawn(label: str) -> list[str]:
    line = next(ln for ln in _diagram().splitlines() if label in ln)
    return [word for word in line.split(label, 1)[1].split("(")[0].split() if word != "|"]


def _layer(index: int) -> list[str]:
    return [t.strip() for t in str(_contract("Harness:")["layers"][index]).split("|")]  # type: ignore[index]


def test_the_harness_tiers_are_the_tier_contract_and_the_facade() -> None:
    assert _drawn("façade tiers:") == _layer(0)
    assert _drawn("leaf tiers:") == _layer(2)
    assert tuple(sorted(_layer(0) + _layer(2))) == harness.TIERS


def test_every_private_harness_module_is_placed_in_the_tier_contract() -> None:
    placed = set(str(_contract("Harness:")["layers"][1]).replace(" ", "").split(":"))  # type: ignore[index]
    on_disk = {p.stem for p in (REPO / "harness").glob("_*.py") if p.stem != "__init__"}
    assert placed == on_disk, (
        f"not placed: {sorted(on_disk - placed)}; gone: {sorted(placed - on_disk)}"
    )


def test_the_reference_stands_alone() -> None:
    contract = _contract("reference_impl depends on none of ours")
    assert contract["source_modules"] == ["tpbcast.reference_impl"]
    assert "imports none of ours" in _diagram()
