"""(g) The writer's ``wait_until_ready()`` can return although a reader never came: it
counts every message of its XPUB socket as one reader's subscription, and a reader that
dies after connecting sends two (its subscription, then the unsubscription libzmq
delivers for it on disconnect).

vllm/distributed/device_communicators/shm_broadcast.py (0.33.0): ``wait_until_ready``
(line 695-698: ``for i in range(self.n_local_reader): self.local_socket.recv()``) never
looks at what it receives; the socket is ``XPUB`` with ``XPUB_VERBOSE`` (line 537-541),
which also passes unsubscriptions up.  With 2 readers, one that connects and is SIGKILLed
is enough: the writer reports the queue ready, sends ``READY`` to nobody, and its first
``enqueue`` waits on a reader that does not exist (a reader that joins later has missed
``READY`` and blocks in its own ``wait_until_ready``).

Run: python g_ready_without_readers.py [--runs N]   (plain Python + vLLM, no tpbcast)
Prints DEFECT / OK per run; exit status 1 if the defect showed.  Deadline 20 s per run.
"""

from __future__ import annotations

import os
import pickle
import signal

from _common import Group, MessageQueue, Report, handle_of, main_loop, new_writer_queue


def writer(report: Report) -> None:
    queue = new_writer_queue(2)  # readers 1 and 2
    report("handle", handle=pickle.dumps(queue.export_handle()).hex(), pid=os.getpid())
    queue.wait_until_ready()
    report("ready")


def reader_then_killed(handle: object) -> object:
    def target(report: Report) -> None:
        MessageQueue.create_from_handle(handle, 1)  # connects: its subscription goes out
        report("connected")
        report.wait_go()  # SIGKILLed here, before its own wait_until_ready

    return target


def one_run(run: int) -> bool:
    group = Group(deadline=20.0)
    try:
        w = group.fork("writer", writer)
        group.wait_for(w, "handle", 15)
        r1 = group.fork("reader1", reader_then_killed(handle_of(w)))  # type: ignore[arg-type]
        group.wait_for(r1, "connected", 10)
        group.pump(1.0)  # the subscription reaches the writer
        os.kill(r1.pid, signal.SIGKILL)
        os.waitpid(r1.pid, 0)
        r1.status = 0
        ready = group.wait_for(w, "ready", 5.0) is not None
        print(
            f"run {run}: {'DEFECT' if ready else 'OK'}: reader 1 connected and was SIGKILLed, "
            "reader 2 never came; the writer's wait_until_ready() "
            + (
                "returned: it counts the dead reader's unsubscription as reader 2"
                if ready
                else "is still waiting (no error either)"
            )
        )
        return ready
    finally:
        group.close()


if __name__ == "__main__":
    raise SystemExit(main_loop(one_run, __doc__))
