"""(b) When the writer is SIGKILLed, or tears its queue down (``shutdown()`` and drop, as
``GroupCoordinator.destroy``) while alive, the readers wait forever in ``dequeue``, logging
"No available shared memory broadcast block found" every interval.

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``acquire_read``'s
``while True`` loop (line 892) keeps calling ``_wait_until_readable`` (line 841), which
only checks the slot's written flag, waits on the notify socket (line 871) and logs
``LONG_WAIT_TIME_LOG_MSG`` (line 878); nothing checks whether the writer is alive, and with
the default ``timeout=None`` (``broadcast_object``, line 1021) no deadline ends the wait.
The writer's ``shutdown()`` (line 721-727) only sets its own flag and wakes its own idle
reader wait: nothing reaches the readers, so a teardown looks the same to them as a death.

Run: python b_writer_death_readers_wait.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run; exit status 1 if the defect showed.  Deadline 20 s per run;
VLLM_RINGBUFFER_WARNING_INTERVAL=2 (set by _common) so the log line shows within it.
"""

from __future__ import annotations

import os
import signal
import time

from _common import Group, MessageQueue, Report, handle_of, main_loop, reader_of, writer_with_handle

READERS = 2
WAIT = 8.0  # s the readers get after the writer's death to return or raise
LOG_LINE = "No available shared memory broadcast block found"


def reader_body(queue: MessageQueue, report: Report) -> None:
    report("dequeue", got=queue.dequeue().decode())  # the one message before the kill
    report("dequeue 2")
    queue.dequeue()  # the writer is dead by now
    report("returned")


def writer_body(queue: MessageQueue, report: Report) -> None:
    queue.enqueue(b"before the kill")
    report("sent")
    report.wait_go()  # "teardown" mode: the parent says go; "kill" mode: SIGKILLed here
    queue.shutdown()
    del queue  # GroupCoordinator.destroy: self.mq_broadcaster = None
    report("torn down")
    time.sleep(60)  # alive, its queue gone


def one_run(run: int) -> bool:
    return scenario(run, "teardown") | scenario(run, "kill")


def scenario(run: int, mode: str) -> bool:
    group = Group(deadline=20.0)
    try:
        writer = group.fork("writer", writer_with_handle(writer_body, READERS))
        group.wait_for(writer, "handle", 15)
        handle = handle_of(writer)
        readers = [group.fork(f"reader{r}", reader_of(handle, r, reader_body)) for r in (1, 2)]
        group.wait_for(writer, "sent", 10)
        for reader in readers:
            group.wait_for(reader, "dequeue 2", 5)
        if mode == "kill":
            os.kill(writer.pid, signal.SIGKILL)
            os.waitpid(writer.pid, 0)
            writer.status = 0
            what = "writer SIGKILLed"
        else:
            writer.go()
            group.wait_for(writer, "torn down", 5)
            what = "writer tore its queue down (shutdown() + drop) and lives on"
        group.pump(WAIT)
        stuck = [r for r in readers if r.alive() and not (r.has("returned") or r.has("raised"))]
        logged = sum(r.output().count(LOG_LINE) for r in readers)
        if stuck and len(stuck) == len(readers):
            print(
                f"run {run}: DEFECT: {what}; {len(stuck)} of {READERS} readers still "
                f"blocked in dequeue() {WAIT:g} s later, logging {LOG_LINE!r} {logged} times "
                "and raising nothing"
            )
            return True
        ended = READERS - len(stuck)
        print(f"run {run}: OK: {what}; {ended} of {READERS} readers ended on their own")
        return False
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
