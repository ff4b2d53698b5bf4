"""(d) Leftovers: IPC socket files (mode 0755) stay in VLLM_RPC_BASE_PATH (default /tmp)
after a clean teardown, the writer keeps an fd (its pipe to the resource tracker) after
the teardown, the resource-tracker helper outlives the writer, and the 24 MiB /dev/shm
segment survives a kill of the writer's process group.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0):
- every writer binds two ``ipc://`` endpoints made by ``get_open_zmq_ipc_path()``
  (``<VLLM_RPC_BASE_PATH>/<uuid4>``, vllm/utils/network_utils.py:175-177): the XPUB socket
  (line 542-544) and the notify PUB socket (line 549, bound at line 182); the teardown
  (``_close_zmq``, line 489-492: ``close(linger=0)`` + ``term()``) never unlinks them, and
  they are created with the process umask (0755 under the usual 022), not 0600;
- the writer's ring is ``shared_memory.SharedMemory(create=True)`` (line 348), which
  registers it with multiprocessing's resource tracker: a helper process the writer starts
  and that outlives it, reached through a pipe the writer keeps open after the teardown;
- the segment is unlinked only by the writer's ``ShmRingBuffer.__del__`` (line 393-397)
  or by that resource tracker; a kill of the writer's process group kills the tracker too
  (same group), so the 24 MiB segment (6 x 4 MiB + metadata) stays in /dev/shm.

Run: python d_leftovers.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per part and run; exit status 1 if any part showed.  Deadline 20 s per
run; the repro removes what it found afterwards (its private VLLM_RPC_BASE_PATH, the segment).
"""

from __future__ import annotations

import os
import signal
import stat
import time

from _common import (
    RPC_DIR,
    Group,
    MessageQueue,
    Report,
    handle_of,
    main_loop,
    new_writer_queue,
    reader_of,
    writer_with_handle,
)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def clean_body(queue: MessageQueue, report: Report) -> None:
    if queue._is_writer:
        queue.enqueue(b"one message")
        report("helpers", pids=_children_of(os.getpid()))
    else:
        queue.dequeue()
    queue.shutdown()
    del queue  # GroupCoordinator.destroy: self.mq_broadcaster = None
    report("torn down")


def idle_body(queue: MessageQueue, report: Report) -> None:
    queue.enqueue(b"one message")
    report("sent")
    time.sleep(60)  # the parent kills this process group


def _sockets(directory: str) -> dict[str, int]:
    found = {}
    for name in os.listdir(directory):
        st = os.lstat(os.path.join(directory, name))
        if stat.S_ISSOCK(st.st_mode):
            found[name] = stat.S_IMODE(st.st_mode)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def clean_teardown(run: int) -> tuple[bool, bool]:
    before = set(_sockets(RPC_DIR))
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(clean_body, 1))
        group.wait_for(writer, "handle", 15)
        reader = group.fork("reader", reader_of(handle_of(writer), 1, clean_body))
        for child in (writer, reader):
            group.wait_for(child, "torn down", 10)
        helpers = (writer.get("helpers") or {}).get("pids", [])
        os.waitpid(writer.pid, 0)  # the writer exits normally after its teardown
        writer.status = 0
        reaped = time.monotonic()
        outliving = [p for p in helpers if _alive(p)]  # still there once the writer is gone
        while any(_alive(p) for p in outliving) and time.monotonic() - reaped < 5.0:
            time.sleep(0.005)
        lasted = time.monotonic() - reaped
        time.sleep(max(0.0, 1.0 - lasted))
        left = {n: m for n, m in _sockets(RPC_DIR).items() if n not in before}
        sockets_defect = bool(left)
        modes = ", ".join(sorted({oct(m) for m in left.values()})) or "-"
        print(
            f"run {run}: {'DEFECT' if sockets_defect else 'OK'}: {len(left)} IPC socket "
            f"file(s) left in VLLM_RPC_BASE_PATH after a clean teardown and exit (mode {modes})"
        )
        print(
            f"run {run}: {'DEFECT' if outliving else 'OK'}: {len(outliving)} helper "
            f"process(es) of the writer (pids {outliving or helpers}: multiprocessing's "
            f"resource tracker) still alive when the writer had exited and was reaped"
            + (f"; gone {lasted * 1000:.0f} ms later" if outliving else "")
        )
        for pid in outliving:  # not ours to leave running
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        return sockets_defect, bool(outliving)
    finally:
        group.close()


def group_kill(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(idle_body, 1), new_pgroup=True)
        group.wait_for(writer, "handle", 15)
        segment = handle_of(writer).buffer_handle
        assert segment is not None
        reader = group.fork("reader", reader_of(handle_of(writer), 1, lambda q, r: q.dequeue()))
        group.wait_for(writer, "sent", 10)
        group.wait_for(reader, "ready", 5)
        os.killpg(writer.pid, signal.SIGKILL)
        os.waitpid(writer.pid, 0)
        writer.status = 0
        time.sleep(1.0)
        path = f"/dev/shm/{segment[3]}"
        left = os.path.exists(path)
        size = os.stat(path).st_size if left else 0
        print(
            f"run {run}: {'DEFECT' if left else 'OK'}: the writer's segment {path} "
            f"({size / (1 << 20):.0f} MiB) {'survives' if left else 'is gone after'} a "
            "SIGKILL of the writer's process group"
        )
        return left
    finally:
        group.close()  # removes the segment


def fd_target(report: Report) -> None:
    before = set(os.listdir("/proc/self/fd"))
    queue = new_writer_queue(1)
    queue.shutdown()
    del queue  # GroupCoordinator.destroy: self.mq_broadcaster = None
    new = sorted(set(os.listdir("/proc/self/fd")) - before, key=int)
    report("fds", left={fd: _target_of(fd) for fd in new})


def _target_of(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def fd_left(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("fd-writer", fd_target)
        got = group.wait_for(writer, "fds", 15)
        if got is None:
            print(f"run {run}: INCONCLUSIVE: the writer reported nothing\n{writer.output()}")
            return False
        left = got["left"]
        print(
            f"run {run}: {'DEFECT' if left else 'OK'}: {len(left)} fd(s) the writer did not "
            f"have before creating the queue are still open after its teardown: {left}"
        )
        return bool(left)
    finally:
        group.close()


def one_run(run: int) -> bool:
    sockets, helper = clean_teardown(run)
    return sockets | helper | fd_left(run) | group_kill(run)


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
