"""``python -m tpbcast.conformance``: judge an implementation clause by clause.

Runs pytest on the installed conformance tests (``tpbcast/conformance/tests``) with the
conformance plugin, so it works the same from a checkout and from a wheel::

    python -m tpbcast.conformance                                  # judge the reference
    python -m tpbcast.conformance --tpbcast-impl mypkg.adapter:make
    python -m tpbcast.conformance --list                           # print the clauses
    python -m tpbcast.conformance WIRE INIT-3                      # clauses by prefix
    python -m tpbcast.conformance -n 0 -- -x -vv                   # serial; pytest options
    python -m tpbcast.conformance --expectations known.toml        # CI: only news fails

Reports (JSON, markdown, HTML, JUnit XML) go to ``--report-dir`` (default
``reports/conformance``).  The exit status is non-zero iff a MUST clause fails (or the
run itself could not judge: a usage error, an interrupted run, a clause without a test);
with ``--expectations FILE``, iff a result is unexpected (``_expectations``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_pytest_args", "main"]

PLUGIN: Final = "tpbcast.conformance.plugin"
# Same default as the plugin's REPORT_DIR_DEFAULT; not imported from it, because a plugin
# module imported before pytest starts cannot be assertion-rewritten.
REPORT_DIR_DEFAULT: Final = "reports/conformance"


def _tests_dir() -> Path:
    from . import tests

    return Path(tests.__file__).resolve().parent


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tpbcast.conformance",
        description="Judge a CPU tensor-parallel broadcaster against the tpbcast conformance "
        "clauses (core, and those of the transport it declares). "
        "Arguments after `--` go to pytest unchanged.",
    )
    parser.add_argument(
        "prefixes",
        nargs="*",
        metavar="PREFIX",
        help="run only clauses whose id matches a prefix (WIRE, INIT-3); default: all",
    )
    parser.add_argument(
        "--clauses",
        action="append",
        default=[],
        metavar="PREFIXES",
        help="comma-separated clause prefixes, same as the positional form",
    )
    parser.add_argument("--list", action="store_true", help="print the clauses and exit")
    parser.add_argument(
        "--tpbcast-impl",
        metavar="MODULE:FACTORY",
        help="implementation under test (default: the reference)",
    )
    parser.add_argument(
        "--tpbcast-timeout", metavar="SECONDS", help="per-test deadline for rank groups"
    )
    parser.add_argument("--tpbcast-seed", metavar="INT", help="session seed (replay a run)")
    parser.add_argument(
        "--expectations",
        "--tpbcast-expectations",
        dest="tpbcast_expectations",
        metavar="TOML",
        help="clauses known to FAIL or be UNSUPPORTED, each with a reason; the exit status "
        "is then non-zero only on an unexpected result (a regression or a stale expectation)",
    )
    parser.add_argument(
        "-n",
        "--numprocesses",
        dest="numprocesses",
        default=None,
        metavar="N",
        help="parallel pytest-xdist workers ('auto', or 0 for serial; default: auto when "
        "pytest-xdist is installed)",
    )
    parser.add_argument(
        "--report-dir",
        default=REPORT_DIR_DEFAULT,
        metavar="DIR",
        help=f"where reports go (default: {REPORT_DIR_DEFAULT})",
    )
    return parser


def _have_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def selectors_of(args: argparse.Namespace) -> list[str]:
    """Every clause prefix given, positional and ``--clauses``, in order."""
    raw = [*args.prefixes, *args.clauses]
    return [part.strip() for item in raw for part in item.split(",") if part.strip()]


def build_pytest_args(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    """The pytest command line for a conformance run (without the program name)."""
    tests = _tests_dir()
    report_dir = Path(args.report_dir).resolve()
    argv = [
        str(tests),
        "-c",
        str(tests / "pytest.toml"),
        "--rootdir",
        str(tests),
        "-p",
        PLUGIN,
        "-p",
        "no:cacheprovider",
        f"--junitxml={report_dir / 'junit.xml'}",
        f"--tpbcast-report-dir={report_dir}",
    ]
    selectors = selectors_of(args)
    if selectors:
        argv.append("--tpbcast-clauses=" + ",".join(selectors))
    for option in ("tpbcast_impl", "tpbcast_timeout", "tpbcast_seed"):
        value = getattr(args, option)
        if value is not None:
            argv.append(f"--{option.replace('_', '-')}={value}")
    if args.tpbcast_expectations is not None:
        # Absolute: pytest resolves a relative path against its invocation dir, which is ours
        # today; an absolute path does not depend on that.
        argv.append(f"--tpbcast-expectations={Path(args.tpbcast_expectations).resolve()}")
    workers = args.numprocesses
    if workers is None:
        workers = "auto" if _have_xdist() else "0"
    if _have_xdist():
        argv += ["-n", str(workers)]
    argv += list(extra)
    return argv


def _list_clauses(selectors: Sequence[str]) -> int:
    from .plugin import list_lines

    try:
        lines = list_lines(selectors)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    try:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()
    except BrokenPipeError:
        # `--list | head`: the reader left early; that is not an error of ours.  Point
        # stdout at /dev/null so the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (non-zero iff a MUST clause fails)."""
    raw = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in raw:
        cut = raw.index("--")
        raw, extra = raw[:cut], raw[cut + 1 :]
    args = _parser().parse_args(raw)
    if args.list:
        return _list_clauses(selectors_of(args))
    import pytest

    Path(args.report_dir).mkdir(parents=True, exist_ok=True)
    return int(pytest.main(build_pytest_args(args, extra)))


if __name__ == "__main__":
    sys.exit(main())
