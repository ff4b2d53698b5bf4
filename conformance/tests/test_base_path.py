"""SEC-13 to SEC-17: the base-path helper (capability ``base_path``).

The capability promises ``make_base_path(dp_rank=0, *, session_id=None, base_dir=None,
environ=None, key=None) -> str`` on the broadcaster object: the base path every rank of one
TP group computes identically (``environ=None`` reads ``os.environ``).  The helper is judged
by what it returns (pure checks inside a rank) and, where a clause is about groups, by
running the groups on the paths it returned, side by side: paths that collided would cross
payloads or get the second rank 0 refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from typing import Any

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import run_ranks, wire

from . import _support as s
from . import _watch

SAFE = re.compile(r"^[A-Za-z0-9._-]+$")
# Rank 0's socket path may hold at most 107 bytes (sun_path is 108 with the NUL).
SUN_PATH_MAX = 107
SIZE = 4096
# Bootstrap deadlines of the groups here: generous, the group timeout still bounds a hang.
SETUP = s.GROUP_TIMEOUT / 4


def _group_member(impl):
    return s.make(impl, connect=SETUP, init=SETUP, io=SETUP)


def _exchange(bcast, local, seed, salt):
    """One broadcast inside a group of 2 (``local`` 0 is the root); the received digest."""
    data = s.payload(seed, SIZE, salt)
    buf = bytearray(data) if local == 0 else bytearray(b"\xa5" * SIZE)
    bcast.broadcast(buf)
    return s.digest(buf)


def _want(seed, salt):
    return s.digest(s.payload(seed, SIZE, salt))


def _call(fn, *args, **kwargs):
    """``fn``'s result, or the :class:`_support.Raised` of what it raised."""
    box = []
    raised = s.attempt(lambda: box.append(fn(*args, **kwargs)))
    return raised if raised is not None else box[0]


def _rmdir_quietly(path):
    """Remove a socket dir a group created (empty after reset); the harness reports leftovers."""
    with contextlib.suppress(OSError):
        os.rmdir(path)


# --------------------------------------------------------------------------- SEC-13


def _runnable(paths, groups):
    """Whether groups of ranks (lists of indexes into ``paths``) can bootstrap side by
    side: each group agrees on its path and no two groups share one.  Paths that fail
    this are judged as they are; running on them would only hang (no deadlines) or
    cross the groups."""
    per_group = [{paths[i] for i in group} for group in groups]
    if any(len(mine) != 1 for mine in per_group):
        return False
    return len({next(iter(mine)) for mine in per_group}) == len(groups)


@pytest.mark.clause("SEC-13")
def test_keyed_default_paths_of_concurrent_groups_differ(tpbcast_run, tpbcast_impl):
    """Two groups launched by ONE parent (same ppid) with different keys, side by side."""
    require(tpbcast_impl, "base_path")

    def target(ctx):
        group, local = divmod(ctx.rank, 2)
        env = {"TMPDIR": ctx.workdir}  # no session id or directory override
        bcast = _group_member(tpbcast_impl)
        key = f"127.0.0.1:{29500 + group}"
        path = bcast.make_base_path(environ=env, key=key)
        again = bcast.make_base_path(environ=env, key=key)
        digest = raised = None
        if _runnable(_watch.exchange(ctx, "paths", path), [[0, 1], [2, 3]]):
            raised = _initialize(ctx, bcast, local, path)
            # Both listeners are live at the same time (or a rank reports its failure).
            if all(_watch.exchange(ctx, "up", raised is None)):
                digest = _exchange(bcast, local, ctx.seed, ("sec13", group))
            ctx.sync("exchanged")
            bcast.reset()
            ctx.sync("reset")
            if ctx.rank == 0:
                _rmdir_quietly(os.path.dirname(path))
        return os.getppid(), path, again, digest, raised

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    seen = s.ok_values(result)
    ppids = {ppid for ppid, *_ in seen}
    s.precondition(
        "SEC-13", len(ppids) == 1, f"the 4 ranks are siblings of one parent, got ppids {ppids}"
    )
    paths = [path for _, path, *_ in seen]
    for rank, (_, path, again, *_) in enumerate(seen):
        s.check(
            "SEC-13",
            path == again,
            "the helper is deterministic for one key",
            (path, again),
            rank=rank,
        )
    s.check(
        "SEC-13",
        paths[0] == paths[1] and paths[2] == paths[3],
        "the ranks of one group compute the same default path",
        paths,
    )
    s.check(
        "SEC-13",
        paths[0] != paths[2],
        "two groups of one parent with different keys get different paths",
        paths,
    )
    for rank, (*_, digest, raised) in enumerate(seen):
        if raised is not None:
            s.check(
                "SEC-13",
                False,
                "each group bootstraps on its default path while the other one runs",
                raised,
                rank=rank,
            )
        elif digest is not None:
            s.check(
                "SEC-13",
                digest == _want(result.seed, ("sec13", rank // 2)),
                "each rank receives its own group's payload",
                digest,
                rank=rank,
            )


def _initialize(ctx, bcast, local, path):
    """``initialize`` observed: what it raised, or None.  A local rank 0 that failed turns
    its peer away (it would wait in connect, for ever without deadlines)."""
    raised = s.attempt(bcast.initialize, local, 2, path)
    if raised is not None and local == 0:
        _watch.turn_away_peers(wire.socket_path(path))
    return raised


def _publish(directory, name, value):
    """Write ``value`` to ``directory/name`` atomically (read by :func:`_read_when_there`)."""
    with open(os.path.join(directory, name + ".tmp"), "w") as fh:
        fh.write(value)
    os.replace(os.path.join(directory, name + ".tmp"), os.path.join(directory, name))


def _read_when_there(directory, name):
    """What another group published as ``name``, or None if it did not within SETUP."""
    path = os.path.join(directory, name)
    if not s.wait_for(lambda: os.path.exists(path), SETUP):
        return None
    with open(path) as fh:
        return fh.read()


def _launched_group(ctx, impl, shared, launcher):
    """A rank of the group that launcher ``launcher`` forked (its ppid is the launcher)."""
    env = {"TMPDIR": shared}  # the same TMPDIR for both groups, no key, no override
    bcast = _group_member(impl)
    path = bcast.make_base_path(environ=env)
    agreed = len(set(_watch.exchange(ctx, "path", path))) == 1
    if ctx.rank == 0:
        _publish(shared, f"path{launcher}", path)
    both = [_read_when_there(shared, f"path{index}") for index in (0, 1)]
    if not agreed or None in both or both[0] == both[1]:
        return os.getppid(), path, None, False  # judged on the paths alone
    raised = _initialize(ctx, bcast, ctx.rank, path)
    if raised is not None:
        if ctx.rank == 0:
            _publish(shared, f"down{launcher}", "")  # the other group stops waiting
        return os.getppid(), path, raised, False
    overlapped = True
    if ctx.rank == 0:
        # Hold the listener until the other group's rank 0 is up too (a marker file
        # across the two nested groups; polled with a deadline).
        _publish(shared, f"up{launcher}", "")
        up, down = (os.path.join(shared, f"{m}{1 - launcher}") for m in ("up", "down"))
        s.wait_for(lambda: os.path.exists(up) or os.path.exists(down), s.GROUP_TIMEOUT / 2)
        overlapped = os.path.exists(up)
    ctx.sync("overlap")
    digest = _exchange(bcast, ctx.rank, ctx.seed, ("sec13-ppid", launcher))
    bcast.reset()
    return os.getppid(), path, digest, overlapped


@pytest.mark.clause("SEC-13")
def test_default_paths_of_groups_with_different_parents_differ(tpbcast_run, tpbcast_impl):
    """Two launchers (different parent pids) each fork a group of 2; both run at once."""
    require(tpbcast_impl, "base_path")

    def launcher(ctx):
        ctx.sync("launch")
        inner = run_ranks(
            _launched_group,
            2,
            args=(tpbcast_impl, ctx.workdir, ctx.rank),
            timeout=s.GROUP_TIMEOUT * 0.75,
            seed=ctx.seed,
            label=f"sec13-launcher{ctx.rank}",
        )
        ctx.sync("done")
        if ctx.rank == 0:
            for name in ("up0", "up1", "down0", "down1", "path0", "path1"):
                if os.path.exists(os.path.join(ctx.workdir, name)):
                    os.unlink(os.path.join(ctx.workdir, name))
            for outcome in inner.outcomes:
                if outcome.ok:
                    value: Any = outcome.value  # (ppid, path, digest, overlapped)
                    _rmdir_quietly(os.path.dirname(value[1]))
        return os.getpid(), [(o.ok, o.value, o.summary()) for o in inner.outcomes]

    result = tpbcast_run(launcher, 2, timeout=s.GROUP_TIMEOUT * 1.5)
    launched = s.ok_values(result)
    for index, (pid, ranks) in enumerate(launched):
        for ok, value, summary in ranks:
            if not s.check(
                "SEC-13",
                ok,
                f"the group of launcher {index} runs on its default path",
                summary,
            ):
                return
            s.precondition(
                "SEC-13", value[0] == pid, f"launcher {index} (pid {pid}) is the group's parent"
            )
    s.precondition(
        "SEC-13", launched[0][0] != launched[1][0], "the two launchers are two processes"
    )
    paths = [[value[1] for _, value, _ in ranks] for _, ranks in launched]
    s.check(
        "SEC-13",
        paths[0][0] == paths[0][1] and paths[1][0] == paths[1][1],
        "the ranks of one group compute the same default path",
        paths,
    )
    s.check(
        "SEC-13",
        paths[0][0] != paths[1][0],
        "groups of different parents get different default paths",
        paths,
    )
    outcomes = [[value[2] for _, value, _ in ranks] for _, ranks in launched]
    failed = [[d for d in digests if isinstance(d, s.Raised)] for digests in outcomes]
    for index, raised in enumerate(failed):
        s.check(
            "SEC-13",
            not raised,
            f"group {index} bootstraps on its default path while the other one runs",
            raised,
        )
    for index, (_, ranks) in enumerate(launched):
        digests = outcomes[index]
        if None in digests or any(failed):
            continue  # not run, or a group failed: judged above
        s.check(
            "SEC-13",
            all(value[3] for _, value, _ in ranks),
            "both groups were up at the same time",
            f"group {index}",
        )
        want = _want(result.seed, ("sec13-ppid", index))
        s.check(
            "SEC-13",
            all(d == want for d in digests),
            f"group {index} broadcasts intact on its own default path",
            digests,
        )


# --------------------------------------------------------------------------- SEC-14

UNSAFE_IDS = (
    "a b/c",
    "../../etc/passwd",
    "x;rm -rf ~",
    "tab\tnew\nline",
    "caf\u00e9\u20ac",
    "$(id)`id`",
    "/abs/olute",
    "nul\x00byte",
)


@pytest.mark.clause("SEC-14")
def test_session_ids_are_sanitised(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "base_path")
    for raw in UNSAFE_IDS:
        s.precondition("SEC-14", not SAFE.match(raw), f"{raw!r} holds a character to sanitise")

    def target(ctx):
        bcast = tpbcast_impl.create()
        directory = os.path.join(ctx.workdir, "d")
        out = []
        for raw in UNSAFE_IDS:
            for how, kwargs in (
                ("session_id", {"session_id": raw, "environ": {}}),
                ("TPBCAST_SESSION_ID", {"environ": {"TPBCAST_SESSION_ID": raw}}),
                (
                    "RTP_LLM_CPU_TP_BROADCASTER_ID",
                    {"environ": {"RTP_LLM_CPU_TP_BROADCASTER_ID": raw}},
                ),
            ):
                out.append((raw, how, _call(bcast.make_base_path, 0, base_dir=directory, **kwargs)))
        return directory, out, s.kind_of(directory)

    directory, out, kind = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    for raw, how, path in out:
        if not s.check(
            "SEC-14",
            isinstance(path, str),
            f"an unsafe session id via {how} ({raw!r}) is sanitised, not refused",
            path,
        ):
            continue
        name = os.path.basename(path)
        s.check(
            "SEC-14",
            os.path.dirname(path) == directory and name not in (".", ".."),
            f"the session id {raw!r} ({how}) cannot leave the socket directory",
            path,
        )
        s.check(
            "SEC-14",
            SAFE.match(name),
            f"the session id {raw!r} ({how}) is reduced to [A-Za-z0-9._-]",
            name,
        )
    s.check("SEC-14", kind == "missing", "the helper creates nothing", kind)


# --------------------------------------------------------------------------- SEC-15


@pytest.mark.clause("SEC-15")
def test_socket_dir_from_tmpdir_and_environment(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "base_path")
    elsewhere = "/nonexistent-tpbcast-dir"

    def target(ctx):
        os.umask(0)
        bcast = _group_member(tpbcast_impl)
        mk = bcast.make_base_path
        tmp = ctx.workdir
        ours, upstream = os.path.join(tmp, "ours"), os.path.join(tmp, "upstream")
        # The process environment points elsewhere: environ= must win over it.
        os.environ["TPBCAST_SOCKET_DIR"] = elsewhere
        os.environ.pop("TPBCAST_SESSION_ID", None)
        os.environ.pop("RTP_LLM_CPU_TP_BROADCASTER_ID", None)
        seen = {
            "tmpdir": mk(environ={"TMPDIR": tmp}, session_id="s15"),
            "ours": mk(environ={"TMPDIR": tmp, "TPBCAST_SOCKET_DIR": ours}, session_id="s15"),
            "upstream": mk(
                environ={"TMPDIR": tmp, "RTP_LLM_CPU_TP_BROADCASTER_DIR": upstream},
                session_id="s15",
            ),
            "both": mk(
                environ={
                    "TPBCAST_SOCKET_DIR": ours,
                    "RTP_LLM_CPU_TP_BROADCASTER_DIR": upstream,
                },
                session_id="s15",
            ),
            "session": mk(environ={"TMPDIR": tmp, "TPBCAST_SESSION_ID": "sessA1"}),
            "session_upstream": mk(
                environ={"TMPDIR": tmp, "RTP_LLM_CPU_TP_BROADCASTER_ID": "sessB2"}
            ),
            "os_environ": mk(session_id="s15"),
        }
        # The group on the TMPDIR path: rank 0 creates the per-uid directory.
        path = seen["tmpdir"]
        directory = os.path.dirname(path)
        before = s.kind_of(directory)
        mode = digest = None
        if _runnable(_watch.exchange(ctx, "computed", path), [[0, 1]]):
            bcast.initialize(ctx.rank, 2, path)
            mode = stat.S_IMODE(os.stat(directory).st_mode) if ctx.rank == 0 else None
            digest = _exchange(bcast, ctx.rank, ctx.seed, "sec15")
            ctx.sync("exchanged")
            bcast.reset()
            ctx.sync("reset")
            if ctx.rank == 0:
                _rmdir_quietly(directory)
        return seen, tmp, ours, upstream, before, mode, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    seen, tmp, ours, upstream, before, mode, _ = result.outcomes[0].value
    per_uid = os.path.dirname(seen["tmpdir"])
    s.check(
        "SEC-15",
        os.path.dirname(per_uid) == tmp and str(os.geteuid()) in os.path.basename(per_uid),
        "without overrides the dir is a per-uid dir under TMPDIR",
        per_uid,
    )
    s.check(
        "SEC-15",
        os.path.dirname(seen["ours"]) == ours,
        "TPBCAST_SOCKET_DIR names the dir",
        seen["ours"],
    )
    s.check(
        "SEC-15",
        os.path.dirname(seen["upstream"]) == upstream,
        "RTP_LLM_CPU_TP_BROADCASTER_DIR names the dir",
        seen["upstream"],
    )
    s.check(
        "SEC-15",
        os.path.dirname(seen["both"]) == ours,
        "TPBCAST_SOCKET_DIR wins over the upstream variable",
        seen["both"],
    )
    s.check(
        "SEC-15",
        "sessA1" in os.path.basename(seen["session"]),
        "TPBCAST_SESSION_ID names the session",
        seen["session"],
    )
    s.check(
        "SEC-15",
        "sessB2" in os.path.basename(seen["session_upstream"]),
        "RTP_LLM_CPU_TP_BROADCASTER_ID names the session",
        seen["session_upstream"],
    )
    s.check(
        "SEC-15",
        os.path.dirname(seen["os_environ"]) == elsewhere,
        "environ=None reads the process environment",
        seen["os_environ"],
    )
    s.precondition(
        "SEC-15", before == "missing", f"{per_uid} did not exist before initialize ({before})"
    )
    digests = {outcome.value[6] for outcome in result.outcomes}
    s.check(
        "SEC-15",
        digests == {_want(result.seed, "sec15")},
        "a group runs on the TMPDIR path (both ranks compute it)",
        digests if None not in digests else "the two ranks computed different paths",
    )
    if tpbcast_impl.supports("secure_dir") and mode is not None:
        s.check(
            "SEC-15",
            mode == 0o700,
            "the per-uid dir under TMPDIR is created 0700 (umask 0)",
            oct(mode),
        )


# --------------------------------------------------------------------------- SEC-16


@pytest.mark.clause("SEC-16")
def test_length_checked_before_any_socket_work(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "base_path")

    def target(ctx):
        bcast = tpbcast_impl.create()
        mk = bcast.make_base_path
        name = os.path.basename(mk(session_id="s16", base_dir=ctx.workdir, environ={}))
        tail = len(os.fsencode(f"/{name}_0.sock"))

        def dir_for(total):
            """A directory (never created) that makes rank 0's path ``total`` bytes."""
            pad = total - tail - len(os.fsencode(ctx.workdir)) - 1
            return os.path.join(ctx.workdir, "d" * pad)

        at_limit, over = dir_for(SUN_PATH_MAX), dir_for(SUN_PATH_MAX + 1)
        far = os.path.join(ctx.workdir, "f" * 150)
        fds = s.fd_table()
        fine = _call(mk, session_id="s16", base_dir=at_limit, environ={})
        refused = s.attempt(mk, session_id="s16", base_dir=over, environ={})
        refused_far = s.attempt(mk, session_id="s16", base_dir=far, environ={})
        opened = s.new_fds(fds)
        kinds = [s.kind_of(d) for d in (at_limit, over, far)]
        return name, at_limit, over, far, fine, refused, refused_far, opened, kinds

    value = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    name, at_limit, over, far, fine, refused, refused_far, opened, kinds = value
    s.precondition(
        "SEC-16", len(os.path.basename(at_limit)) > 0, "the padding fits after the workdir"
    )
    over_bytes = len(os.fsencode(os.path.join(over, name) + "_0.sock"))
    s.precondition(
        "SEC-16",
        over_bytes == SUN_PATH_MAX + 1,
        f"the over-limit path has 108 bytes, not {over_bytes}",
    )
    s.check(
        "SEC-16",
        fine == os.path.join(at_limit, name),
        "a rank-0 path of exactly 107 bytes is accepted",
        fine,
    )
    for raised, directory in ((refused, over), (refused_far, far)):
        if not s.check(
            "SEC-16",
            raised is not None,
            "a rank-0 path over 107 bytes is refused by the helper",
            f"{directory}: returned a path",
        ):
            continue
        path = os.path.join(directory, name)
        sizes = (len(os.fsencode(path + "_0.sock")), len(os.fsencode(path)))
        s.check(
            "SEC-16",
            any(s.mentions(raised, size) for size in sizes),
            f"the error names the length ({' or '.join(map(str, sizes))} bytes)",
            raised,
        )
        s.check("SEC-16", directory in raised.message, "the error names the path", raised)
        if tpbcast_impl.supports("error_details"):
            s.check(
                "SEC-16", raised.is_a("ValueError"), "a configuration error (ValueError)", raised
            )
    s.check(
        "SEC-16",
        opened == {} and kinds == ["missing"] * 3,
        "the helper does no socket or file work",
        (opened, kinds),
    )


# --------------------------------------------------------------------------- SEC-17


@pytest.mark.clause("SEC-17")
def test_dp_groups_of_one_session_get_different_paths(tpbcast_run, tpbcast_impl):
    """DP ranks 0 and 1 of ONE session run their TP groups of 2 side by side."""
    require(tpbcast_impl, "base_path")

    def target(ctx):
        dp, local = divmod(ctx.rank, 2)
        bcast = _group_member(tpbcast_impl)
        mk = bcast.make_base_path
        path = mk(dp, session_id="s17", base_dir=ctx.workdir, environ={})
        again = mk(dp, session_id="s17", base_dir=ctx.workdir, environ={})
        table = [mk(d, session_id="s17", base_dir=ctx.workdir, environ={}) for d in range(8)]
        by_default = [mk(d, environ={"TMPDIR": ctx.workdir}, key="k") for d in range(8)]
        digest = None
        if _runnable(_watch.exchange(ctx, "paths", path), [[0, 1], [2, 3]]):
            bcast.initialize(local, 2, path)
            ctx.sync("both-groups-up")
            digest = _exchange(bcast, local, ctx.seed, ("sec17", dp))
            ctx.sync("exchanged")
            bcast.reset()
        return path, again, table, by_default, digest

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    seen = s.ok_values(result)
    paths = [path for path, *_ in seen]
    s.check(
        "SEC-17",
        all(path == again for path, again, *_ in seen),
        "one session and one DP rank always give the same path",
        paths,
    )
    s.check(
        "SEC-17",
        paths[0] == paths[1] and paths[2] == paths[3],
        "the TP ranks of one DP rank share the path",
        paths,
    )
    _, _, table, by_default, _ = seen[0]
    s.check(
        "SEC-17",
        len(set(table)) == 8 and len(set(by_default)) == 8,
        "DP ranks 0..7 of one session get 8 different paths",
        (table, by_default),
    )
    s.check(
        "SEC-17", paths[0] != paths[2], "DP ranks 0 and 1 of one session get different paths", paths
    )
    for rank, (*_, digest) in enumerate(seen):
        if digest is None:
            continue  # not run: the paths above were judged instead
        s.check(
            "SEC-17",
            digest == _want(result.seed, ("sec17", rank // 2)),
            f"rank {rank} receives its own DP group's payload",
            digest,
        )
