"""(c) A payload that takes the overflow path just before the writer's teardown is lost,
and the reader blocks forever in ``dequeue``, ignoring ``shutdown()``.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): a message of
``max_chunk_bytes`` or more (4 MiB as parallel_state sets the queue up) only flags the
ring slot as overflow (line 956-957) and goes out on the zmq XPUB socket with
``send_multipart`` (line 958), which returns before the bytes have left the process.
The writer's teardown (``shutdown()``, then ``GroupCoordinator.destroy`` drops the
queue: its finalizer ``_close_zmq``, line 489-492, closes that socket with ``linger=0``,
discarding whatever libzmq has not sent yet), then the end of the worker process, loses
the bytes: nothing waits for the send to complete.  The reader saw the overflow flag
and waits in ``MessageQueue.recv`` (line 1013-1016: ``socket.poll(timeout=None)``) for
bytes that will never come; ``shutdown()`` only cancels the ring-slot wait
(``SpinCondition.cancel``, line 199), not this poll.

Run: python c_overflow_lost_at_teardown.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run; exit status 1 if the defect showed.  Deadline 20 s per run.
"""

from __future__ import annotations

import os
import threading
import time

from _common import (
    MAX_CHUNK_BYTES,
    Group,
    MessageQueue,
    Report,
    handle_of,
    main_loop,
    reader_of,
    writer_with_handle,
)

PAYLOAD = MAX_CHUNK_BYTES + 1024  # just above the slot size: the overflow path
SHUTDOWN_AFTER = 2.0  # s after the writer's teardown, the reader's own thread calls shutdown()
WAIT = 8.0  # s the reader gets after the teardown


def writer_body(queue: MessageQueue, report: Report) -> None:
    report.wait_go()
    queue.enqueue(b"\x5a" * PAYLOAD)
    queue.shutdown()
    del queue  # GroupCoordinator.destroy: self.mq_broadcaster = None (finalizer: _close_zmq)
    report("torn down")
    os._exit(0)  # the worker process ends, as a TP rank does after its teardown


def reader_body(queue: MessageQueue, report: Report) -> None:
    def stop() -> None:
        report.wait_go()  # the parent says go when the writer is torn down
        time.sleep(SHUTDOWN_AFTER)
        report("shutdown called")
        queue.shutdown()

    threading.Thread(target=stop, daemon=True).start()
    got = queue.dequeue()
    report("returned", nbytes=len(got), intact=got == b"\x5a" * PAYLOAD)


def one_run(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(writer_body, 1))
        group.wait_for(writer, "handle", 15)
        reader = group.fork("reader", reader_of(handle_of(writer), 1, reader_body))
        group.wait_for(reader, "ready", 10)
        writer.go()
        group.wait_for(writer, "torn down", 10)
        reader.go()
        group.wait_for(reader, "returned", WAIT)
        got = reader.get("returned")
        if got is not None:
            state = "intact" if got["intact"] else "CORRUPT"
            print(f"run {run}: OK: the reader got the {got['nbytes']}-byte payload ({state})")
            return not got["intact"]
        if reader.has("raised"):
            print(f"run {run}: OK (an error, not a hang): the reader raised {reader.get('raised')}")
            return False
        called = "after shutdown() was called" if reader.has("shutdown called") else ""
        print(
            f"run {run}: DEFECT: the {PAYLOAD}-byte overflow payload enqueued just before the "
            f"writer's teardown never arrived; the reader is still blocked in dequeue() "
            f"{WAIT:g} s later, {called or '(shutdown() not called yet)'}"
        )
        return True
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
