"""TCP: broadcasters over TCP connections, judged on hosts the suite makes (scope ``tcp``).

Every group here runs inside network namespaces the test creates (``_netns``): "host A"
(``ADDRESSES[0]``) and, for TCP-4, "host B" (``ADDRESSES[1]``) joined by a veth pair.  A
rank moves into its host's namespace first thing (``setns``), before the implementation
opens a socket, and is told where to listen with the ``endpoint`` capability
(``set_endpoint(host, port, local_host)``).  So the ports are the test's own (no other
test, parallel or not, can hold them: each namespace has its own port space), no packet
ever leaves the two namespaces, and the namespaces are deleted whatever happens.  Where
namespaces cannot be made (not root, no ``ip``), every check here is UNSUPPORTED with the
reason, never PASS.

- TCP-1: every listening TCP socket of every rank is bound to the given address.
- TCP-2: after reset no TCP socket is left, and a new group on the same port forms at once.
- TCP-3: a stranger (silent, garbage, connect-and-close) at each listening port changes
  nothing: initialize and three checksummed broadcasts complete on every member.
- TCP-4: a host vanishes (its link goes down: no FIN, no RST ever arrives): rank 0
  broadcasting to it, and the peers waiting on a vanished root, end with an error within
  :data:`DEAD_BOUND` with the implementation's default deadlines (FAULT-1/FAULT-2's bound).
  The vanishing is proven (the link is down) before the clock starts; a call still blocked
  at the group deadline is judged FAIL, not waited out.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator

import pytest

from tpbcast.conformance.plugin import Unsupported, require
from tpbcast.harness import Status

from . import _netns
from . import _support as s

PORT = 29500
"""Rank 0's rendezvous port: the namespace is the test's own, so a fixed port is free."""
DEADLINE = 30.0
"""connect/init/io for TCP-1..3 (deadlines capability): a wedged group ends, the
harness's group deadline (:data:`GROUP`) judges the rest."""
GROUP = 60.0
DEAD_BOUND = 10.0
"""TCP-4's bound (SPEC, the same as FAULT-1 and FAULT-2): seconds from the vanishing."""
VANISH_GROUP = DEAD_BOUND + 20.0
"""Covers the group's setup on a loaded machine (torch's import and bootstrap) before the
vanishing, and the bound after it with a margin."""
PAYLOAD = 1024
ROUNDS = 3
WINDOW = 1.0
"""TCP-3: seconds the members keep broadcasting with the strangers there, and again after
they left (a stranger's effect may come late, from a listener thread)."""
MAX_ROUNDS = 100_000


@contextlib.contextmanager
def _hosts() -> Iterator[_netns.Hosts]:
    """Two hosts, or UNSUPPORTED naming why they cannot be made here."""
    with contextlib.ExitStack() as stack:
        try:
            hosts = stack.enter_context(_netns.two_hosts())
        except _netns.NetnsUnavailableError as exc:
            raise Unsupported(f"UNSUPPORTED (precondition): no network namespaces: {exc}") from None
        yield hosts


def _join(ctx, hosts, host: int, impl, **deadlines: float):
    """Move this rank onto ``host`` and make its broadcaster, told where to listen."""
    _netns.enter(hosts.names[host])
    bcast = s.make(impl, **deadlines)
    bcast.set_endpoint(_netns.ADDRESSES[0], PORT, _netns.ADDRESSES[host])
    return bcast


def _inet_fds(before=None) -> dict[int, tuple[tuple[str, int], bool]]:
    """This process's TCP socket fds (opened since ``before``): fd -> (local, listening)."""
    found = {}
    table = s.fd_table() if before is None else s.new_fds(before)
    for key, what in table.items():
        if not what.startswith("socket:"):
            continue
        try:
            sock = socket.socket(fileno=s.dup_fd(key))
        except OSError:
            continue
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            if sock.type != socket.SOCK_STREAM:
                continue
            listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            found[key[1]] = (sock.getsockname()[:2], listening)
    return found


def _mark(ctx, name: str) -> None:
    """Record, on the wall clock the test body shares, when ``name`` happened."""
    with open(os.path.join(ctx.workdir, name), "w") as fh:
        fh.write(repr(time.time()))


def _since(workdir: str, name: str) -> float | None:
    try:
        with open(os.path.join(workdir, name)) as fh:
            return time.time() - float(fh.read())
    except (OSError, ValueError):
        return None


def _roundtrip(ctx, bcast, salt: object) -> bool:
    data = s.payload(ctx.seed, PAYLOAD, salt)
    buf = bytearray(data if ctx.rank == 0 else PAYLOAD)
    bcast.broadcast(buf)
    if bytes(buf) != data:
        raise AssertionError(f"rank {ctx.rank}: wrong bytes in broadcast {salt!r}")
    return True


# ------------------------------------------------------------------------------ TCP-1


@pytest.mark.clause("TCP-1")
@pytest.mark.world_size(2, 3)
def test_listens_only_on_the_given_address(tpbcast_run, tpbcast_impl, world_size):
    require(tpbcast_impl, "endpoint")

    def target(ctx, hosts):
        bcast = _join(ctx, hosts, 0, tpbcast_impl, connect=DEADLINE, init=DEADLINE, io=DEADLINE)
        before = s.fd_table()
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        _roundtrip(ctx, bcast, "tcp1")  # lazy connections and listeners exist by now
        listeners = [addr for addr, listening in _inet_fds(before).values() if listening]
        ctx.sync("seen")  # every rank looked before any tears down
        bcast.reset()
        return listeners

    with _hosts() as hosts:
        result = tpbcast_run(target, world_size, args=(hosts,), timeout=GROUP)
    seen = [(o.rank, addr) for o in result.outcomes for addr in o.value]
    if not s.stageable("TCP-1", seen, "no rank held a listening TCP socket while initialized"):
        return
    wrong = [f"rank {r} listens on {a[0]}:{a[1]}" for r, a in seen if a[0] != _netns.ADDRESSES[0]]
    s.check(
        "TCP-1",
        not wrong,
        f"every listening socket is bound to the given address {_netns.ADDRESSES[0]}",
        "; ".join(wrong),
    )


# ------------------------------------------------------------------------------ TCP-2


@pytest.mark.clause("TCP-2")
def test_reset_releases_the_port_and_reinit_on_it_works(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "endpoint")

    def target(ctx, hosts):
        bcast = _join(ctx, hosts, 0, tpbcast_impl, connect=DEADLINE, init=DEADLINE, io=DEADLINE)
        before = s.fd_table()
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        first = _roundtrip(ctx, bcast, "first")
        _mark(ctx, f"first group{ctx.rank}")  # what fails from here on is the clause's
        held = len(_inet_fds(before))
        bcast.reset()
        left = sorted(
            f"fd {fd} ({a[0]}:{a[1]}{', listening' if li else ''})"
            for fd, (a, li) in _inet_fds(before).items()
        )
        ctx.sync("all reset")
        again = s.attempt(bcast.initialize, ctx.rank, ctx.world_size, ctx.base_path)
        second = None if again is not None else s.attempt(_roundtrip, ctx, bcast, "second")
        ok = again is None and second is None
        bcast.reset()
        return first, held, left, again, ok

    with _hosts() as hosts:
        result = tpbcast_run(target, 2, args=(hosts,), timeout=GROUP, expect_failure=True)
    failed = [o for o in result.outcomes if o.status is not Status.OK]
    # The clause is about the port after reset: a group that never formed (or never
    # broadcast) the first time leaves nothing to judge, whoever failed and however.
    formed = [_since(result.workdir, f"first group{rank}") is not None for rank in (0, 1)]
    s.precondition(
        "TCP-2",
        all(formed),
        "the first group on the port did not form and broadcast: "
        + ("; ".join(o.summary() for o in failed) or f"ranks that got through it: {formed}"),
    )
    if failed:
        s.check(
            "TCP-2",
            False,
            "after the first group, reset() and a second group on the same port complete",
            "; ".join(o.summary() for o in failed),
            rank=failed[0].rank,
        )
        return
    values = s.ok_values(result)
    s.precondition("TCP-2", all(v[0] for v in values), "the first group did not broadcast")
    s.precondition("TCP-2", any(v[1] for v in values), "the first group held no TCP socket")
    for rank, (_first, _held, left, again, _ok) in enumerate(values):
        s.check("TCP-2", not left, "reset() leaves no TCP socket open", ", ".join(left), rank=rank)
        s.check(
            "TCP-2",
            again is None,
            "initialize on the same port right after reset works",
            again,
            rank=rank,
        )
    s.check(
        "TCP-2",
        all(v[4] for v in values),
        "the second group delivers the right bytes",
        [v[4] for v in values],
    )


# ------------------------------------------------------------------------------ TCP-3

STRANGERS = ("silent", "garbage", "close")


def _checked(ctx, bcast, salt: object):
    """One broadcast: what it raised (None) and whether the bytes are right."""
    data = s.payload(ctx.seed, PAYLOAD, salt)
    buf = bytearray(data if ctx.rank == 0 else PAYLOAD)
    raised = s.attempt(bcast.broadcast, buf)
    return raised, raised is None and bytes(buf) == data


def _keep_broadcasting(ctx, bcast, phase: str) -> list[tuple[s.Raised | None, bool]]:
    """Broadcast for at least :data:`WINDOW` seconds and :data:`ROUNDS` rounds, so a
    reaction to a stranger that comes late (a listener thread) still falls inside: rank 0
    decides when to stop and says so in the payload's first byte (1 = more, 0 = last)."""
    calls: list[tuple[s.Raised | None, bool]] = []
    start = time.monotonic()
    for i in range(MAX_ROUNDS):
        more = i + 1 < ROUNDS or time.monotonic() - start < WINDOW
        data = bytes([more]) + s.payload(ctx.seed, PAYLOAD - 1, (phase, i))
        buf = bytearray(data if ctx.rank == 0 else PAYLOAD)
        raised = s.attempt(bcast.broadcast, buf)
        calls.append((raised, raised is None and (ctx.rank == 0 or bytes(buf[1:]) == data[1:])))
        if raised is not None or not buf[0]:
            break
    return calls


def _stranger(ctx, hosts, how: str) -> int:
    """Not a member: connect to the rendezvous port as soon as it listens, then to every
    port the members listen on once they are up; ``how`` says what to do there.  Returns
    how many connections it made (the proof that the fault happened)."""
    _netns.enter(hosts.names[0])
    held: list[socket.socket] = []

    def visit(port: int) -> bool:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(1.0)
        try:
            sock.connect((_netns.ADDRESSES[0], port))
        except OSError:
            sock.close()
            return False
        if how == "garbage":
            with contextlib.suppress(OSError):
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(64) + b"\xff" * 64)
        if how == "close":
            sock.close()
        else:
            held.append(sock)
        return True

    # The rendezvous port opens inside rank 0's initialize: poll for it, with a deadline.
    visits = int(s.wait_for(lambda: visit(PORT), GROUP / 2, interval=0.01))
    ctx.notify("rendezvous visited")
    ctx.wait("members up", timeout=GROUP)
    with open(os.path.join(ctx.workdir, "ports")) as fh:
        visits += sum(visit(int(port)) for port in fh.read().split())
    ctx.notify("strangers in")
    ctx.wait("members done", timeout=GROUP)
    for sock in held:
        sock.close()
    ctx.notify("strangers gone")
    return visits


@pytest.mark.clause("TCP-3")
@pytest.mark.parametrize("how", STRANGERS)
def test_a_stranger_does_not_disturb_the_group(tpbcast_run, tpbcast_impl, how):
    require(tpbcast_impl, "endpoint")

    def member(ctx, hosts):
        bcast = _join(ctx, hosts, 0, tpbcast_impl, connect=DEADLINE, init=DEADLINE, io=DEADLINE)
        before = s.fd_table()
        if ctx.rank != 0:  # rank 0 listens first; the stranger is there before the peer
            ctx.wait("rendezvous visited", timeout=GROUP)
        init = s.attempt(bcast.initialize, ctx.rank, 2, ctx.base_path)
        ports = sorted({a[1] for a, li in _inet_fds(before).values() if li})
        with open(os.path.join(ctx.workdir, f"ports{ctx.rank}"), "w") as fh:
            fh.write(" ".join(map(str, ports)))
        ctx.notify(f"up{ctx.rank}")
        if ctx.rank == 0:
            ctx.wait("up1", timeout=GROUP)
            with open(os.path.join(ctx.workdir, "ports"), "w") as fh:
                for rank in (0, 1):
                    with open(os.path.join(ctx.workdir, f"ports{rank}")) as part:
                        fh.write(part.read() + " ")
            ctx.notify("members up")
        if init is not None:
            return init, []
        ctx.wait("strangers in", timeout=GROUP)
        calls = _keep_broadcasting(ctx, bcast, "with strangers")
        if ctx.rank == 0:
            ctx.notify("members done")  # the strangers close their connections now
        ctx.wait("strangers gone", timeout=GROUP)
        calls += _keep_broadcasting(ctx, bcast, "after strangers")
        bcast.reset()
        return None, calls

    def stranger(ctx, hosts):
        return _stranger(ctx, hosts, how)

    with _hosts() as hosts:
        result = tpbcast_run(
            {0: member, 1: member, 2: stranger},
            args=(hosts,),
            timeout=GROUP,
            fail_fast=False,
            expect_failure=True,
        )
    visitor = result.outcomes[2]
    s.precondition(
        "TCP-3",
        visitor.status is Status.OK and visitor.value,
        f"the stranger never connected: {visitor.summary()}",
    )
    for outcome in result.outcomes[:2]:
        if not s.check(
            "TCP-3",
            outcome.status is Status.OK,
            f"member {outcome.rank} completes with a stranger ({how}) at its ports",
            outcome.summary(),
            rank=outcome.rank,
        ):
            continue
        init, calls = outcome.value
        if not s.check("TCP-3", init is None, "initialize completes", init, rank=outcome.rank):
            continue
        raised = [r for r, _ok in calls if r is not None]
        s.check(
            "TCP-3",
            not raised and all(ok for _r, ok in calls),
            f"{len(calls)} broadcasts over {2 * WINDOW:g} s complete with the right bytes",
            raised[0] if raised else f"{sum(not ok for _r, ok in calls)} with wrong bytes",
            rank=outcome.rank,
        )


# ------------------------------------------------------------------------------ TCP-4


def _not_hung(outcome, workdir: str, who: str) -> bool:
    """FAIL TCP-4 if the harness had to stop ``outcome``'s rank more than DEAD_BOUND after
    the vanishing; stopped sooner (a loaded machine ate the margin) it is inconclusive."""
    if outcome.status is not Status.TIMED_OUT:
        return True
    since = _since(workdir, "vanished")
    s.precondition(
        "TCP-4",
        since is not None and since > DEAD_BOUND,
        f"rank {outcome.rank} was stopped by the group deadline "
        f"{'before the vanishing' if since is None else f'{since:.1f} s after it'}: "
        "inconclusive",
    )
    stack = "\n".join((outcome.stack_dump or "(no stack dump)").strip().splitlines()[:12])
    s.check(
        "TCP-4",
        False,
        f"{who} ends with an error within {DEAD_BOUND:.0f} s",
        f"still blocked {since:.1f} s after the host vanished; the harness stopped it. "
        f"Stack:\n{stack}",
        rank=outcome.rank,
    )
    return False


@pytest.mark.clause("TCP-4")
def test_a_peer_whose_host_vanished_ends_the_roots_broadcasts(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "endpoint")

    def target(ctx, hosts):
        host = 0 if ctx.rank == 0 else 1
        bcast = _join(ctx, hosts, host, tpbcast_impl)  # default deadlines: the bound holds
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        first = _checked(ctx, bcast, "before")
        ctx.sync("one good round")
        if ctx.rank == 1:  # alive, on a host that is gone: it can do nothing more
            ctx.wait("judged", timeout=VANISH_GROUP)
            return first
        hosts.vanish(1)
        _mark(ctx, "vanished")
        down = not hosts.link_up(1)
        start = time.monotonic()
        rounds = s.dead_peer_rounds(bcast)
        buf = bytearray(PAYLOAD)
        for i in range(rounds):
            raised = s.attempt(bcast.broadcast, buf)
            if raised is not None:
                ctx.notify("judged")
                return first, down, i + 1, rounds, raised, time.monotonic() - start
        ctx.notify("judged")
        return first, down, rounds, rounds, None, time.monotonic() - start

    with _hosts() as hosts:
        result = tpbcast_run(
            target,
            2,
            args=(hosts,),
            fail_fast=False,
            expect_failure=True,
            timeout=VANISH_GROUP,
        )
    root = result.outcomes[0]
    vanished = _since(result.workdir, "vanished") is not None
    s.precondition("TCP-4", vanished, f"host B never vanished: {root.summary()}")
    if not _not_hung(root, result.workdir, "rank 0's broadcasts to a vanished peer"):
        return
    if not s.check("TCP-4", root.status is Status.OK, "rank 0 lives on", root.summary(), rank=0):
        return
    first, down, done, rounds, raised, after = root.value
    s.precondition("TCP-4", first[1] and down, f"staging: first round {first}, link down {down}")
    if not s.check(
        "TCP-4",
        raised is not None,
        f"one of {rounds} broadcasts to a peer whose host vanished raises",
        f"all {rounds} returned",
        rank=0,
    ):
        return
    s.check(
        "TCP-4",
        after <= DEAD_BOUND,
        f"the error comes within {DEAD_BOUND:.0f} s of the vanishing",
        f"after {after:.1f} s, in broadcast {done}: {raised}",
        rank=0,
    )


@pytest.mark.clause("TCP-4")
def test_a_root_whose_host_vanished_ends_every_peers_broadcast(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "endpoint")

    def target(ctx, hosts):
        host = 0 if ctx.rank == 0 else 1
        bcast = _join(ctx, hosts, host, tpbcast_impl)  # default deadlines: the bound holds
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        first = _checked(ctx, bcast, "before")
        ctx.sync("one good round")
        if ctx.rank == 0:  # alive, on a host that is gone: it sends nothing more
            ctx.wait("judged1", timeout=VANISH_GROUP)
            ctx.wait("judged2", timeout=VANISH_GROUP)
            return first
        if ctx.rank == 1:
            hosts.vanish(0)
            _mark(ctx, "vanished")
            ctx.notify("vanished")
        else:
            ctx.wait("vanished", timeout=s.PATIENCE)
        down = not hosts.link_up(0)
        raised = s.attempt(bcast.broadcast, bytearray(PAYLOAD))
        ctx.notify(f"judged{ctx.rank}")
        return first, down, raised

    with _hosts() as hosts:
        result = tpbcast_run(
            target,
            3,
            args=(hosts,),
            fail_fast=False,
            expect_failure=True,
            timeout=VANISH_GROUP,
        )
    s.precondition("TCP-4", _since(result.workdir, "vanished") is not None, "host A never vanished")
    for peer in result.outcomes[1:]:
        who = f"peer {peer.rank}'s broadcast from a root whose host vanished"
        if not _not_hung(peer, result.workdir, who):
            continue
        if not s.check(
            "TCP-4",
            peer.status is Status.OK,
            f"peer {peer.rank} lives on",
            peer.summary(),
            rank=peer.rank,
        ):
            continue
        first, down, raised = peer.value
        s.precondition(
            "TCP-4", first[1] and down, f"staging: first round {first}, link down {down}"
        )
        if s.check(
            "TCP-4",
            raised is not None,
            f"{who} raises",
            "it returned as if rank 0 had sent a payload",
            rank=peer.rank,
        ):
            s.check(
                "TCP-4",
                raised.elapsed <= DEAD_BOUND,
                f"{who} ends within {DEAD_BOUND:.0f} s",
                raised,
                rank=peer.rank,
            )
