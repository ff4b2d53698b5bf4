"""The classes of the errors plain torch raises for three kinds of failure (FAULT-10).

Plain torch (no tpbcast, no SGLang), one process:

1. not initialized: ``dist.broadcast`` before ``init_process_group``;
2. configuration: a ``TCPStore`` (what ``init_process_group`` rendezvous on) for world
   size 0;
3. timeout: rank 0 of two on a fresh ``TCPStore`` with 0.2 s timeouts, its peer absent.

Each line prints the exception's class hierarchy (MRO): the first two are plain
``ValueError`` (torch has no class of its own for them), the third is ``DistStoreError``
(a ``DistError``, a ``RuntimeError``; not a ``TimeoutError``), so the three share no root
class but ``Exception``.

    python error_classes.py
"""

import datetime

import torch
import torch.distributed as dist

SHORT = datetime.timedelta(seconds=0.2)


def not_initialized() -> None:
    dist.broadcast(torch.zeros(1, dtype=torch.uint8), src=0)


def configuration() -> None:
    dist.TCPStore("127.0.0.1", 0, 0, True, timeout=SHORT, wait_for_workers=False)


def timeout() -> None:
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=SHORT, wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=2, timeout=SHORT)


for name, call in (
    ("not initialized", not_initialized),
    ("configuration", configuration),
    ("timeout", timeout),
):
    try:
        call()
        print(f"{name}: no error")
    except Exception as exc:
        mro = " -> ".join(cls.__name__ for cls in type(exc).__mro__)
        print(f"{name}: {mro}: {str(exc)[:100]}")
