"""Assemble ``reports/bench/bench.md`` from the section files the benchmarks write.

Each benchmark owns one section file in ``reports/bench/`` (``broadcast.md`` from
``bench_broadcast.py``, ``harness.md`` from the harness benchmarks, ...) and never writes
``bench.md`` itself, so benchmarks written by different people never collide.  This script
concatenates the sections in a fixed order (known names first, then any other ``*.md``
alphabetically) under one header; a missing section is listed as not run.  Reports that
live in a sibling folder because their own nox session writes them too (``soak``: fd count
and RSS per rank over 10,000 broadcasts, RSS per rank at TP 8, from ``benchmarks/soak.py``)
are appended with their image links pointed at that folder.

    python benchmarks/bench_summary.py [--dir reports/bench]
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

ORDER = ("broadcast", "harness", "dispatch")
SIBLINGS = ("soak",)  # reports/<name>/<name>.md, written by benchmarks/<name>.py
SUMMARY = "bench.md"
# A relative link target: not a URL (any scheme, any case), not absolute, not already
# "../", not an in-page "#anchor" (anchors resolve in bench.md once the section is inlined).
_LOCAL_LINK = re.compile(r"\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|/|\.\./|#)([^)]+)\)")
_HEADING = re.compile(r"^(#+) ")
_FENCE = re.compile(r"^\s*(```|~~~)")


def sibling_section(folder: Path, name: str) -> str | None:
    """``../<name>/<name>.md`` with its relative links rewritten to point into that folder
    and its headings one level down (it is a section here, under the summary's title);
    lines inside fenced code blocks are left as they are."""
    path = folder.parent / name / f"{name}.md"
    if not path.exists():
        return None
    lines, fenced = [], False
    for line in path.read_text().rstrip().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append(line)
        elif fenced:
            lines.append(line)
        else:
            lines.append(_HEADING.sub(r"#\1 ", _LOCAL_LINK.sub(rf"](../{name}/\1)", line)))
    return "\n".join(lines)


def sections(folder: Path) -> list[Path]:
    found = {p.stem: p for p in folder.glob("*.md") if p.name != SUMMARY}
    known = [found.pop(name) for name in ORDER if name in found]
    return known + [found[name] for name in sorted(found)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", default="reports/bench")
    args = parser.parse_args(argv)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    parts = sections(folder)
    siblings = {name: sibling_section(folder, name) for name in SIBLINGS}
    missing = [name for name in ORDER if not (folder / f"{name}.md").exists()]
    missing += [f"../{name}/{name}.md" for name, text in siblings.items() if text is None]
    head = [
        "# tpbcast benchmarks",
        "",
        f"Assembled {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        "`benchmarks/bench_summary.py` from the section files in this folder: "
        + ", ".join(f"[{p.name}]({p.name})" for p in parts)
        + "".join(f", [{n}](../{n}/{n}.md)" for n, text in siblings.items() if text)
        + ". Every number is a ratio or a distribution measured in one run, with the "
        "run's load average; none is a pass/fail bar of the test suite.",
    ]
    if missing:
        head.append(f"Not run into this folder yet: {', '.join(missing)}.")
    body = [p.read_text().rstrip() for p in parts]
    body += [text for text in siblings.values() if text]
    (folder / SUMMARY).write_text("\n\n".join(["\n".join(head), *body]) + "\n")
    print(f"wrote {folder / SUMMARY} from {len(parts)} section(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
