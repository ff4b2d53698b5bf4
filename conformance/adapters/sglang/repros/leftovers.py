"""What a gloo broadcast group listens on, leaks into children, and leaves behind.

Standalone: plain SGLang 0.5.23 (``--engine sglang``: its ``cpu_group`` as
``GroupCoordinator`` builds it, torn down as ``GroupCoordinator.destroy`` then
``destroy_distributed_environment`` do) or plain torch (``--engine torch``: the default
gloo group, ``destroy_process_group()``), no tpbcast::

    python leftovers.py --engine sglang
    python leftovers.py --engine torch

Two ranks are forked on 127.0.0.1 (``init_method=tcp://127.0.0.1:<port>``, as SGLang's
``dist_init_addr``).  Each rank prints, while the group is up: every listening TCP socket
with its local address (a wildcard ``0.0.0.0``/``::`` listens on every interface), and
every socket/pipe/eventfd fd without close-on-exec (inherited by any program the rank
starts); after the teardown: the TCP sockets and threads still there.  Exit status 1 if a
rank listened on a wildcard address, leaked an fd to exec, or kept a socket after the
teardown.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyobj_faults import sglang_modules  # the same import workaround


def sockets() -> dict[int, tuple[str, bool]]:
    found = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("socket:"):
            continue
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with s:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                listening = bool(s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
                host, port = s.getsockname()[:2]
                found[fd] = (f"[{host}]:{port}", listening)
    return found


def no_cloexec() -> list[str]:
    leaks = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        if fd > 2 and not flags & fcntl.FD_CLOEXEC and not target.startswith("/"):
            leaks.append(f"fd {fd} -> {target}")
    return leaks


def rank_main(rank: int, port: int, engine: str, out: int) -> None:
    import torch.distributed as dist

    base_fds = set(os.listdir("/proc/self/fd"))
    threads_before = len(os.listdir("/proc/self/task"))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = None
    if engine == "sglang":
        common = sglang_modules()
        group = dist.new_group([0, 1], backend="gloo")
        common.broadcast_pyobj(
            [{"x": 1}] if rank == 0 else [], rank, group, src=0, force_cpu_device=True
        )
    else:
        import torch

        dist.broadcast(torch.zeros(8, dtype=torch.uint8), src=0)
    up = sockets()
    listening = sorted({a for a, li in up.values() if li})
    leaks = [leak for leak in no_cloexec() if leak.split()[1] not in base_fds]
    if engine == "sglang":
        dist.destroy_process_group(group)
        del group  # GroupCoordinator.destroy: self.cpu_group = None
    dist.destroy_process_group()
    left = sorted(a for fd, (a, _li) in sockets().items() if str(fd) not in base_fds)
    other = sorted(
        f"fd {fd} -> {os.readlink(f'/proc/self/fd/{fd}')}"
        for fd in set(os.listdir("/proc/self/fd")) - base_fds
        if os.path.exists(f"/proc/self/fd/{fd}")
        and not os.readlink(f"/proc/self/fd/{fd}").startswith("/proc")
    )
    threads_after = len(os.listdir("/proc/self/task"))
    wildcard = [a for a in listening if a.startswith(("[0.0.0.0]", "[::]"))]
    lines = [
        f"rank {rank}: listening while up: {', '.join(listening) or 'none'}"
        + (f"  <- WILDCARD: {', '.join(wildcard)}" if wildcard else ""),
        f"rank {rank}: fds without close-on-exec while up: {len(leaks)}: "
        + ", ".join(leaks[:8])
        + (" ..." if len(leaks) > 8 else ""),
        f"rank {rank}: TCP sockets left after the teardown: {', '.join(left) or 'none'}",
        f"rank {rank}: every fd left after the teardown: {', '.join(other) or 'none'}",
        f"rank {rank}: threads before {threads_before}, after the teardown {threads_after} "
        f"(python sees {threading.active_count()})",
    ]
    bad = bool(wildcard or leaks or left or other)
    os.write(out, ("\n".join(lines) + f"\nrank {rank}: {'DEFECT' if bad else 'OK'}\n").encode())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("sglang", "torch"), default="sglang")
    args = p.parse_args()
    if args.engine == "sglang":
        sglang_modules()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r, w = os.pipe()
    pids = []
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                rank_main(rank, port, args.engine, w)
            except BaseException as exc:
                os.write(w, f"rank {rank}: failed: {exc!r}\n".encode())
                code = 1
            os._exit(code)
        pids.append(pid)
    os.close(w)
    statuses = [os.waitpid(pid, 0)[1] for pid in pids]  # each rank ends on its own
    text = os.read(r, 1 << 16).decode()
    print(text, end="")
    return 1 if "DEFECT" in text or any(statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
