"""What a failed ``init_process_group`` leaves in a plain-torch process (INIT-11).

Plain torch (no tpbcast, no SGLang).  Rank 0 calls ``init_process_group("gloo", rank=0,
world_size=2)`` on a fresh ``TCPStore`` with 0.5 s timeouts while its peer is absent; it
fails (``DistStoreError: wait timeout``).  The script then shows:

1. the fds the failed call left open (a pipe, both ends, that nothing closes);
2. the retry: rank 0 calls ``init_process_group`` again on a second fresh store with a
   10 s timeout, and a fresh process joins as rank 1.  Both wait for a key the other never
   writes (rank 0 for ``/1/...``, rank 1 for ``/0/...``): the failed attempt advanced
   torch's process-group counter, which prefixes the store keys, so the retry cannot meet
   a peer on its first attempt.  Both end with the store's timeout error.

    python failed_init.py          # prints both findings; exit status 0 either way
"""

import contextlib
import datetime
import gc
import os
import subprocess
import sys
import time

import torch.distributed as dist

SHORT = datetime.timedelta(seconds=0.5)
LONG = datetime.timedelta(seconds=10)


def fds() -> dict[str, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out[name] = os.readlink(f"/proc/self/fd/{name}")
    return out


def peer(port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=LONG)
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", store=store, rank=1, world_size=2, timeout=LONG)
        print(f"rank 1: joined after {time.monotonic() - start:.2f} s")
        dist.destroy_process_group()
    except Exception as exc:
        print(f"rank 1: {type(exc).__name__} after {time.monotonic() - start:.2f} s: {exc}")


def root() -> None:
    before = fds()
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=SHORT, wait_for_workers=False)
    try:
        dist.init_process_group("gloo", store=store, rank=0, world_size=2, timeout=SHORT)
        print("rank 0: the first attempt did not fail (unexpected)")
        return
    except Exception as exc:
        print(f"rank 0, first attempt (peer absent): {type(exc).__name__}: {exc}")
    del store
    gc.collect()
    left = {k: v for k, v in fds().items() if before.get(k) != v}
    print(f"rank 0: fds the failed attempt left open: {left or 'none'}")
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=LONG, wait_for_workers=False)
    child = subprocess.Popen([sys.executable, __file__, "--peer", str(store.port)])
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", store=store, rank=0, world_size=2, timeout=LONG)
        print(f"rank 0: the retry formed the group after {time.monotonic() - start:.2f} s")
        dist.destroy_process_group()
    except Exception as exc:
        print(f"rank 0, retry: {type(exc).__name__} after {time.monotonic() - start:.2f} s: {exc}")
    child.wait(timeout=60)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--peer":
        peer(int(sys.argv[2]))
    else:
        root()
