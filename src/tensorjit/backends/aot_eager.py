"""The `aot_eager` backend: ahead-of-time autograd with the ATen graphs run as they are."""

from __future__ import annotations

from ..autograd import aot_compile
from ..config import config


def _run_as_is(gm, example_inputs):
    return gm.forward


def aot_eager(gm, example_inputs):
    return aot_compile(gm, example_inputs, fw_compiler=_run_as_is, partitioner=config.partitioner)
