"""``python -m tpbcast.conformance.spec``: print, write, check or list the clause registry.

python -m tpbcast.conformance.spec            # print SPEC.md to stdout
python -m tpbcast.conformance.spec --write    # regenerate conformance/SPEC.md
python -m tpbcast.conformance.spec --check    # exit 1 if conformance/SPEC.md is stale
python -m tpbcast.conformance.spec --list WIRE INIT-3   # one line per selected clause
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import SPEC_MD_PATH, Spec, SpecError, load_spec
from ._markdown import render_markdown

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``--write`` regenerates SPEC.md, ``--check`` exits 1 when it is stale, ``--list`` lists.

    Exit status: 0 ok, 1 SPEC.md stale (``--check``), 2 invalid registry or unknown selector.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tpbcast.conformance.spec", description=(__doc__ or "").splitlines()[0]
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="regenerate SPEC.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if SPEC.md is stale")
    mode.add_argument("--list", action="store_true", help="list clauses (optionally selected)")
    parser.add_argument("--registry", type=Path, default=None, help="clauses.toml to load")
    parser.add_argument("--output", type=Path, default=SPEC_MD_PATH, help="SPEC.md path")
    parser.add_argument("selectors", nargs="*", help="areas or clause ids for --list")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:
        # `... --list | head`: the reader left; that is not an error.  Point stdout at
        # /dev/null so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.registry)
        if args.list:
            for c in spec.select(args.selectors):
                print(f"{c.id:<12} {c.level:<6} {c.title}")
            return 0
    except (SpecError, KeyError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    return _write_or_check(spec, args.output, write=args.write, check=args.check)


def _write_or_check(spec: Spec, output: Path, *, write: bool, check: bool) -> int:
    text = render_markdown(spec)
    if write:
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output} ({len(spec)} clauses)")
        return 0
    if not check:
        sys.stdout.write(text)
        return 0
    current = output.read_text(encoding="utf-8") if output.exists() else ""
    if current != text:
        print(
            f"{output} is stale: regenerate it with "
            "'python -m tpbcast.conformance.spec --write' (or 'nox -s spec')",
            file=sys.stderr,
        )
        return 1
    print(f"{output} is current ({len(spec)} clauses)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
