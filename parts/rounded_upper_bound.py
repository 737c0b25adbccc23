"""What q4_k's batch-1 GEMVs would take if their activations came rounded to int8 by the kernel that
writes them (a fused producer), with no launch of their own: ``benchmarks/linear_bench.py`` run on a tree
with ``parts/experiments/q4k-rounded-once.patch`` applied, its rounding launch replaced by the buffer it
made for the same activations the first time (outside the timed graph). Beside the same benchmark on
main's tree, in one call, the difference is what fusing the rounding into its producers could gain at
most (the producers' extra stores of K/4 + K/16 words not counted).

    PYTHONPATH=/tmp/after-site:$PYTHONPATH python parts/rounded_upper_bound.py --device nvidia \\
        --models 8B --batches 1 --formats q4_k        # arguments: linear_bench.py's
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

from anydev.backends.triton_kernels import linear

if not hasattr(linear, "rounded_activations"):
    sys.exit("this tree's linear kernel has no rounding launch: apply parts/experiments/q4k-rounded-once.patch")
made: dict[tuple, object] = {}
rounding_launch = linear.rounded_activations


def rounded_before(x):
    """The rounded buffer of ``x``, made by the rounding launch on the first call only."""
    key = (x.data_ptr(), tuple(x.shape), x.device)
    if key not in made:
        made[key] = rounding_launch(x)
    return made[key]


linear.rounded_activations = rounded_before
bench = Path(__file__).resolve().parents[1] / "benchmarks" / "linear_bench.py"
sys.path.insert(0, str(bench.parent))       # it imports the scripts beside it
sys.argv = [str(bench)] + sys.argv[1:]
runpy.run_path(str(bench), run_name="__main__")
