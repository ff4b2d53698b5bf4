"""(h) When the writer's enqueue fails on a dead reader (its timeout runs out on the full
ring), the other readers are not told: they wait for the next message until their own
timeout.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``acquire_write``'s
``while True`` loop (line 733) ends a blocked write only through the caller's ``timeout``
(line 756, ``TimeoutError``) and leaves nothing behind for the readers: no flag, no
message; a reader's ``acquire_read`` (line 892) keeps waiting for the next slot, and only
its own ``timeout`` ends it.  One reader's death thus stalls every reader of the group
for its full timeout.

Run: python h_writer_failure_leaves_readers_waiting.py [--runs N]   (plain Python + vLLM,
no tpbcast).  Prints DEFECT / OK per run; exit status 1 if the defect showed.  Deadline
20 s per run.
"""

from __future__ import annotations

import os
import signal

from _common import Group, MessageQueue, Report, handle_of, main_loop, reader_of, writer_with_handle

MESSAGES = 64  # well past the 6-slot ring
WRITER_TIMEOUT = 1.0  # s: the writer's enqueue timeout
READER_TIMEOUT = 10.0  # s: the surviving reader's dequeue timeout
PROMPT = 3.0  # s the surviving reader gets after the writer's failure


def writer_body(queue: MessageQueue, report: Report) -> None:
    report.wait_go()  # the parent says go once reader 1 is dead
    for i in range(MESSAGES):
        try:
            queue.enqueue(b"x" * 1000, timeout=WRITER_TIMEOUT)
        except TimeoutError:
            report("enqueue failed", i=i)
            break
    report.wait_go()  # alive, its queue untouched, until the parent is done


def survivor_body(queue: MessageQueue, report: Report) -> None:
    received = 0
    try:
        while True:
            queue.dequeue(timeout=READER_TIMEOUT)
            received += 1
    except TimeoutError:
        report("timed out", received=received)


def idle_body(queue: MessageQueue, report: Report) -> None:
    report.wait_go()  # SIGKILLed before it reads anything


def one_run(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(writer_body, 2))
        group.wait_for(writer, "handle", 15)
        handle = handle_of(writer)
        victim = group.fork("reader1", reader_of(handle, 1, idle_body))
        survivor = group.fork("reader2", reader_of(handle, 2, survivor_body))
        for child in (writer, victim, survivor):
            group.wait_for(child, "ready", 10)
        os.kill(victim.pid, signal.SIGKILL)
        os.waitpid(victim.pid, 0)
        victim.status = 0
        writer.go()
        failed = group.wait_for(writer, "enqueue failed", 10)
        if failed is None:
            print(f"run {run}: OK?: the writer's enqueue never failed ({writer.output()[-300:]})")
            return False
        group.pump(PROMPT)
        if survivor.alive() and not survivor.has("timed out") and not survivor.has("raised"):
            print(
                f"run {run}: DEFECT: the writer's enqueue {failed['i']} failed on the dead "
                f"reader 1 (timeout {WRITER_TIMEOUT:g} s); reader 2 is still waiting in "
                f"dequeue() {PROMPT:g} s later (its own timeout: {READER_TIMEOUT:g} s)"
            )
            return True
        print(f"run {run}: OK: reader 2 ended within {PROMPT:g} s of the writer's failure")
        return False
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
