"""Overlap the suite's idle waits: tests marked ``idle_wait`` run on extra xdist workers.

Why: a test that only waits out a bound the SPEC states (a call blocked by a dead peer
must end within 10 s; the group deadline judges it at 18 s) keeps a worker busy and the
CPU idle.  Against an engine without deadlines (vLLM's MessageQueue) a dozen of them ran
one after another on 2 workers: most of a 143 s run.

The rule (a scheduling rule, not a list of tests): a test that mostly waits carries
``@pytest.mark.idle_wait``.  With pytest-xdist, the run gets ``--tpbcast-idle-workers``
extra workers (default 4) beside the ``-n`` ones; the extra workers take only
``idle_wait`` tests and run at the lowest CPU priority (nice 19, inherited by their
ranks), so the other tests keep the concurrency ``-n`` gives them and the CPU they had,
also when the engine's waiting ranks spin; the ``-n`` workers take ``idle_wait`` tests
too once nothing else is left.

Why a spinning engine cannot turn a bound it meets into a FAIL: every bound test judges a
call still blocked at its group deadline, and that deadline leaves a margin of 8 s (or
more) beyond the bound.  An engine that meets the bound needs the CPU for a moment after
its own deadline; under Linux's fair scheduler a runnable rank at nice 19 still gets a
slice every few tens of ms per busy competitor, not seconds, also when the ranks of the
overlapped tests spin (``sched_yield`` hands the CPU straight on).  The overlap is
bounded (the extra workers), so that wait stays far inside the margin.  Shown by the
mutants (a spinning, never-detecting engine still FAILs FAULT-1/2; the reference still
passes) and by vLLM's expectations file (every row as expected, spinning included).

Worker ids come in order (``gw0``..); ``gw<n>`` and later are the idle workers.  The workers
write the node ids of ``idle_wait`` items to a file the controller reads when it schedules.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, Final

import pytest

__all__ = ["IDLE_MARK", "IdleWaitScheduling"]

IDLE_MARK: Final = "idle_wait"
_INPUT_KEY: Final = "tpbcast_idle_ids"
_IDLE_DEFAULT: Final = 4
_IDLE_FLAG: Final = "tpbcast_idle_worker"
_IDLE_NICE: Final = 19


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpbcast-conformance", "tpbcast conformance suite")
    group.addoption(
        "--tpbcast-idle-workers",
        type=int,
        default=_IDLE_DEFAULT,
        metavar="N",
        help="extra pytest-xdist workers that run only tests marked idle_wait (tests that "
        f"wait out a stated bound), overlapping them; 0 turns it off (default {_IDLE_DEFAULT})",
    )


def _xdist_controller(config: pytest.Config) -> bool:
    return (
        not hasattr(config, "workerinput")
        and config.pluginmanager.hasplugin("xdist")
        and bool(config.getoption("tx", None))
        and config.getoption("dist", "no") == "load"
    )


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{IDLE_MARK}: the test mostly waits out a bound the SPEC states (a dead peer, a "
        "stopped peer); such tests overlap on extra workers (--tpbcast-idle-workers)",
    )
    extra = int(config.getoption("tpbcast_idle_workers") or 0)
    if extra <= 0 or not _xdist_controller(config):
        return
    cpu = len(config.option.tx)
    config.option.tx = [*config.option.tx, *(["popen"] * extra)]
    config.stash[_CPU_KEY] = cpu
    config.stash[_DIR_KEY] = tempfile.mkdtemp(prefix="tpbcast-idle-")
    config.add_cleanup(lambda: shutil.rmtree(config.stash[_DIR_KEY], ignore_errors=True))


_CPU_KEY = pytest.StashKey[int]()
_DIR_KEY = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist, controller) Tell each worker where to write the idle tests' node ids."""
    config = node.config
    if _DIR_KEY in config.stash:
        node.workerinput[_INPUT_KEY] = os.path.join(config.stash[_DIR_KEY], "ids")
        node.workerinput[_IDLE_FLAG] = _worker_index(node) >= config.stash[_CPU_KEY]


def _worker_index(node: Any) -> int:
    gid = str(getattr(node.gateway, "id", "gw0"))
    return int(gid[2:]) if gid.startswith("gw") and gid[2:].isdigit() else 0


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """(idle worker) Lowest CPU priority for this worker and every rank it forks: an
    engine whose ranks spin while they wait then spins on CPU time nobody else wants, and
    the tests of the ``-n`` workers keep the CPU they had without the overlap."""
    if getattr(session.config, "workerinput", {}).get(_IDLE_FLAG):
        os.setpriority(os.PRIO_PROCESS, 0, _IDLE_NICE)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """(worker) Write the node ids of the idle tests, atomically, for the controller."""
    path = getattr(config, "workerinput", {}).get(_INPUT_KEY)
    if not path:
        return
    ids = [item.nodeid for item in items if item.get_closest_marker(IDLE_MARK) is not None]
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write("\n".join(ids))
    os.replace(tmp, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if _DIR_KEY not in config.stash:
        return None
    return IdleWaitScheduling(
        config, log, config.stash[_CPU_KEY], os.path.join(config.stash[_DIR_KEY], "ids")
    )


class IdleWaitScheduling:
    """xdist scheduler with two pools: the ``-n`` workers run everything (idle tests
    last), the extra workers only idle tests.  The xdist protocol: a worker runs its
    queued test once a next one is queued or it is told to shut down, so each worker
    keeps two queued while its pool has work."""

    def __init__(self, config: pytest.Config, log: Any, cpu_workers: int, ids_path: str) -> None:
        from xdist.workermanage import parse_tx_spec_config

        self.numnodes = len(parse_tx_spec_config(config))
        self.config = config
        self.log = log
        self.cpu_workers = cpu_workers
        self.ids_path = ids_path
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self.collection: list[str] | None = None
        self.pending_busy: list[int] = []
        self.pending_idle: list[int] = []

    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        """Scheduling starts once the ``-n`` workers have collected: the idle workers
        join when they are ready (a worker's start-up is seconds on a loaded machine)."""
        return len(self.node2collection) >= min(self.numnodes, self.cpu_workers)

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.pending_busy or self.pending_idle:
            return False
        return all(len(p) < 2 for p in self.node2pending.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.pending_busy or self.pending_idle or any(self.node2pending.values()))

    def _is_idle_worker(self, node: Any) -> bool:
        return _worker_index(node) >= self.cpu_workers

    def add_node(self, node: Any) -> None:
        self.node2pending[node] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            self.log("a restarted worker collected different tests; not scheduling on it")
            return
        self.node2collection[node] = list(collection)

    def _idle_ids(self) -> set[str]:
        with contextlib.suppress(OSError), open(self.ids_path) as fh:
            return {line for line in fh.read().splitlines() if line}
        return set()

    def schedule(self) -> None:
        if self.collection is not None:
            for node in self.nodes:
                self._check(node)
            return
        collections = list(self.node2collection.values())
        if any(c != collections[0] for c in collections[1:]):
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = collections[0]
        idle = self._idle_ids()
        for index, nodeid in enumerate(self.collection):
            (self.pending_idle if nodeid in idle else self.pending_busy).append(index)
        # One idle test per idle worker before any gets a second: they all wait at once.
        idle_nodes = [n for n in self.node2collection if self._is_idle_worker(n)]
        for depth in (1, 2):
            for node in idle_nodes:
                if self.pending_idle and len(self.node2pending[node]) < depth:
                    self._send(node, self.pending_idle, 1)
        for node in self.nodes:
            self._check(node)

    def _send(self, node: Any, pool: list[int], count: int) -> None:
        take = pool[:count]
        del pool[:count]
        self.node2pending[node].extend(take)
        node.send_runtest_some(take)

    def _check(self, node: Any) -> None:
        if node.shutting_down or node not in self.node2collection:
            return
        queued = self.node2pending[node]
        if self._is_idle_worker(node):
            pools = [self.pending_idle]
        else:
            pools = [self.pending_busy, self.pending_idle]
        pool = next((p for p in pools if p), None)
        if pool is None:
            node.shutdown()
            return
        if len(queued) >= 2:
            return
        if pool is self.pending_busy:
            busy_nodes = max(1, min(self.cpu_workers, len(self.node2pending)))
            want = max(2, len(pool) // busy_nodes // 4)
        else:
            want = 2
        self._send(node, pool, max(1, want - len(queued)))

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.node2pending[node].remove(item_index)
        self._check(node)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        index = self.collection.index(item)
        idle = item in self._idle_ids()
        (self.pending_idle if idle else self.pending_busy).insert(0, index)
        for node in self.nodes:
            self._check(node)

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError

    def remove_node(self, node: Any) -> str | None:
        pending = self.node2pending.pop(node)
        if not pending:
            return None
        assert self.collection is not None
        crashed = self.collection[pending.pop(0)]
        idle = self._idle_ids()
        for index in pending:
            nodeid = self.collection[index]
            (self.pending_idle if nodeid in idle else self.pending_busy).append(index)
        for other in self.nodes:
            self._check(other)
        return crashed
