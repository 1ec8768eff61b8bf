"""TENSORJIT_LOGS=output_code: the code the generator produced for each graph, on request only."""

import shutil

import pytest
import torch

import tensorjit
from tensorjit import logs


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_output_code_log_shows_generated_cpp():
    logs.clear()
    logs.set_logs("")
    tensorjit.compile(lambda x: (x.exp() + 1).sum(-1), backend="inductor")(torch.randn(4, 8))
    assert logs.recent("output_code") == []  # off: the source is not even formatted
    logs.clear()
    logs.set_logs("output_code")
    try:
        tensorjit.compile(lambda x: (x.sin() * 2).sum(-1), backend="inductor")(torch.randn(4, 8))
    finally:
        logs.set_logs("")
    cpp, wrapper = logs.recent("output_code")
    assert cpp.startswith("C++ code of") and 'extern "C" void kernel' in cpp
    assert wrapper.startswith("Python wrapper code of") and "def run(" in wrapper


def test_unknown_log_kind_lists_the_valid_ones():
    with pytest.raises(ValueError, match="output_code"):
        logs.set_logs("output_cod")
