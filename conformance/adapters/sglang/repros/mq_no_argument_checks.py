"""SGLang's MessageQueue checks no rank, has no re-initialize, and refuses another root
only with an ``assert`` that does not name it.

sglang/srt/distributed/device_communicators/shm_broadcast.py (0.5.23, adapted from vLLM's):

- ``create_from_handle(handle, rank)`` (line 273-313) never checks ``rank``: a rank that is
  not one of ``handle.local_reader_ranks`` becomes a remote reader (line 296-311), opens a
  zmq context and a SUB socket, and connects to whatever the handle holds.
  ``create_from_process_group`` hands it the process group's rank after waiting for the
  writer's handle (line 516-518), so where no writer comes it waits.
- ``MessageQueue.__init__`` (line 175-268) refuses a world size below 1 only by
  ``assert len(local_reader_ranks) == n_local_reader`` (line 187).
- There is no re-initialize: building the queue again binds new zmq ports and nothing
  refuses it.
- sglang/srt/distributed/parallel_state.py ``GroupCoordinator.broadcast_object`` (line
  1566-1577) refuses a root other than 0 with ``assert src == 0, "Message queue broadcaster
  only supports src=0"``: the message does not name the root, and ``python -O`` removes it.

Run: python mq_no_argument_checks.py   (plain Python + SGLang, no tpbcast; one process, no
waiting).  Prints DEFECT / OK per part; exit status 1 if a defect showed.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyobj_faults import sglang_modules  # the same import workaround


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def main() -> int:
    sglang_modules()
    mq = importlib.import_module("sglang.srt.distributed.device_communicators.shm_broadcast")
    coordinator_class = importlib.import_module(
        "sglang.srt.distributed.parallel_state"
    ).GroupCoordinator

    def writer(n_readers: int) -> Any:  # parallel_state: create_from_process_group(.., 1 << 22, 6)
        readers = list(range(1, n_readers + 1))
        return mq.MessageQueue(n_readers, n_readers, readers, 1 << 22, 6)

    shown = 0
    first = writer(1)  # rank 0 of a group of 2: reader rank 1
    handle = first.export_handle()
    for rank in (-1, 2):
        before = fds()
        try:
            queue = mq.MessageQueue.create_from_handle(handle, rank)
            what = f"accepted it as a remote reader ({len(fds() - before)} new fds)"
            defect = True
            del queue
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
        writer(-1)
        print("DEFECT: a queue for world size 0 was built")
        shown += 1
    except AssertionError:
        print("OK: world size 0 (n_reader -1) is refused, by an assert statement")
    before = fds()
    again = writer(1)  # rank 0 initializes again, the same arguments
    added = len(fds() - before)
    print(
        f"{'DEFECT' if added else 'OK'}: building the queue again (no re-initialize) "
        f"opens {added} new fd(s) and refuses nothing"
    )
    shown += bool(added)
    coordinator = coordinator_class.__new__(coordinator_class)
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
    del first, again
    gc.collect()
    print(f"SUMMARY: {shown} defect(s) shown")
    return 1 if shown else 0


if __name__ == "__main__":
    raise SystemExit(main())
