"""pytest plugin for ``nox -s mutation``: trampoline hits in forked ranks count too.

mutmut 3 picks the tests to run against a mutant from which tests *called* the
mutated function during its stats pass: each trampoline records the hit in a set
in the process that ran it.  The reference's self-tests run almost all of the
reference inside ranks forked by ``tpbcast.harness.run_ranks``; a rank ends with
``os._exit``, so its hits died with it and mutmut saw those functions as "no
tests" (``pack_rank``, ``unpack_rank``, ``socket_address``, every send and
receive).  This plugin makes a forked process append each new hit to a file in a
private directory; before mutmut's own teardown hook files the hits under the
test that just ran, they are merged into the test process's set.

Loaded only by mutmut (``[tool.mutmut] pytest_add_cli_args`` in pyproject.toml,
copied next to the mutants by ``tools/mutation.py``); without mutmut it does
nothing.  Verdict runs need no relay: a forked rank inherits the mutant under
test from its parent (environment and module state), so a mutant runs in ranks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest


class _Relay:
    """Where forked processes leave their hits, and which process runs the tests."""

    dir: str | None = None
    test_pid = 0
    seen: set[str] = set()  # noqa: RUF012 - per process (cleared after fork)


def _relay(original: Callable[..., None]) -> Callable[..., None]:
    def record(name: str, caller: str | None = None) -> None:
        if os.getpid() == _Relay.test_pid or _Relay.dir is None:
            original(name, caller)
            return
        if name in _Relay.seen:  # once per forked process is enough
            return
        _Relay.seen.add(name)
        path = os.path.join(_Relay.dir, str(os.getpid()))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError:  # never fail a test over a lost hit (it only selects fewer tests)
            return
        try:
            # umask-proof: a rank that drops privileges later (setuid nobody) must still
            # append to the file it created as root
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666)
            os.write(fd, name.encode() + b"\n")
        finally:
            os.close(fd)

    return record


def pytest_configure(config: pytest.Config) -> None:
    trampoline = sys.modules.get("mutmut.mutation.trampoline")
    if trampoline is None or trampoline.get_mutant_under_test() != "stats":
        return  # not under mutmut, or a verdict run (ranks inherit the mutant by themselves)
    _Relay.test_pid = os.getpid()
    _Relay.dir = tempfile.mkdtemp(prefix="tpb-mutmut-hits-")
    # Some tests drop a rank's privileges (another uid): it must still leave its hits.
    os.chmod(_Relay.dir, 0o1777)  # noqa: S103 - sticky, like /tmp; hit names only
    if not getattr(trampoline.record_trampoline_hit, "_tpb_relay", False):
        relayed: Any = _relay(trampoline.record_trampoline_hit)
        relayed._tpb_relay = True
        trampoline.record_trampoline_hit = relayed
    os.register_at_fork(after_in_child=_Relay.seen.clear)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Merge the forked processes' hits before mutmut files them under ``item``."""
    if _Relay.dir is None or os.getpid() != _Relay.test_pid:
        return
    from mutmut.state import state

    hits: set[str] = set()
    for name in os.listdir(_Relay.dir):
        path = os.path.join(_Relay.dir, name)
        with open(path, "rb") as fh:
            hits.update(line.decode() for line in fh.read().splitlines() if line)
        os.unlink(path)
    state()._stats.update(hits)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _Relay.dir is not None and os.getpid() == _Relay.test_pid:
        shutil.rmtree(_Relay.dir, ignore_errors=True)
        _Relay.dir = None
