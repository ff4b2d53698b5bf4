"""(i) vLLM's queue checks no rank, has no re-initialize, and refuses another root only with
an ``assert`` that does not name it.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0):

- ``create_from_handle(handle, rank)`` (line 622-686) never checks ``rank``: a rank that is
  not one of ``handle.local_reader_ranks`` becomes a remote reader (line 669-680), opens a
  zmq context and a SUB socket, and only then fails on the handle's missing remote address
  (``connect(None)``: a TypeError, not a check).  ``create_from_process_group`` (line
  1080-1160) hands it whatever rank the process group gives; a rank that is not the writer
  waits for the writer's handle first (line 1150-1157), so where no writer comes it waits.
- ``MessageQueue.__init__`` (line 496-600) refuses a world size below 1 only by
  ``assert len(local_reader_ranks) == n_local_reader`` (line 511).
- There is no re-initialize: building the queue again opens new IPC sockets (line 542-549,
  a fresh ``ipc://`` path each time) and nothing refuses it.
- vllm/distributed/parallel_state.py ``GroupCoordinator.broadcast_object`` (line 856-867)
  refuses a root other than 0 with ``assert src == 0, "Message queue broadcaster only
  supports src=0"``: the message does not name the root, and ``python -O`` removes it.

Run: python i_no_argument_checks.py   (plain Python + vLLM, no tpbcast; one process, no
waiting).  Prints DEFECT / OK per part; exit status 1 if a defect showed.
"""

from __future__ import annotations

import gc
import os

from _common import RPC_DIR, MessageQueue, new_writer_queue
from vllm.distributed.parallel_state import GroupCoordinator


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def main() -> int:
    shown = 0
    writer = new_writer_queue(1)  # rank 0 of a group of 2: reader rank 1
    handle = writer.export_handle()
    for rank in (-1, 2):
        before = fds()
        try:
            MessageQueue.create_from_handle(handle, rank)
            what, defect = "accepted it", True
        except Exception as exc:
            opened = len(fds() - before)
            what = f"{type(exc).__name__}: {exc!r:.60} after opening {opened} new fd(s)"
            defect = opened > 0 or not isinstance(exc, ValueError)
        gc.collect()
        shown += defect
        print(
            f"{'DEFECT' if defect else 'OK'}: create_from_handle(handle, {rank}) for a "
            f"group of 2: {what} (no rank check)"
        )
    try:
        new_writer_queue(-1)
        print("DEFECT: a queue for world size 0 was built")
        shown += 1
    except AssertionError:
        print("OK: world size 0 (n_reader -1) is refused, by an assert statement")
    sockets = {p for p in os.listdir(RPC_DIR)}
    again = new_writer_queue(1)  # rank 0 initializes again, the same arguments
    added = sorted(set(os.listdir(RPC_DIR)) - sockets)
    print(
        f"{'DEFECT' if added else 'OK'}: building the queue again (no re-initialize) "
        f"binds {len(added)} new IPC socket(s) and refuses nothing: {added}"
    )
    shown += bool(added)
    coordinator = GroupCoordinator.__new__(GroupCoordinator)
    coordinator.world_size, coordinator.mq_broadcaster = 3, again
    try:
        coordinator.broadcast_object(b"x", src=2)
        print("DEFECT: broadcast_object(src=2) accepted")
        shown += 1
    except AssertionError as exc:
        named = "2" in str(exc)
        print(
            f"{'OK' if named else 'DEFECT'}: broadcast_object(src=2) on a group of 3 "
            f"refused by an assert whose message {'names' if named else 'does not name'} "
            f"the root: {str(exc)!r}"
        )
        shown += not named
    del writer, again
    gc.collect()
    print(f"SUMMARY: {shown} defect(s) shown")
    return 1 if shown else 0


if __name__ == "__main__":
    raise SystemExit(main())
