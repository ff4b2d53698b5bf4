"""Assemble ``reports/bench/bench.md`` from the section files the benchmarks write.

Each benchmark owns one section file in ``reports/bench/`` (``broadcast.md`` from
``bench_broadcast.py``, ``harness.md`` from the harness benchmarks, ...) and never writes
``bench.md`` itself, so benchmarks written by different people never collide.  This script
concatenates the sections in a fixed order (known names first, then any other ``*.md``
alphabetically) under one header; a missing section is listed as not run.

    python benchmarks/bench_summary.py [--dir reports/bench]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ORDER = ("broadcast", "harness")
SUMMARY = "bench.md"


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
    missing = [name for name in ORDER if not (folder / f"{name}.md").exists()]
    head = [
        "# tpbcast benchmarks",
        "",
        f"Assembled {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        "`benchmarks/bench_summary.py` from the section files in this folder: "
        + ", ".join(f"[{p.name}]({p.name})" for p in parts)
        + ". Every number is a ratio or a distribution measured in one run, with the "
        "run's load average; none is a pass/fail bar of the test suite.",
    ]
    if missing:
        head.append(f"Not run into this folder yet: {', '.join(missing)}.")
    body = [p.read_text().rstrip() for p in parts]
    (folder / SUMMARY).write_text("\n\n".join(["\n".join(head), *body]) + "\n")
    print(f"wrote {folder / SUMMARY} from {len(parts)} section(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
