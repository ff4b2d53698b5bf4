"""The ``exec:`` driver kit: judge a broadcaster that runs as its own executable.

``tpbcast_driver.h`` is a single C header: implement four calls, hand them to
``tpbcast_driver_main`` and run the suite with ``--tpbcast-impl "exec:./your_driver"``.
``cbcast_driver.c`` is the worked example in C, ``cbcast_driver.cpp`` in C++ (both drive
the native C broadcaster of ``../native``), built by :mod:`.native`. The protocol is in
SPEC.md's adapter section.
"""

from __future__ import annotations

from .native import cxx_driver_path, driver_path, exec_spec, header_path

__all__ = ["cxx_driver_path", "driver_path", "exec_spec", "header_path"]
