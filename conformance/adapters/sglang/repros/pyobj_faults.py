"""What a dead, stopped or vanished rank does to the others in a gloo broadcast group.

Standalone: plain SGLang 0.5.23 (installed --no-deps) or plain torch, no tpbcast.

    python pyobj_faults.py --engine sglang --fault kill  --victim peer --timeout 3
    python pyobj_faults.py --engine sglang --fault stop  --victim peer --timeout 3
    python pyobj_faults.py --engine sglang --fault vanish --victim root --timeout 3
    python pyobj_faults.py --engine torch  --fault stop  --victim peer          # torch's default

``--engine sglang``: SGLang's ``broadcast_pyobj(data, rank, cpu_group, src=0,
force_cpu_device=True)`` on a ``cpu_group`` built as SGLang's ``GroupCoordinator`` builds
it (``init_process_group`` over ``tcp://``, then ``new_group(backend="gloo",
timeout=gloo_timeout)``); ``--engine torch``: ``dist.broadcast`` of a uint8 tensor on the
default gloo group (torch's own, as TensorRT-LLM's torch communicator does).

Ranks (``--world``, default 3) are forked; after one good broadcast the fault hits the
victim (rank 1 for ``--victim peer``, rank 0 for ``root``): ``kill`` = SIGKILL, ``stop`` =
SIGSTOP (a process that hangs, or a machine that swaps), ``vanish`` = the victim's host
leaves the network without a FIN or RST (the victim runs in a network namespace of its
own, joined by a veth pair, whose link goes down; needs root and ``ip``; the namespaces
are deleted afterwards).  The other ranks then keep calling the broadcast; the script
prints, per surviving rank, how long after the fault its call ended and with what.  The
timeout is the one configured (``--timeout``; default: the engine's own, which the script
reads from the engine and prints: SGLang's 7200 s, torch's 1800 s); a rank still blocked
at ``timeout + 15 s`` is reported as such and every child is SIGKILLed and reaped.  Exit
status 1 if any surviving rank waited longer than 10 s after the fault (the defect).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.machinery
import importlib.util
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import types

BOUND = 10.0
NS = (f"repro-{os.getpid()}-a", f"repro-{os.getpid()}-b")
ADDR = ("10.234.0.1", "10.234.0.2")
LINKS = ("rveth0", "rveth1")


def sglang_modules() -> types.ModuleType:
    """SGLang's broadcast code without its front end (``import sglang`` runs sglang.lang)
    and, where triton is absent, with a stub in its place (common.py imports it)."""
    spec = importlib.util.find_spec("sglang")
    pkg = types.ModuleType("sglang")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    sys.modules.setdefault("sglang", pkg)
    if importlib.util.find_spec("triton") is None:

        class Stub(types.ModuleType):
            def __getattr__(self, name: str) -> Stub:
                if name.startswith("__"):
                    raise AttributeError(name)
                return Stub(name)

            def __call__(self, *a: object, **k: object) -> object:
                return a[0] if len(a) == 1 and callable(a[0]) and not k else (lambda f: f)

        for name in ("triton", "triton.language", "triton.runtime", "triton.runtime.jit"):
            stub = Stub(name)
            stub.__path__ = []
            stub.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            sys.modules.setdefault(name, stub)
    from sglang.srt.utils import common

    return common


def engine_default(engine: str) -> float:
    """The engine's own timeout, read from its code, not from this script."""
    if engine == "sglang":
        sglang_modules()
        import sglang.srt.distributed.parallel_state as ps

        default = inspect.signature(ps.GroupCoordinator.__init__).parameters["gloo_timeout"]
        return default.default.total_seconds()
    from torch.distributed import constants

    return constants.default_pg_timeout.total_seconds()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def setns(name: str) -> None:
    import ctypes

    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:
        raise OSError(ctypes.get_errno(), f"setns {name}")
    os.close(fd)


def rank_main(rank: int, port: int, args: argparse.Namespace, fds: tuple[int, int]) -> None:
    """One rank: the group, one good broadcast, then broadcasts until one fails."""
    world, timeout = args.world, args.timeout_s
    victim = 1 if args.victim == "peer" else 0
    report_w, go_r = fds
    import torch
    import torch.distributed as dist

    host = ADDR[1] if victim == 0 else ADDR[0]  # rank 0's host: the store's address
    if args.fault == "vanish":
        mine = 1 if rank == victim else 0
        setns(NS[mine])
        os.environ["GLOO_SOCKET_IFNAME"] = LINKS[mine]
    else:
        host = "127.0.0.1"
    td = datetime.timedelta(seconds=timeout)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=world)
    if args.engine == "sglang":
        common = sglang_modules()
        group = dist.new_group(list(range(world)), backend="gloo", timeout=td)

        def bcast(i: int) -> object:
            return common.broadcast_pyobj(
                [{"step": i}] if rank == 0 else [], rank, group, src=0, force_cpu_device=True
            )
    else:
        dist.destroy_process_group()
        dist.init_process_group(
            "gloo", init_method=f"tcp://{host}:{port + 1}", rank=rank, world_size=world, timeout=td
        )

        def bcast(i: int) -> object:
            t = torch.full((64,), i % 256, dtype=torch.uint8)
            if rank != 0:
                t = torch.zeros(64, dtype=torch.uint8)
            dist.broadcast(t, src=0)
            return t

    bcast(0)
    os.write(report_w, f"{rank} ready\n".encode())
    os.read(go_r, 1)  # the fault has happened
    start = time.monotonic()
    try:
        for i in range(1, 100000):
            bcast(i)
        line = "returned every time"
    except Exception as exc:  # the engine's own error: what we measure
        line = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    os.write(report_w, f"{rank} {time.monotonic() - start:.3f} {line}\n".encode())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> int:  # noqa: PLR0912, PLR0915 - one script, read top down
    world = args.world
    victim = 1 if args.victim == "peer" else 0
    default = engine_default(args.engine)
    timeout = args.timeout if args.timeout else default
    args.timeout_s = timeout
    print(
        f"engine {args.engine}: its own timeout is {default:.0f} s (read from its code); "
        f"configured here: {timeout:g} s; fault {args.fault} of rank {victim} "
        f"({args.victim}), world {world}"
    )
    port = free_port() if args.fault != "vanish" else 29500
    made = []
    if args.fault == "vanish":
        for name in NS:
            ip("netns", "add", name)
            made.append(name)
        ip(
            "link",
            "add",
            LINKS[0],
            "netns",
            NS[0],
            "type",
            "veth",
            "peer",
            "name",
            LINKS[1],
            "netns",
            NS[1],
        )
        for name, link, addr in zip(NS, LINKS, ADDR, strict=True):
            ip("-n", name, "addr", "add", f"{addr}/30", "dev", link)
            ip("-n", name, "link", "set", link, "up")
            ip("-n", name, "link", "set", "lo", "up")
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    try:
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    rank_main(rank, port, args, (report_w, go_r))
                except BaseException as exc:
                    os.write(report_w, f"{rank} setup-failed {exc!r:.200}\n".encode())
                    code = 1
                os._exit(code)
            pids.append(pid)
        os.close(report_w)
        with open(report_r, buffering=1, closefd=False) as lines:
            for _ in range(world):
                print("  ", lines.readline().strip())
        if args.fault == "kill":
            os.kill(pids[victim], signal.SIGKILL)
        elif args.fault == "stop":
            os.kill(pids[victim], signal.SIGSTOP)
        else:  # the victim's host (namespace b) leaves the network
            ip("-n", NS[1], "link", "set", LINKS[1], "down")
        fault_at = time.monotonic()
        os.write(go_w, b"x" * world)
        deadline = fault_at + timeout + 15.0
        survivors = world - 1
        worst = 0.0
        os.set_blocking(report_r, False)
        buf = b""
        while survivors and time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                chunk = os.read(report_r, 4096)
                buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                r, seconds, what = line.decode().split(" ", 2)
                if int(r) == victim:  # alive on a vanished host: not one of the others
                    print(
                        f"   rank {r} (the victim, alive on the vanished host): its "
                        f"broadcast ended {seconds} s after the fault: {what}"
                    )
                    continue
                print(f"   rank {r}: its broadcast ended {seconds} s after the fault: {what}")
                worst = max(worst, float(seconds))
                survivors -= 1
            time.sleep(0.05)
        if survivors:
            print(
                f"   {survivors} surviving rank(s) still blocked {timeout + 15:.0f} s after "
                "the fault"
            )
            worst = timeout + 15
        print(
            "DEFECT" if worst > BOUND else "OK",
            f"(worst wait after the fault {worst:.1f} s; bound {BOUND:g} s)",
        )
        return 1 if worst > BOUND else 0
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for name in made:
            subprocess.run(
                ["ip", "netns", "del", name], capture_output=True, timeout=10, check=False
            )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("sglang", "torch"), default="sglang")
    p.add_argument("--fault", choices=("kill", "stop", "vanish"), required=True)
    p.add_argument("--victim", choices=("peer", "root"), default="peer")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--timeout", type=float, default=0.0, help="seconds; 0 = the engine's own")
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
