"""The AOTAutograd role: a captured FX graph -> separately compiled forward and backward graphs.

Entry point: `aot_compile(gm, example_inputs, *, fw_compiler, bw_compiler=None,
inference_compiler=None, decompositions=None, partitioner="min_cut")`.
"""

from .aot import aot_compile
from .errors import AutogradUnsupported

__all__ = ["aot_compile", "AutogradUnsupported"]
