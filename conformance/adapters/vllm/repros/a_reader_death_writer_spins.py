"""(a) A reader that dies before reading leaves the writer spinning forever in
``acquire_write`` once the ring is full, even after ``shutdown()``.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``acquire_write``'s
``while True`` loop (line 733) leaves only when every reader flag of the slot is set
(``check``, line 736) or when a ``timeout`` passed to ``enqueue`` runs out (line 756); it
never looks at ``shutting_down`` (set by ``shutdown()``, line 721) nor at whether the
readers are alive.  So with the default ``timeout=None`` (``broadcast_object``, line 1021)
the 7th enqueue after a reader's death never returns.

Run: python a_reader_death_writer_spins.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run; exit status 1 if the defect showed.  Deadline 20 s per run.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from _common import Group, MessageQueue, Report, handle_of, main_loop, reader_of, writer_with_handle

MESSAGES = 64  # well past the 6-slot ring
SHUTDOWN_AFTER = 2.0  # s after the writer blocks
GRACE = 8.0  # s the writer gets after shutdown() to return or raise


def writer_body(queue: MessageQueue, report: Report) -> None:
    report.wait_go()  # the parent says go once the reader is dead

    def stop() -> None:
        time.sleep(SHUTDOWN_AFTER)
        report("shutdown called")
        queue.shutdown()

    for i in range(MESSAGES):
        if i == 6:
            threading.Thread(target=stop, daemon=True).start()
        report("enqueue", i=i)
        queue.enqueue(b"x" * 16)
    report("returned")


def one_run(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(writer_body, 1))
        group.wait_for(writer, "handle", 15)
        reader = group.fork("reader", reader_of(handle_of(writer), 1, lambda q, r: time.sleep(60)))
        group.wait_for(reader, "ready", 10)
        os.kill(reader.pid, signal.SIGKILL)  # dies before reading anything
        os.waitpid(reader.pid, 0)
        reader.status = 0
        writer.go()
        group.wait_for(writer, "shutdown called", 10)
        called = writer.get("shutdown called")
        group.pump(GRACE)
        enqueued = max((e["i"] for e in writer.events if e["event"] == "enqueue"), default=-1)
        returned = writer.has("returned") or writer.has("raised")
        if called is not None and not returned and writer.alive():
            print(
                f"run {run}: DEFECT: reader SIGKILLed before reading; the writer entered "
                f"enqueue #{enqueued + 1} (ring of 6 slots full) and is still spinning "
                f"{GRACE:g} s after shutdown() was called"
            )
            return True
        print(
            f"run {run}: OK: writer {'returned' if writer.has('returned') else 'raised'} "
            f"after {enqueued + 1} enqueues ({writer.get('raised') or ''})"
            if returned
            else f"run {run}: INCONCLUSIVE: no shutdown call seen\n{writer.output()[-2000:]}"
        )
        return False
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
