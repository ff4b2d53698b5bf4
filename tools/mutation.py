"""Mutation score of ``reference_impl`` with mutmut 3 (``nox -s mutation``).

mutmut makes many one-token mutants of every function of the reference (``<`` for
``<=``, ``None`` for an argument, a string changed, a statement dropped, ...) and runs
the tests that call the function against each; a mutant no test fails *survived*.
This scores the reference's own self-tests (``tests/reference``, ``tests/dispatch``).
``nox -s mutants`` is a different thing: hand-written one-defect implementations
judged by the conformance suite (it scores the suite).

Why a staging tree (``.mutation/``, gitignored).  mutmut names a mutant after its
file's path relative to where mutmut runs (``reference_impl/_wire.py`` ->
``reference_impl._wire``) and each trampoline runs the mutant only if that name is the
function's ``__module__``.  The folder installs as ``tpbcast.reference_impl``, so run
from the repository root every mutant silently ran the original code.  The stage
holds ``tpbcast/reference_impl/`` (the source at ``--rev``), ``tests/`` and
``pyproject.toml`` (whose ``[tool.mutmut]`` mutmut reads), plus the fork-stats plugin
(``tools/mutmut_fork_stats.py``: hits in forked ranks count when mutmut maps tests to
functions).  mutmut copies it all to ``.mutation/mutants/`` and puts that first on
``sys.path``: the namespace package ``tpbcast`` gets it as its first portion, so
``tpbcast.reference_impl`` is the mutated copy while ``tpbcast.harness`` and the other
layers still come from the editable install.

    python tools/mutation.py                       # the measured plan (see DEFAULT_SAMPLE)
    python tools/mutation.py --full                # every mutant not yet judged (hours)
    python tools/mutation.py --module _wire --module _io   # (re)run these modules' mutants
    python tools/mutation.py --rerun-survivors     # run the survivors again (after new tests)
    python tools/mutation.py --fresh               # forget every cached verdict first
    python tools/mutation.py --report-only         # rebuild reports/mutation/ from the cache
    python tools/mutation.py --rejudge tests/reference/test_mutation_kills.py  # vs new tests

Reports (``reports/mutation/``): ``summary.md`` (per module and total: mutants, killed,
timeout, survived, no tests, suspicious, equivalent, both scores), ``survivors.md``
(every mutant not detected, with its diff and its triage), ``results.json``.
Equivalent mutants are listed with a reason in ``tools/mutation_equivalents*.toml`` (one
file per area, so two people triaging do not edit one file),
matched by function and changed lines (mutmut's numbers shift when the source changes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / ".mutation"
PACKAGE = "tpbcast/reference_impl"
MODULE_PREFIX = "tpbcast.reference_impl."
REPORT_DIR = ROOT / "reports" / "mutation"
EQUIVALENTS_GLOB = "mutation_equivalents*.toml"  # in tools/
PLUGIN = ROOT / "tools" / "mutmut_fork_stats.py"
DEFAULT_CHILDREN = 2

# mutmut's exit-code vocabulary (mutmut.stats.status_by_exit_code), grouped.
DETECTED = ("killed", "timeout", "segfault")
UNDETECTED = ("survived", "no tests", "suspicious")


def _status(code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return str(status_by_exit_code[code])


# -- staging -------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _files_at(rev: str | None) -> dict[str, bytes]:
    """reference_impl/*, tests/** and pyproject.toml at ``rev`` (None: the work tree)."""
    paths = ("reference_impl", "tests", "pyproject.toml")
    files: dict[str, bytes] = {}
    if rev is None:
        for top in paths:
            base = ROOT / top
            for path in [base] if base.is_file() else sorted(base.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    files[str(path.relative_to(ROOT))] = path.read_bytes()
        return files
    raw = subprocess.run(
        ["git", "archive", "--format=tar", rev, *paths], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                files[member.name] = handle.read()
    return files


def _sync(target: Path, data: bytes) -> bool:
    """Write only when the content differs (True if written): an unchanged file keeps its
    mtime, which is how mutmut knows it may keep that file's mutants and verdicts."""
    if target.is_file() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return True


def build_stage(rev: str | None) -> None:
    files = _files_at(rev)
    wanted: set[Path] = set()
    source_changed = False
    for name, data in files.items():
        source = name.startswith("reference_impl/")
        target = STAGE / "tpbcast" / name if source else STAGE / name
        source_changed |= _sync(target, data) and source
        wanted.add(target)
    if source_changed:
        # mutmut maps tests to functions once (its stats pass) and afterwards only adds
        # new TESTS: a function new since then would be "no tests".  Map again.
        (STAGE / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    _sync(STAGE / PLUGIN.name, PLUGIN.read_bytes())
    wanted.add(STAGE / PLUGIN.name)
    for sub in ("tpbcast", "tests"):
        for path in sorted((STAGE / sub).rglob("*"), reverse=True):
            if path.is_file() and path not in wanted and "__pycache__" not in path.parts:
                path.unlink()
    # mutmut copies tests/ into mutants/ over the old copy: drop the old copy so a
    # deleted test file does not linger there.
    shutil.rmtree(STAGE / "mutants" / "tests", ignore_errors=True)


# -- running ---------------------------------------------------------------------------


def _mutmut(args: list[str], log: Path, stage: Path = STAGE) -> int:
    exe = Path(sys.executable).with_name("mutmut")
    argv = [str(exe) if exe.exists() else "mutmut", *args]
    print("+", " ".join(argv), f"(cwd {stage}, log {log})", flush=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    with log.open("a") as out:
        out.write(f"\n=== {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC: {' '.join(argv)}\n")
        out.flush()
        return subprocess.run(
            argv, cwd=stage, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        ).returncode


def _meta_files(stage: Path = STAGE) -> list[Path]:
    return sorted((stage / "mutants" / PACKAGE).glob("*.py.meta"))


def _verdicts(stage: Path = STAGE) -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for meta in _meta_files(stage):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def _module_of(name: str) -> str:
    rest = name[len(MODULE_PREFIX) :]
    return rest.split(".", 1)[0] if "." in rest else "__init__"


def survivors(modules: list[str]) -> list[str]:
    return [
        name
        for name, code in _verdicts().items()
        if _status(code) in UNDETECTED and (not modules or _module_of(name) in modules)
    ]


def regenerate() -> None:
    """Make ``mutants/`` match the staged source before choosing mutants by name (mutmut
    does this itself at the start of ``run``; a changed function's verdicts are reset)."""
    old = Path.cwd()
    os.chdir(STAGE)
    try:
        from mutmut.__main__ import create_mutants
        from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

        copy_src_dir()
        copy_also_copy_files()
        create_mutants(DEFAULT_CHILDREN)
    finally:
        os.chdir(old)


def pending_names(modules: list[str]) -> list[str]:
    """Of ``modules``: every mutant with an undetected verdict (judged again, e.g. after
    new tests), and every one without a verdict that is in scope -- in the random sample
    for a sampled module (same seed and size, drawn again over the current mutants), all
    of them for the others."""
    sizes, seed = _sample_sizes()
    sampled = [m for m in modules if m in sizes]
    drawn = {n for m in sampled for n in sample([m], sizes[m], seed)}
    names = []
    verdicts = _verdicts()
    for name, code in verdicts.items():
        module = _module_of(name)
        if module not in modules:
            continue
        unjudged_in_scope = code is None and (module not in sampled or name in drawn)
        if unjudged_in_scope or (code is not None and _status(code) in UNDETECTED):
            names.append(name)
    # A survivor already triaged (equivalent or untestable) would only survive again, at
    # the full price of its tests: keep its verdict.
    triaged = _triaged([n for n in names if verdicts[n] is not None])
    return [n for n in names if n not in triaged]


def _triaged(names: list[str]) -> set[str]:
    equivalents = load_equivalents()
    found = set()
    for name, diff in _diffs(names).items():
        removed, added = _changed_lines(diff)
        if any(
            eq.function == _function_of(name) and (eq.removed, eq.added) == (removed, added)
            for eq in equivalents
        ):
            found.add(name)
    return found


# The measured plan (what ``nox -s mutation`` runs without options): small modules whole,
# the others a seeded random sample of this many mutants each.  A full run (--full) is
# about 3,700 mutants: hours on two shared cores, where a surviving mutant costs its
# covering tests' whole time (~1 min under load).
ALL_MODULES = (
    "_bootstrap", "_broadcaster", "_buffers", "_config", "_dispatch", "_dispatch_adapter",
    "_dispatch_bootstrap", "_engines", "_errors", "_io", "_paths", "_wire",
    "conformance_adapter",
)  # fmt: skip
DEFAULT_SAMPLE = {
    "_io": 50, "_broadcaster": 50, "_bootstrap": 50, "_paths": 50, "_buffers": 50,
    "_errors": 50, "_dispatch": 12, "_dispatch_bootstrap": 12, "_engines": 12,
    "_dispatch_adapter": 12, "conformance_adapter": 12,
}  # fmt: skip
DEFAULT_SEED = 20261201


def _sample_sizes() -> tuple[dict[str, int], int]:
    """Sample size per sampled module, and the seed (``.mutation/sample.json``, written by
    ``--sample``; the default plan without it)."""
    path = STAGE / "sample.json"
    if not path.exists():
        return dict(DEFAULT_SAMPLE), DEFAULT_SEED
    info = json.loads(path.read_text())
    return dict(info.get("sizes", {})), int(info.get("seed", 0))


def _sample_nothing(seed: int) -> None:
    """A full run puts every mutant in scope from now on: later ``--pending`` runs (the
    mutants of a changed function) must not fall back to the default sample."""
    STAGE.mkdir(exist_ok=True)
    (STAGE / "sample.json").write_text(json.dumps({"seed": seed, "sizes": {}}))


def sample(modules: list[str], size: int, seed: int) -> list[str]:
    """``size`` mutants of each module drawn at random (seeded), among all of its mutants."""
    by_module: dict[str, list[str]] = {}
    for name in sorted(_verdicts()):
        by_module.setdefault(_module_of(name), []).append(name)
    chosen: list[str] = []
    for module in modules:
        names = by_module.get(module, [])
        rng = random.Random(f"{seed}:{module}")  # noqa: S311 - a reproducible draw
        chosen += rng.sample(names, min(size, len(names)))
    return chosen


# -- re-judging survivors with the tests added since ------------------------------------

REJUDGE_STAGE = ROOT / ".mutation-rejudge"
REJUDGED = STAGE / "rejudged.json"


def rejudge(paths: list[str], rev: str, children: int, modules: list[str]) -> dict[str, Any]:
    """Judge the untriaged survivors again, running only the tests in ``paths``.

    A survivor of a run passed every test that covers it; its verdict against the whole
    suite now depends only on the tests added since.  Running just those (in a second
    stage whose ``[tool.mutmut]`` selects them) takes minutes where re-running each
    survivor's whole covering set takes hours (``--module`` limits it further).  The
    second stage holds the very source the first one measured, so mutmut names the same
    mutants (each pair's diff is compared); a detected verdict is copied into the first
    stage and listed in ``rejudged.json``, which the summary names.
    """
    verdicts = _verdicts()
    undetected = [n for n, c in verdicts.items() if c is not None and _status(c) in UNDETECTED]
    names = sorted(
        n for n in set(undetected) - _triaged(undetected) if not modules or _module_of(n) in modules
    )
    files = _files_at(rev)
    staged_source = {
        str(p.relative_to(STAGE)): p.read_bytes()
        for p in (STAGE / "tpbcast").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    at_rev = {f"tpbcast/{k}": v for k, v in files.items() if k.startswith("reference_impl/")}
    at_rev = {k: v for k, v in at_rev.items() if k.endswith(".py")}
    if staged_source != at_rev:
        raise SystemExit(f"the staged reference is not the one at {rev}: run the full plan first")
    shutil.rmtree(REJUDGE_STAGE, ignore_errors=True)
    for name, data in files.items():
        target = REJUDGE_STAGE / ("tpbcast/" + name if name.startswith("reference_impl/") else name)
        _sync(target, data)
    config = (REJUDGE_STAGE / "pyproject.toml").read_text()
    selection = 'pytest_add_cli_args_test_selection = ["tests/reference", "tests/dispatch"]'
    if selection not in config:
        raise SystemExit(f"pyproject.toml at {rev} does not select the tests as expected")
    config = config.replace(selection, f"pytest_add_cli_args_test_selection = {json.dumps(paths)}")
    (REJUDGE_STAGE / "pyproject.toml").write_text(config)
    _sync(REJUDGE_STAGE / PLUGIN.name, PLUGIN.read_bytes())
    started, load_before = time.monotonic(), _loadavg()
    code = 0
    if names:  # without names, `mutmut run` would judge every mutant
        code = _mutmut(
            ["run", "--max-children", str(children), *names],
            REJUDGE_STAGE / "mutmut.log",
            stage=REJUDGE_STAGE,
        )
    again = _verdicts(REJUDGE_STAGE)
    detected = [n for n in names if again.get(n) is not None and _status(again[n]) in DETECTED]
    mismatched = [n for n in detected if _diff_in(REJUDGE_STAGE, n) != _diff_in(STAGE, n)]
    if mismatched:
        raise SystemExit(f"the two stages name different mutants: {mismatched[:5]}")
    for meta in _meta_files():
        data = json.loads(meta.read_text())
        hits = [n for n in detected if n in data["exit_code_by_key"]]
        for name in hits:
            data["exit_code_by_key"][name] = again[name]
        if hits:
            meta.write_text(json.dumps(data, indent=4))
    record = json.loads(REJUDGED.read_text()) if REJUDGED.exists() else {}
    for name in detected:
        record[name] = {"exit_code": again[name], "tests": paths, "commit": _git("rev-parse", rev)}
    REJUDGED.write_text(json.dumps(record, indent=1, ensure_ascii=False))
    return {
        "finished": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "seconds": time.monotonic() - started,
        "mode": f"re-judge of {len(names)} untriaged survivors with only "
        + ", ".join(paths)
        + f" at {rev}: {len(detected)} detected",
        "load_before": load_before,
        "load_after": _loadavg(),
        "mutmut_exit": code,
    }


def _diff_in(stage: Path, name: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    old = Path.cwd()
    os.chdir(stage)
    try:
        return str(get_diff_for_mutant(name))
    finally:
        os.chdir(old)


# -- reporting -------------------------------------------------------------------------


@dataclass(frozen=True)
class Equivalent:
    """A triaged survivor: ``kind`` "equivalent" (no behaviour changes; subtracted in the
    score after equivalents) or "untestable" (behaviour changes, but no test can run it on
    this machine, e.g. the NCCL branch without a GPU; still counted as not detected)."""

    function: str
    removed: tuple[str, ...]
    added: tuple[str, ...]
    reason: str
    kind: str = "equivalent"


def _changed_lines(diff: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    lines = diff.splitlines()[2:]  # after the ---/+++ header
    removed = tuple(ln[1:].strip() for ln in lines if ln.startswith("-"))
    added = tuple(ln[1:].strip() for ln in lines if ln.startswith("+"))
    return removed, added


def _lines(value: object) -> tuple[str, ...]:
    text = value if isinstance(value, str) else "\n".join(str(v) for v in value)  # type: ignore[attr-defined]
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def load_equivalents() -> list[Equivalent]:
    entries = [
        entry
        for path in sorted((ROOT / "tools").glob(EQUIVALENTS_GLOB))
        for entry in tomllib.loads(path.read_text()).get("equivalent", [])
    ]
    return [
        Equivalent(
            e["function"],
            _lines(e["removed"]),
            _lines(e["added"]),
            e["reason"].strip(),
            e.get("kind", "equivalent"),
        )
        for e in entries
    ]


def _function_of(name: str) -> str:
    return name.partition("__mutmut_")[0]


def _short_function(name: str) -> str:
    return _function_of(name)[len(MODULE_PREFIX) :].replace("xǁ", "").replace("ǁ", ".")


def _diffs(names: list[str]) -> dict[str, str]:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    old = Path.cwd()
    os.chdir(STAGE)
    try:
        return {name: get_diff_for_mutant(name) for name in names}
    finally:
        os.chdir(old)


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "n/a"


def write_reports(run_info: dict[str, Any]) -> int:
    """Write summary.md, survivors.md, results.json; return the number of untriaged."""
    codes = _verdicts()
    statuses = {name: _status(code) for name, code in codes.items()}
    open_names = sorted(n for n, s in statuses.items() if s in UNDETECTED)
    diffs = _diffs(open_names)
    equivalents = load_equivalents()
    reasons: dict[str, str] = {}
    kinds: dict[str, str] = {}
    used: set[int] = set()
    for name in open_names:
        removed, added = _changed_lines(diffs[name])
        for index, eq in enumerate(equivalents):
            if eq.function == _function_of(name) and (eq.removed, eq.added) == (removed, added):
                reasons[name] = eq.reason
                kinds[name] = eq.kind
                used.add(index)
                break
    per_module: dict[str, Counter[str]] = {}
    for name, status in statuses.items():
        counter = per_module.setdefault(_module_of(name), Counter())
        counter[status] += 1
        counter["total"] += 1
        if kinds.get(name) == "equivalent":
            counter["equivalent"] += 1
        elif name in kinds:
            counter["untestable"] += 1
    total: Counter[str] = Counter()
    for counter in per_module.values():
        total.update(counter)

    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    untriaged = [n for n in open_names if n not in reasons]
    _write_summary(per_module, total, run_info, len(untriaged), _setup_check(statuses))
    _write_survivors(open_names, statuses, diffs, reasons, kinds)
    stale = [eq for i, eq in enumerate(equivalents) if i not in used]
    results = {
        "run": run_info,
        "totals": dict(total),
        "modules": {m: dict(c) for m, c in sorted(per_module.items())},
        "mutants": {  # judged ones only (the unjudged are counted in totals)
            n: {"status": statuses[n], "exit_code": codes[n], "function": _short_function(n)}
            for n in sorted(codes)
            if codes[n] is not None
        },
        "open": {n: {"diff": diffs[n], "equivalent": reasons.get(n)} for n in open_names},
        "unused_equivalents": [eq.function for eq in stale],
    }
    (REPORT_DIR / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    return len(untriaged)


_COLUMNS = ("killed", "timeout", "segfault", "survived", "no tests", "suspicious", "skipped")


def _row(label: str, c: Counter[str]) -> str:
    detected = sum(c[k] for k in DETECTED)
    judged = c["total"] - c["skipped"] - c["not checked"]
    scope = "all" if judged == c["total"] else f"{judged} ({_pct(judged, c['total'])})"
    cells = [label, str(c["total"]), scope, *(str(c[k]) for k in _COLUMNS), str(c["equivalent"])]
    cells += [_pct(detected, judged), _pct(detected, judged - c["equivalent"])]
    return "| " + " | ".join(cells) + " |"


# Called only inside forked ranks by the reference's self-tests (a peer's handshake and
# rank 0's reading of it): their mutants are detected only if the mutated code really
# runs in the ranks and the fork-stats relay mapped the tests to them.
_RANK_ONLY = ("_wire.x_pack_rank__", "_wire.x_unpack_rank__")


def _setup_check(statuses: dict[str, str]) -> list[str]:
    lines = ["## Does the setup measure?", ""]
    rank_only = {
        n: s for n, s in statuses.items() if n[len(MODULE_PREFIX) :].startswith(_RANK_ONLY)
    }
    seen = Counter(rank_only.values())
    lines += [
        "- Mutants of `pack_rank`/`unpack_rank` (called only inside forked ranks): "
        + (", ".join(f"{v} {k}" for k, v in sorted(seen.items())) or "none judged")
        + ".  Detected means the mutated copy is what the ranks import and the",
        "  fork-stats relay (`tools/mutmut_fork_stats.py`) mapped tests to functions that",
        "  run only in ranks (without the relay all of them were reported `no tests`).  Run",
        "  from the repository root, mutmut would name them `reference_impl._wire.*` while",
        "  the tests import `tpbcast.reference_impl._wire`: names that never match.",
        "- A mutant on a line no test checks survives: see `survivors.md` (the first run of",
        "  `_wire.py` left the three mutants of `check_path_length`'s hint alive; the test",
        "  added for them in `tests/reference/test_mutation_kills.py` kills them).",
        "",
    ]
    return lines


def _run_line(info: dict[str, Any]) -> str:
    return (
        f"{info.get('finished')} UTC, {info.get('seconds', 0):.0f} s wall "
        f"({info.get('mode')}); load average before {info.get('load_before')}, "
        f"after {info.get('load_after')}"
    )


def _rejudge_line() -> list[str]:
    if not REJUDGED.exists():
        return []
    record = json.loads(REJUDGED.read_text())
    tests = sorted({t for r in record.values() for t in r["tests"]})
    return [
        f"- {len(record)} verdicts (killed/timeout) come from re-judging survivors with only "
        f"the tests added since ({', '.join(f'`{t}`' for t in tests)}; `--rejudge`): a "
        "survivor had passed every other test that covers it"
    ]


def _sample_line(info: dict[str, Any], every_mutant_judged: bool) -> list[str]:
    if every_mutant_judged:
        return ["- every mutant has a verdict: no module is sampled"]
    drawn = info.get("sample") or {}
    sizes = drawn.get("sizes") or {}
    if not sizes:
        return []
    listed = ", ".join(f"`{m}.py` {n}" for m, n in sorted(sizes.items()))
    return [
        f"- sampled modules (mutants drawn at random per module, seed {drawn.get('seed')}; "
        f"redrawn over the current mutants when the source changes): {listed}"
    ]


def _write_summary(
    per_module: dict[str, Counter[str]],
    total: Counter[str],
    info: dict[str, Any],
    untriaged: int,
    setup: list[str],
) -> None:
    head = (
        "| module | mutants | judged | "
        + " | ".join(_COLUMNS)
        + " | equivalent | raw | after equiv. |"
    )
    sep = "|" + "---|" * (head.count("|") - 1)
    rows = [_row(f"`{m}.py`", c) for m, c in sorted(per_module.items())]
    not_checked = total["not checked"]
    lines = [
        "# Mutation score of `tpbcast.reference_impl` (mutmut)",
        "",
        "Generated by `nox -s mutation` (`tools/mutation.py`); do not edit by hand.",
        "",
        f"- source measured: `{info.get('rev_label')}` (commit `{info.get('commit')}`)",
        f"- mutmut {info.get('mutmut')}, {info.get('children')} workers, tests: "
        + ", ".join(f"`{t}`" for t in info.get("tests", [])),
        f"- last run: {_run_line(info)}",
        *(f"- earlier run: {_run_line(run)}" for run in reversed(info.get("earlier", []))),
        *_sample_line(info, every_mutant_judged=not_checked == 0),
        *_rejudge_line(),
        "",
        "## Formula",
        "",
        "- detected = killed + timeout + segfault (a mutant that makes the covering tests fail,",
        "  hang past mutmut's wall-clock limit, or crash the test process);",
        "- judged = all mutants - skipped - not checked; survived, no tests (no test calls the",
        "  function) and suspicious all count as NOT detected;",
        "- **raw score = detected / judged**;",
        "- **score after equivalents = detected / (judged - equivalent)**, where equivalent",
        "  mutants are survivors that no test can kill because they do not change behaviour,",
        "  each listed with its reason in `survivors.md` (`tools/mutation_equivalents*.toml`);",
        "  survivors triaged as *not killable here* (they change behaviour, but only on a",
        "  machine with a GPU) keep counting as not detected.",
        "",
        "## Per module",
        "",
        head,
        sep,
        *rows,
        _row("**all judged (pooled)**", total),
        "",
        *(
            []
            if not_checked == 0 or not (info.get("sample") or {}).get("sizes")
            else [
                "A module whose `judged` column is not `all` was measured on a random sample",
                "of its mutants (seed and size in the run line above); its scores estimate the",
                "module's (with n judged mutants the 95 % interval is roughly +/- 100/sqrt(n)",
                "points).  A module may show more judged mutants than its sample size: verdicts",
                "of functions unchanged since an earlier draw (over an earlier version of the",
                "source) are kept.  The pooled row mixes complete modules and samples: read the",
                "per-module rows.",
                "",
            ]
        ),
        "Not measured at all (no mutant judged): "
        + (
            ", ".join(
                f"`{m}.py`" for m, c in sorted(per_module.items()) if c["total"] == c["not checked"]
            )
            or "none"
        )
        + ".",
        "",
        f"Survivors triaged as not killable on this machine (counted as not detected): "
        f"{total['untestable']}.",
        "",
        f"Not yet judged (no verdict in the cache): {not_checked}.  Survivors without a test "
        f"that kills them or a written reason (untriaged): {untriaged}.",
        "",
        *setup,
    ]
    (REPORT_DIR / "summary.md").write_text("\n".join(lines))


def _write_survivors(
    open_names: list[str],
    statuses: dict[str, str],
    diffs: dict[str, str],
    reasons: dict[str, str],
    kinds: dict[str, str],
) -> None:
    lines = [
        "# Mutants of `tpbcast.reference_impl` no test detects",
        "",
        "Generated by `nox -s mutation`; the reasons come from `tools/mutation_equivalents*.toml`.",
        "A mutant that survived an earlier run and is killed now (by a test in",
        "`tests/reference/test_mutation_kills.py`, `tests/dispatch/test_mutation_kills_torch.py`)",
        "is no longer listed here.",
        "",
        f"{len(open_names)} not detected: "
        f"{sum(1 for n in open_names if kinds.get(n) == 'equivalent')} equivalent, "
        f"{sum(1 for n in open_names if kinds.get(n) == 'untestable')} not killable on this "
        "machine (reasons below), "
        f"{sum(1 for n in open_names if n not in reasons)} untriaged.",
        "",
    ]
    history = json.loads(HISTORY.read_text()) if HISTORY.exists() else []
    if history:
        lines += [
            "## Killed since: survivors of earlier runs that a new test detects",
            "",
            "The tests are in `tests/reference/test_mutation_kills.py` and (those needing "
            "torch) `tests/dispatch/test_mutation_kills_torch.py`; their docstrings say what "
            "each checks.",
            "",
            "| mutant (as numbered then) | changed line(s) | detected at commit |",
            "|---|---|---|",
        ]
        for h in history:
            change = " / ".join(f"`{a}`" for a in h["added"]) or "(line removed)"
            change = change.replace("|", "\\|")
            mutant = h["mutant"][len(MODULE_PREFIX) :]
            lines.append(f"| `{mutant}` | {change} | `{h['detected_at'][:10]}` |")
        lines += ["", "## Not detected now", ""]
    for name in open_names:
        triage = reasons.get(name)
        lines += [
            f"## `{name[len(MODULE_PREFIX) :]}` ({statuses[name]})",
            "",
            "```diff",
            diffs[name],
            "```",
            "",
            (
                f"**{'Equivalent' if kinds[name] == 'equivalent' else 'Not killable here'}:** "
                f"{triage}"
            )
            if triage
            else "**UNTRIAGED**",
            "",
        ]
    (REPORT_DIR / "survivors.md").write_text("\n".join(lines))


# -- history: survivors later killed -------------------------------------------------

HISTORY = REPORT_DIR / "history.json"


def _open_now() -> dict[str, dict[str, Any]]:
    """Undetected mutants now, with what identifies them across runs."""
    names = [n for n, code in _verdicts().items() if _status(code) in UNDETECTED]
    out: dict[str, dict[str, Any]] = {}
    for name, diff in _diffs(names).items():
        removed, added = _changed_lines(diff)
        out[name] = {"function": _function_of(name), "removed": removed, "added": added}
    return out


def record_kills(before: dict[str, dict[str, Any]], commit: str) -> None:
    """Append to history.json the mutants undetected before this run and detected now."""
    codes = _verdicts()
    history = json.loads(HISTORY.read_text()) if HISTORY.exists() else []
    known = {(h["function"], tuple(h["removed"]), tuple(h["added"])) for h in history}
    for name, ident in before.items():
        if name in codes and _status(codes[name]) in DETECTED:
            key = (ident["function"], tuple(ident["removed"]), tuple(ident["added"]))
            if key not in known:
                history.append({"mutant": name, **ident, "detected_at": commit})
                known.add(key)
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    HISTORY.write_text(json.dumps(history, indent=1, ensure_ascii=False))


# -- main ------------------------------------------------------------------------------


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(opts: argparse.Namespace, modules: list[str]) -> dict[str, Any]:
    """Stage the source, run mutmut; returns what the summary says about the run."""
    import mutmut

    rev = None if opts.worktree else opts.rev
    if opts.fresh:
        shutil.rmtree(STAGE / "mutants", ignore_errors=True)
    STAGE.mkdir(exist_ok=True)
    build_stage(rev)
    commit = _git("rev-parse", "HEAD" if rev is None else rev)
    dirty = rev is None and bool(_git("status", "--porcelain", "--", "reference_impl", "tests"))
    load_before, started = _loadavg(), time.monotonic()
    names = [f"{MODULE_PREFIX}{m}.*" for m in modules]
    if opts.rerun_survivors and (STAGE / "mutants").exists():
        names = survivors(modules)
    if opts.restat:
        (STAGE / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    if opts.sample:
        regenerate()
        sizes, _old_seed = _sample_sizes()
        sizes.update(dict.fromkeys(modules, opts.sample))
        (STAGE / "sample.json").write_text(json.dumps({"seed": opts.seed, "sizes": sizes}))
        drawn = sample(modules, opts.sample, opts.seed)
        pending = {n for n, code in _verdicts().items() if code is None}
        names = [n for n in drawn if n in pending]
        if not names:
            print("every drawn mutant already has a verdict")
    elif opts.pending:
        regenerate()
        names = pending_names(modules)
    before = _open_now() if (STAGE / "mutants").exists() else {}
    code = 0
    if names or not (opts.rerun_survivors or opts.sample or opts.pending):
        code = _mutmut(
            ["run", "--max-children", str(opts.max_children), *names], STAGE / "mutmut.log"
        )
    record_kills(before, commit)
    tests = tomllib.loads((STAGE / "pyproject.toml").read_text())["tool"]["mutmut"]
    if opts.pending:
        mode = (
            "mutants of "
            + ", ".join(f"{m}.py" for m in modules)
            + " without a verdict or undetected"
        )
    elif opts.sample:
        mode = f"a random sample of {opts.sample} mutants (seed {opts.seed}) of " + ", ".join(
            f"{m}.py" for m in modules
        )
    elif opts.rerun_survivors:
        mode = "re-run of the survivors"
    elif modules:
        mode = "every mutant of " + ", ".join(f"{m}.py" for m in modules)
    else:
        mode = "every mutant without a cached verdict"
    return {
        # The reference's tree (the measured source) at rev: runs over one tree share verdicts.
        "source_tree": None if rev is None else _git("rev-parse", f"{rev}:reference_impl"),
        "rev_label": ("work tree" + (" (uncommitted changes)" if dirty else ""))
        if rev is None
        else rev,
        "commit": commit,
        "mutmut": mutmut.__version__,
        "children": opts.max_children,
        "tests": tests.get("pytest_add_cli_args_test_selection", []),
        "finished": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "seconds": time.monotonic() - started,
        "mode": mode,
        "load_before": load_before,
        "load_after": _loadavg(),
        "mutmut_exit": code,
        "sample": dict(zip(("sizes", "seed"), _sample_sizes(), strict=True)),
    }


def _tree_of(info: dict[str, Any]) -> str | None:
    """The reference tree an earlier run measured (older run records name only a commit)."""
    if info.get("source_tree") or not info.get("commit"):
        return info.get("source_tree")
    try:
        return _git("rev-parse", f"{info['commit']}:reference_impl")
    except subprocess.CalledProcessError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--rev", default="HEAD", help="git revision to measure (default HEAD)")
    where.add_argument("--worktree", action="store_true", help="measure the work tree")
    parser.add_argument("--module", action="append", default=[], help="e.g. _wire (repeatable)")
    parser.add_argument("--max-children", type=int, default=DEFAULT_CHILDREN)
    parser.add_argument("--fresh", action="store_true", help="drop every cached verdict first")
    parser.add_argument("--rerun-survivors", action="store_true")
    parser.add_argument(
        "--pending",
        action="store_true",
        help="judge the --module mutants without a verdict, and the undetected ones again",
    )
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--sample", type=int, default=0, help="judge N random mutants of each --module"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of --sample")
    parser.add_argument("--full", action="store_true", help="every mutant (hours)")
    parser.add_argument(
        "--restat", action="store_true", help="map tests to functions again before running"
    )
    parser.add_argument("--fail-under", type=float, default=None, help="score after equivalents")
    parser.add_argument(
        "--rejudge",
        action="append",
        default=[],
        metavar="TESTS",
        help="judge the untriaged survivors again with only these test paths (repeatable)",
    )
    opts = parser.parse_args()
    modules = [m.removesuffix(".py") for m in opts.module]
    if not (modules or opts.full or opts.report_only or opts.rerun_survivors):
        opts.pending, modules = True, list(ALL_MODULES)  # the measured plan
    if opts.full:
        _sample_nothing(opts.seed)
    info_path = STAGE / "run-info.json"
    if opts.rejudge:
        earlier = json.loads(info_path.read_text()) if info_path.exists() else {}
        before = _open_now()
        step = rejudge(opts.rejudge, opts.rev, opts.max_children, modules)
        record_kills(before, _git("rev-parse", opts.rev))
        info = {**earlier, **step, "earlier": [*earlier.pop("earlier", []), earlier][-4:]}
        info_path.write_text(json.dumps(info, indent=1))
    elif opts.report_only:
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
    else:
        earlier = json.loads(info_path.read_text()) if info_path.exists() else {}
        info = run(opts, modules)
        same_source = info["source_tree"] is not None and info["source_tree"] == _tree_of(earlier)
        if same_source and not opts.fresh:
            # Verdicts of earlier runs on the same source stay in the cache: name those runs.
            info["earlier"] = [*earlier.pop("earlier", []), earlier][-4:]
        info_path.write_text(json.dumps(info, indent=1))
        if info["mutmut_exit"] != 0:
            print(f"mutmut exited {info['mutmut_exit']}; see {STAGE / 'mutmut.log'}")
            return int(info["mutmut_exit"])
    untriaged = write_reports(info)
    print((REPORT_DIR / "summary.md").read_text())
    if opts.fail_under is not None:
        totals = json.loads((REPORT_DIR / "results.json").read_text())["totals"]
        detected = sum(totals.get(k, 0) for k in DETECTED)
        judged = totals["total"] - totals.get("skipped", 0) - totals.get("not checked", 0)
        score = 100.0 * detected / max(1, judged - totals.get("equivalent", 0))
        if score < opts.fail_under:
            print(f"score {score:.1f} % is under {opts.fail_under} %", file=sys.stderr)
            return 1
    return 1 if untriaged and opts.fail_under is not None else 0


if __name__ == "__main__":
    sys.exit(main())
