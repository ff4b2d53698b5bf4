"""The clause registry: validity, stable ids, SPEC.md freshness, anchors, selection, CLI."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tpbcast.conformance.spec import (
    AREAS,
    CAPABILITIES,
    DEFAULT_TRANSPORT,
    LEVELS,
    SPEC_MD_PATH,
    SPEC_TOML_PATH,
    Spec,
    SpecError,
    default_spec,
    load_spec,
    scopes,
    transport_names,
)
from tpbcast.conformance.spec import __main__ as spec_cli
from tpbcast.conformance.spec._markdown import render_markdown

ANCHOR_RE = re.compile(r'<a id="([^"]+)"></a>')
LOCAL_LINK_RE = re.compile(r"\]\(#([^)]+)\)")


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


# ------------------------------------------------------------------------- the registry


def test_registry_loads_and_is_large_enough(spec: Spec) -> None:
    assert len(spec) >= 40
    assert len(set(spec.ids)) == len(spec)
    assert spec.label.endswith(spec.version)


def test_every_area_has_clauses_and_levels_are_known(spec: Spec) -> None:
    assert [a.id for a in spec.areas] == list(AREAS)
    for area in AREAS:
        assert spec.by_area(area), area
    assert {c.level for c in spec} <= set(LEVELS)
    assert {c.level for c in spec} == set(LEVELS)  # all three levels are used


def test_ids_match_area_and_are_numbered_from_one_without_gaps(spec: Spec) -> None:
    retired = {r.id for r in spec.retired}
    for area in AREAS:
        numbers = sorted(c.number for c in spec.by_area(area))
        assert all(c.id == f"{area}-{c.number}" for c in spec.by_area(area))
        # gaps are allowed only where an id was retired
        missing = set(range(1, numbers[-1] + 1)) - set(numbers)
        assert {f"{area}-{n}" for n in missing} <= retired, (area, missing)


def test_every_clause_cites_its_source(spec: Spec) -> None:
    sources = ("PR #960", "Upstream §", "upstream §", "Framed §", "DESIGN.md", "Harness anchors")
    for c in spec:
        assert any(s in c.rationale for s in sources), (c.id, c.rationale)
        assert c.requirement.endswith("."), c.id


def test_capabilities_are_the_adapter_contracts(spec: Spec) -> None:
    adapter = pytest.importorskip("tpbcast.harness.adapter")
    assert set(CAPABILITIES) == {str(cap) for cap in adapter.Capability}
    used = {cap for c in spec for cap in c.capabilities}
    assert used <= set(CAPABILITIES)


def test_reference_decisions_are_encoded(spec: Spec) -> None:
    # DESIGN.md: root before the no-op cases is a SHOULD because upstream differs.
    assert spec["BCAST-4"].level == "SHOULD"
    assert spec["BCAST-4"].upstream == "deviates"
    # TP=1 re-init idempotent with a non-empty path; not copied from upstream.
    assert "world_size 1" in spec["INIT-4"].requirement
    assert spec["INIT-4"].upstream == "deviates"
    # One init deadline, not per peer; broadcast I/O deadline.
    assert "deadlines" in spec["TIME-2"].capabilities
    assert spec["TIME-5"].level == "MUST"
    # The MSG_NOSIGNAL / SIG_DFL clause and the "never Success" clause.
    assert "SIGPIPE at its default action" in spec["FAULT-1"].requirement
    assert "Success" in spec["FAULT-3"].requirement
    # Abstract namespace is optional.
    assert spec["SEC-10"].level == "MAY"
    fallback = spec.by_area("FALLBACK")
    assert all("dispatch" in c.capabilities for c in fallback)


def test_clauses_are_frozen(spec: Spec) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec["WIRE-1"].level = "MAY"  # type: ignore[misc]


def test_needs_test_is_must_or_should(spec: Spec) -> None:
    needing = spec.requiring_tests()
    assert needing
    assert {c.id for c in needing} == {c.id for c in spec if c.level in ("MUST", "SHOULD")}
    base_path = [spec[f"SEC-{n}"] for n in range(13, 18)]
    # wire v1's path helper (sun_path limit, RTP-LLM env, _dp suffix): scoped to uds-v1
    assert all(
        c.transports == ("uds-v1", "uds-framed") and c.capabilities == ("base_path",)
        for c in base_path
    )
    assert set(base_path) <= set(needing)


def test_every_clause_of_the_registry_declares_its_scope_explicitly() -> None:
    """The loader defaults a missing scope to core (small test registries); ours must say it,
    so a wire clause can never silently become a core one."""
    raw = tomllib.loads(SPEC_TOML_PATH.read_text())
    missing = [c["id"] for c in raw["clause"] if "scope" not in c]
    assert not missing, f"clauses without an explicit scope: {missing}"
    as_lists = ([c["scope"]] if isinstance(c["scope"], str) else c["scope"] for c in raw["clause"])
    named = {name for names in as_lists for name in names}
    assert named <= set(scopes())


def test_transport_clauses_apply_only_to_their_transport(spec: Spec) -> None:
    wire, core, dispatch = spec["WIRE-6"], spec["BCAST-1"], spec["FALLBACK-1"]
    assert (wire.scope, core.scope, dispatch.scope) == ("uds-v1", "core", "dispatch")
    shared = spec["WIRE-1"]  # the bootstrap both Unix-socket wires speak
    assert shared.transports == ("uds-v1", "uds-framed") and not shared.applies_to("shm")
    assert wire.applies_to("uds-v1") and not wire.applies_to("shm")
    assert core.applies_to("uds-v1") and core.applies_to("shm")
    assert dispatch.applies_to("shm")


def test_spec_scopes_come_from_the_harness_transport_table() -> None:
    from tpbcast.harness import adapter

    assert transport_names() == tuple(p.name for p in adapter.TRANSPORT_PROFILES)
    assert adapter.DEFAULT_TRANSPORT == DEFAULT_TRANSPORT
    assert scopes() == ("core", *transport_names(), "dispatch")


# ------------------------------------------------------------------------- selection


def test_select_by_area_prefix(spec: Spec) -> None:
    wire = spec.select(["WIRE"])
    assert wire == spec.by_area("WIRE")
    assert {c.area for c in wire} == {"WIRE"}


def test_select_by_id_is_exact_and_case_insensitive(spec: Spec) -> None:
    assert [c.id for c in spec.select(["init-1"])] == ["INIT-1"]
    # "INIT-1" must not pull INIT-10..INIT-14 in
    assert [c.id for c in spec.select(["INIT-1", "WIRE-2"])] == ["WIRE-2", "INIT-1"]


def test_select_nothing_means_everything_and_unknown_raises(spec: Spec) -> None:
    assert spec.select([]) == spec.clauses
    with pytest.raises(KeyError, match="unknown clause or area 'WIRE-999'"):
        spec.select(["WIRE-999"])
    with pytest.raises(KeyError, match="NOPE"):
        spec.select(["NOPE"])


def test_lookup(spec: Spec) -> None:
    assert spec["wire-1"].id == "WIRE-1"
    assert "WIRE-1" in spec
    assert "WIRE-999" not in spec
    with pytest.raises(KeyError, match="--list"):
        spec["WIRE-999"]


# ------------------------------------------------------------------------- SPEC.md


def test_spec_md_is_current(spec: Spec) -> None:
    assert SPEC_MD_PATH.read_text(encoding="utf-8") == render_markdown(spec), (
        "conformance/SPEC.md is stale: run 'python -m tpbcast.conformance.spec --write'"
    )


def test_spec_md_anchors_are_unique_and_cover_every_clause(spec: Spec) -> None:
    text = render_markdown(spec)
    anchors = ANCHOR_RE.findall(text)
    assert len(anchors) == len(set(anchors))
    assert {c.anchor for c in spec} <= set(anchors)
    assert {a.anchor for a in spec.areas} <= set(anchors)
    # every in-page link points at an anchor that exists
    links = set(LOCAL_LINK_RE.findall(text))
    assert links
    assert links <= set(anchors)


def test_spec_md_shows_every_clause_with_its_requirement(spec: Spec) -> None:
    text = render_markdown(spec)
    for c in spec:
        assert f"### {c.id} ({c.level_label}): " in text
    assert "&lt;base_path&gt;_0.sock" in text  # titles are escaped outside code spans
    for noted in spec.noted:
        assert noted.source in text


# ------------------------------------------------------------------------- validation

_AREA_TOML = "\n".join(f'[[area]]\nid = "{a}"\ntitle = "t {a}"\nsummary = "s {a}"\n' for a in AREAS)


def _clause(cid: str, **over: str) -> str:
    fields = {
        "id": cid,
        "area": cid.split("-", maxsplit=1)[0],
        "level": "MUST",
        "title": "A title",
        "requirement": "It does the thing.",
        "rationale": "PR #960 review round 1 P2.",
    }
    fields.update(over)
    body = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in fields.items())
    return f"[[clause]]\n{body}\n"


def _registry(tmp_path: Path, *clauses: str, retired: str = "[]") -> Path:
    base = [_clause(f"{a}-1") for a in AREAS]
    text = (
        '[spec]\nname = "test spec"\nversion = "0"\n'
        f"retired = {retired}\n{_AREA_TOML}\n" + "\n".join([*base, *clauses])
    )
    path = tmp_path / "clauses.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_minimal_registry_is_valid(tmp_path: Path) -> None:
    spec = load_spec(_registry(tmp_path))
    assert len(spec) == len(AREAS)


@pytest.mark.parametrize(
    ("extra", "retired", "problem"),
    [
        (_clause("WIRE-1"), "[]", "WIRE-1: duplicate id"),
        (_clause("WIRE-2"), '[{ id = "WIRE-2", reason = "gone" }]', "retired"),
        (_clause("WIRE-2", level="MUSTNT"), "[]", "level 'MUSTNT'"),
        (_clause("WIRE-2", area="INIT"), "[]", "does not match the id prefix"),
        (_clause("NOPE-1", area="NOPE"), "[]", "unknown area"),
        (_clause("WIRE-02"), "[]", "not of the form AREA-N"),
        (_clause("WIRE-2", requirement="One. Two."), "[]", "ONE sentence"),
        (_clause("WIRE-2", requirement="no period"), "[]", "ending in '.'"),
        (_clause("WIRE-2", scope="everywhere"), "[]", "scope 'everywhere'"),
        (_clause("WIRE-2", upstream="maybe"), "[]", "upstream 'maybe'"),
        (_clause("WIRE-2", levle="MUST"), "[]", "unknown keys ['levle']"),
        (_clause("WIRE-2", rationale=""), "[]", "'rationale' must be a non-empty string"),
    ],
)
def test_invalid_registries_are_rejected(
    tmp_path: Path, extra: str, retired: str, problem: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_registry(tmp_path, extra, retired=retired))
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_unknown_capability_is_rejected(tmp_path: Path) -> None:
    bad = _clause("WIRE-2") + 'capabilities = ["teleport"]\n'
    with pytest.raises(SpecError, match="unknown capability 'teleport'"):
        load_spec(_registry(tmp_path, bad))


def test_unknown_engine_surface_is_rejected(tmp_path: Path) -> None:
    bad = _clause("WIRE-2") + 'about = ["telepathy"]\n'
    with pytest.raises(SpecError, match="unknown engine surface 'telepathy'"):
        load_spec(_registry(tmp_path, bad))


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = _registry(tmp_path, _clause("WIRE-1"), _clause("INIT-2", level="SHALL"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.problems) == 2
    assert str(path) in str(info.value)


def test_a_missing_area_is_rejected(tmp_path: Path) -> None:
    path = _registry(tmp_path)
    text = path.read_text(encoding="utf-8").replace(_clause("HYG-1"), "")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match="area HYG has no clause"):
        load_spec(path)


# ------------------------------------------------------------------------- command line


def test_cli_check_write_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "SPEC.md"
    assert spec_cli.main(["--check", "--output", str(out)]) == 1  # missing = stale
    assert "stale" in capsys.readouterr().err
    assert spec_cli.main(["--write", "--output", str(out)]) == 0
    assert spec_cli.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    assert spec_cli.main(["--check", "--output", str(out)]) == 1
    capsys.readouterr()
    assert spec_cli.main(["--list", "SEC", "WIRE-1"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("WIRE-1 ")
    assert all(line.startswith(("WIRE-1 ", "SEC-")) for line in listed)
    assert spec_cli.main(["--list", "BOGUS-1"]) == 2


def test_module_entry_point_checks_the_packaged_spec_md() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tpbcast.conformance.spec", "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeWarning" not in proc.stderr  # the lazy facade avoids a double import


# ------------------------------------------------------------------------- stable ids

ID_LOCK = Path(__file__).with_name("clause_ids.lock")


def test_published_ids_are_never_dropped_or_renumbered(spec: Spec) -> None:
    """Every id ever published stays in the registry or moves to ``[spec] retired``.

    Tests and archived reports cite ids; deleting or renumbering one silently changes what
    an old report means.  New clauses must be appended to the lock file as well.
    """
    locked = ID_LOCK.read_text(encoding="utf-8").split()
    retired = {r.id for r in spec.retired}
    dropped = [cid for cid in locked if cid not in spec and cid not in retired]
    assert not dropped, f"ids dropped without retiring them: {dropped}"
    new = [cid for cid in spec.ids if cid not in locked]
    assert not new, (
        f"new clause ids {new}: append them to {ID_LOCK.name} "
        "(python -m tpbcast.conformance.spec --list | awk '{print $1}')"
    )


def test_a_per_transport_level_is_resolved_for_the_judged_implementation():
    """FAULT-12 is SHOULD in general and MUST for uds-framed: the results of a uds-framed
    implementation (and only those) count it as a MUST clause; --list and SPEC.md say both."""
    from tpbcast.conformance._results import ImplementationInfo, aggregate
    from tpbcast.conformance.plugin import list_lines

    spec = load_spec()
    clause = spec["FAULT-12"]
    assert clause.level == "SHOULD" and clause.level_on("uds-framed") == "MUST"
    assert clause.level_on("uds-v1") == "SHOULD" and clause.level_on("shm") == "SHOULD"
    assert clause.level_label == "SHOULD (MUST for uds-framed)"
    for transport, level in (("uds-framed", "MUST"), ("uds-v1", "SHOULD")):
        suite = aggregate(
            spec, [], implementation=ImplementationInfo(transport=transport), clauses=[clause]
        )
        assert suite.clauses[0].clause.level == level
    assert any("FAULT-12" in line and "[MUST for uds-framed]" in line for line in list_lines())
    assert "SHOULD (MUST for uds-framed)" in SPEC_MD_PATH.read_text()


def test_a_bad_per_transport_level_is_refused(tmp_path):
    text = SPEC_TOML_PATH.read_text().replace(
        'level_by_transport = { "uds-framed" = "MUST" }',
        'level_by_transport = { "uds-framd" = "MUST", "uds-v1" = "SHOULD" }',
    )
    bad = tmp_path / "clauses.toml"
    bad.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    problems = "\n".join(info.value.problems)
    assert "'uds-framd', not a transport profile" in problems
    assert "repeats the clause's own level" in problems
