"""Adapters: SGLang's CPU broadcasts (SGLang 0.5.23) as broadcasters under test.

``adapter.make``: SGLang's ``broadcast_pyobj`` over a gloo CPU group built as its
``GroupCoordinator`` builds it (transport ``tcp``); ``mq.make``: SGLang's shared-memory
``MessageQueue`` (transport ``shm``).  SGLang is imported only by the factories, through
``_shim`` (it is not a dependency of tpbcast: README.md says how to install it).
``repros/`` holds standalone scripts (plain SGLang or torch, no tpbcast) for each defect
the suite finds.
"""

from __future__ import annotations

from ._shim import SglangMissingError, import_sglang_module

__all__ = ["SglangMissingError", "import_sglang_module"]
