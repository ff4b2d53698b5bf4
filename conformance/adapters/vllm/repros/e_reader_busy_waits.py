"""(e) A reader waiting for the next message burns a CPU: for ``busy_loop_s`` (1 s) after
each read it spins on ``sched_yield()`` instead of sleeping in the kernel.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``SpinCondition``
(created with ``busy_loop_s=1``, line 141) waits with ``sched_yield()`` while
``current_time <= self.last_read + self.busy_loop_s`` (line 218-219) and only then polls
its notify socket; ``_wait_until_readable`` (line 871) calls it in a loop.  In a TP
engine the next step's message is usually less than 1 s away, so every reader rank spins
between steps.

Run: python e_reader_busy_waits.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run (DEFECT: a wait of 1 s costs more than a quarter of it in CPU);
exit status 1 if the defect showed.  Deadline 20 s per run.
"""

from __future__ import annotations

import time

from _common import Group, MessageQueue, Report, handle_of, main_loop, reader_of, writer_with_handle

WINDOW = 1.0  # s the reader waits for its next message, right after a read
LIMIT = 0.25  # CPU / wall above this is busy waiting (a sleeping wait costs ~0)


def writer_body(queue: MessageQueue, report: Report) -> None:
    queue.enqueue(b"first")
    report.wait_go()  # the reader measured its wait
    queue.enqueue(b"second")
    report("sent")


def reader_body(queue: MessageQueue, report: Report) -> None:
    queue.dequeue()
    cpu, wall = time.process_time(), time.monotonic()
    report("waiting", cpu=cpu, wall=wall)
    queue.dequeue()  # the writer sends "second" after the parent's window
    report("returned", cpu=time.process_time() - cpu, wall=time.monotonic() - wall)


def one_run(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(writer_body, 1))
        group.wait_for(writer, "handle", 15)
        reader = group.fork("reader", reader_of(handle_of(writer), 1, reader_body))
        if group.wait_for(reader, "waiting", 10) is None:
            print(f"run {run}: INCONCLUSIVE: the reader never got its first message")
            return False
        time.sleep(WINDOW)
        writer.go()
        got = group.wait_for(reader, "returned", 5)
        if got is None:
            print(f"run {run}: INCONCLUSIVE: the reader never got its second message")
            return False
        busy = got["cpu"] > LIMIT * got["wall"]
        print(
            f"run {run}: {'DEFECT' if busy else 'OK'}: the reader used {got['cpu']:.2f} s of "
            f"CPU during {got['wall']:.2f} s of waiting for the next message"
        )
        return busy
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
