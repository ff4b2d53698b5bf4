"""TPBCAST_HUGEPAGES (DESIGN.md, "Fork cost"): off by default; when on, run_ranks collapses
the test process's anonymous memory once and again after REGROW_BYTES of growth, never in a
forked rank, and a kernel that refuses is no error.

The collapse itself is replaced by a recorder (a real one costs tenths of a second and marks
this worker's memory MADV_HUGEPAGE for every later test); the growth is real (RssAnon). One
test lets the real kernel collapse a mapping, inside a rank, so this process is untouched.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

import pytest

import tpbcast.harness._hugepages as hp
from tpbcast.harness import Status, run_ranks

T = 30.0  # generous: the CI box has 2 cores shared by several sessions


def returns_pid(ctx):
    return os.getpid()


@pytest.fixture
def collapses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pids of the processes that called ``collapse_anonymous`` (replaced by a recorder that
    reports a success); the module starts as if this process had never collapsed."""
    calls: list[int] = []

    def record() -> hp.CollapseReport:
        calls.append(os.getpid())
        return hp.CollapseReport(tried=1, collapsed=1, refused=())

    monkeypatch.setattr(hp, "collapse_anonymous", record)
    monkeypatch.setattr(hp, "_last_anon", [])
    return calls


def _run_ok(world_size: int = 2) -> None:
    result = run_ranks(returns_pid, world_size, timeout=T)
    assert result.ok, result.report()
    assert os.getpid() not in {o.value for o in result.outcomes}  # really forked


@pytest.mark.parametrize("value", [None, "", "0", "no", "off", "false"])
def test_off_by_default_and_when_not_asked_for(monkeypatch, collapses, value):
    if value is None:
        monkeypatch.delenv(hp.ENV, raising=False)
    else:
        monkeypatch.setenv(hp.ENV, value)
    _run_ok()
    _run_ok()
    assert collapses == []
    assert hp._last_anon == []  # not even the bookkeeping of a collapse


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_enabled_collapses_once_then_again_only_after_growth(monkeypatch, collapses, value):
    monkeypatch.setenv(hp.ENV, value)
    me = os.getpid()

    _run_ok()
    assert collapses == [me]  # the first group collapses, in this process, before forking
    assert len(hp._last_anon) == 1

    # No growth worth a collapse (checked, not assumed): the next group does not collapse.
    assert hp._anonymous_bytes() - hp._last_anon[0] < hp.REGROW_BYTES
    _run_ok()
    assert collapses == [me]

    # Grow by more than REGROW_BYTES (bytearray(n) writes its n zero bytes: all resident).
    grown = bytearray(hp.REGROW_BYTES + (8 << 20))
    try:
        assert hp._anonymous_bytes() - hp._last_anon[0] >= hp.REGROW_BYTES  # the growth is real
        _run_ok()
        assert collapses == [me, me]
        # The baseline moved to after the second collapse: no third one without new growth.
        _run_ok()
        assert collapses == [me, me]
    finally:
        del grown


def test_a_rank_never_collapses(monkeypatch, collapses):
    """A forked rank that runs a nested group (preload included) or calls maybe_collapse
    itself does not collapse: only the process that imported the harness does."""
    monkeypatch.delenv(hp.ENV, raising=False)  # this process: no collapse, no baseline

    def nested(ctx):
        # In the rank: everything that would make the importing process collapse now.
        os.environ[hp.ENV] = "1"
        assert hp._last_anon == [] and hp.enabled()
        inner = run_ranks(returns_pid, 1, timeout=T)
        direct = hp.maybe_collapse()
        return {
            "inner_ok": inner.ok,
            "direct": direct,
            "calls": list(collapses),
            "last_anon": list(hp._last_anon),
        }

    result = run_ranks(nested, 2, timeout=T)
    assert result.ok, result.report()
    for o in result.outcomes:
        assert o.value == {"inner_ok": True, "direct": None, "calls": [], "last_anon": []}, o
    assert collapses == []

    # Control: under the same conditions, this process (the importer) does collapse.
    monkeypatch.setenv(hp.ENV, "1")
    assert hp.maybe_collapse() is not None
    assert collapses == [os.getpid()]


def _refusing_madvise(err: int, calls: list[int]):
    """A libc ``madvise`` on a kernel without MADV_COLLAPSE: -1 and ``err`` for it."""

    def madvise(addr: int, length: int, advice: int) -> int:
        calls.append(advice)
        if advice == hp._MADV_COLLAPSE:
            ctypes.set_errno(err)
            return -1
        return 0

    return madvise


@pytest.mark.parametrize(
    "err", [errno.EINVAL, errno.ENOSYS, errno.EAGAIN], ids=errno.errorcode.__getitem__
)
def test_a_refusing_kernel_is_no_error(monkeypatch, err):
    calls: list[int] = []
    monkeypatch.setattr(hp, "_madvise", lambda: _refusing_madvise(err, calls))
    monkeypatch.setattr(hp, "_last_anon", [])
    monkeypatch.setenv(hp.ENV, "1")

    _run_ok()
    # The refusal happened (proved before judging the reaction) on every span tried ...
    assert hp._MADV_COLLAPSE in calls
    report = hp.collapse_anonymous()
    assert report.tried > 0
    assert report.collapsed == 0
    assert report.refused == (errno.errorcode[err],) * report.tried
    # ... and it is not retried by every group: the baseline was recorded all the same.
    assert len(hp._last_anon) == 1
    calls.clear()
    _run_ok()
    assert calls == []


def test_the_real_kernel_collapses_a_touched_mapping():
    """End to end, in a rank (this process's memory stays as it was): a private anonymous
    mapping of whole huge pages, touched, is backed by huge pages after the collapse."""
    size = 4 * hp._HUGE

    def collapse_in_rank(ctx):
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.write(b"\xa5" * size)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        before = _anon_huge_kib(addr)
        report = hp.collapse_anonymous()
        return {"before": before, "after": _anon_huge_kib(addr), "refused": report.refused}

    result = run_ranks(collapse_in_rank, 1, timeout=T)
    assert result.outcomes[0].status is Status.OK, result.report()
    out = result.outcomes[0].value
    if out["before"]:
        pytest.skip("THP 'always': the mapping was huge before any collapse, nothing to see")
    if out["after"] == 0 and "EINVAL" in out["refused"]:
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux < 6.1) or THP is 'never'")
    # Every whole huge page inside the mapping (all but one, if it is not 2 MiB-aligned).
    assert out["after"] >= (size - hp._HUGE) // 1024, out


def _anon_huge_kib(addr: int) -> int:
    """AnonHugePages (KiB) of the mapping of this process that holds ``addr``."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0
