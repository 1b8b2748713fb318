"""envbuild kernel smoke tests, run by the target venv's python (standalone: no envbuild import).

Every check computes a result with the kernel under test and a reference computed another way
(a float64 PyTorch formula on the same inputs, never another kernel of the same package) and
reports the relative error, the tolerance, the time and a verdict: pass / fail / skip (with the
reason). The work lives in the modules beside this script, imported from its folder (put on
``sys.path`` here, whatever ``-P`` or ``PYTHONSAFEPATH`` say): ``smoke_early`` (the CUDA context
and NVML opened on a thread before ``import torch``, by ctypes), ``smoke_part`` (the
torch.compile check in a process of its own, started here too), ``smoke_base`` (tolerances, the
comparison, the planted wrong answer, timing, the float64 references), ``smoke_kernels`` (the
checks), ``smoke_fla`` (fla's check and its compile processes) and ``smoke_main`` (the run).

Usage: python checks.py --out result.json [--only NAME ...] [--import DIST ...] [--quick]
Prints one ``ENVBUILD_SMOKE {json}`` line per check; exit 0 when nothing failed, 1 otherwise.
"""

import gc
import os
import sys
import time

if __name__ == "__main__":
    entered = (time.time(), time.process_time())
    # No cyclic garbage collection in this short process: the imports (torch, then dynamo,
    # inductor and Triton: about a million objects, no garbage) ran about 20% longer with it
    gc.disable()
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import smoke_early
    import smoke_part

    smoke_early.start()  # the CUDA context opens while the next line imports torch
    part = smoke_part.start(os.path.abspath(__file__), sys.argv[1:])  # torch.compile's process
    from smoke_main import main

    code = main(entered=entered, part=part)
    # The result is written and flushed: leave without the interpreter's teardown, which frees
    # torch's, dynamo's and inductor's objects one by one (over a CPU second; bench/README.md).
    sys.stdout.flush()
    sys.stderr.flush()
    smoke_part.release_output()
    os._exit(code)
