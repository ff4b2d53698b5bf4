"""(f) No deadline at all on the set-up: a reader whose writer dies before the queue is
ready waits forever in ``wait_until_ready()``, and so does a writer whose reader never
comes; neither call takes a timeout, and ``enqueue`` / ``dequeue`` default to none.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``wait_until_ready``
(line 688-719) is a blocking zmq ``recv()`` on the writer (one per reader's subscription,
line 698) and on each reader (the writer's ``READY``, line 714), with no timeout argument
and no liveness check; ``broadcast_object`` (line 1021-1025) calls ``enqueue`` /
``dequeue`` without a timeout.  vLLM's default deadlines are: set-up none, I/O none.

Run: python f_no_init_deadline.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run and part; exit status 1 if the defect showed.  Deadline 20 s.
"""

from __future__ import annotations

import os
import signal

from _common import Group, MessageQueue, Report, handle_of, main_loop, new_writer_queue

WAIT = 6.0  # s a blocked wait_until_ready gets to return or raise


def writer_never_ready(report: Report) -> None:
    queue = new_writer_queue(1)  # one reader expected; none ever comes
    report("created")
    queue.wait_until_ready()
    report("returned")


def writer_dies_first(report: Report) -> None:
    import pickle

    queue = new_writer_queue(1)
    report("handle", handle=pickle.dumps(queue.export_handle()).hex(), pid=os.getpid())
    report.wait_go()  # SIGKILLed before wait_until_ready: never sends READY


def reader_waits(handle_child_handle: object) -> object:
    def target(report: Report) -> None:
        queue = MessageQueue.create_from_handle(handle_child_handle, 1)
        report("created")
        queue.wait_until_ready()
        report("returned")

    return target


def one_run(run: int) -> bool:
    shown = False
    group = Group(deadline=20.0)
    try:
        lonely = group.fork("lonely-writer", writer_never_ready)
        writer = group.fork("writer", writer_dies_first)
        group.wait_for(writer, "handle", 15)
        reader = group.fork("reader", reader_waits(handle_of(writer)))  # type: ignore[arg-type]
        group.wait_for(reader, "created", 10)
        os.kill(writer.pid, signal.SIGKILL)
        os.waitpid(writer.pid, 0)
        writer.status = 0
        group.pump(WAIT)
        for child, what in (
            (lonely, "a writer whose reader never comes"),
            (reader, "a reader whose writer was SIGKILLed before READY"),
        ):
            stuck = child.has("created") and not child.has("returned") and child.alive()
            shown |= stuck
            state = f"still blocked in wait_until_ready() {WAIT:g} s later" if stuck else "ended"
            print(f"run {run}: {'DEFECT' if stuck else 'OK'}: {what}: {state}")
        return shown
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
