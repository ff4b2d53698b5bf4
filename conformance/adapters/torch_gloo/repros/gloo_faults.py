"""What a dead, stopped or vanished rank does to the others in a plain-torch gloo group.

Plain torch (no tpbcast, no SGLang): ``dist.broadcast`` of a uint8 tensor on the default
gloo group, with the group timeout given (``--timeout``; default torch's own, 1800 s, read
from ``torch.distributed.constants``).  The same script as SGLang's
(``../../sglang/repros/pyobj_faults.py``) run with ``--engine torch``; its options::

    python gloo_faults.py --fault kill|stop|vanish --victim peer|root [--timeout 3]
"""

import os
import runpy
import sys

sys.argv = [sys.argv[0], "--engine", "torch", *sys.argv[1:]]
HERE = os.path.dirname(os.path.abspath(__file__))
runpy.run_path(
    os.path.join(HERE, "..", "..", "sglang", "repros", "pyobj_faults.py"), run_name="__main__"
)
