"""The cudagraphs backend: eager on CPU here; replays checked on a GPU."""

import pytest
import torch

from tensorjit.backends.cudagraphs import cudagraphs
from tensorjit.runtime.cudagraphs import CudaGraphRunner

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def small_graph():
    return torch.fx.symbolic_trace(lambda x, y: (torch.relu(x @ y) + 1, (x * 2).sum()))


def test_cpu_inputs_run_eagerly():
    compiled = cudagraphs(small_graph(), [])
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    actual = compiled(x, y)
    torch.testing.assert_close(actual[0], torch.relu(x @ y) + 1)
    assert compiled.eager_calls == 1 and not compiled.recordings


@pytest.mark.gpu
@needs_cuda
def test_replay_matches_eager_and_overwritten_outputs_fail_loudly():
    compiled = cudagraphs(small_graph(), [])
    first_inputs = [torch.randn(16, 32, device="cuda"), torch.randn(32, 8, device="cuda")]
    first = compiled(*first_inputs)
    kept = [t.clone() for t in first]
    second_inputs = [torch.randn(16, 32, device="cuda"), torch.randn(32, 8, device="cuda")]
    second = compiled(*second_inputs)
    for inputs, result in ((first_inputs, kept), (second_inputs, second)):
        x, y = inputs
        torch.testing.assert_close(result[0], torch.relu(x @ y) + 1)
        torch.testing.assert_close(result[1], (x * 2).sum())
    for overwritten in first:  # handed out in place, then overwritten by the second call
        with pytest.raises(RuntimeError, match="a later call of it has overwritten it"):
            overwritten.sum()
    assert compiled.replays == 2 and len(compiled.recordings) == 1


@pytest.mark.gpu
@needs_cuda
def test_new_shape_records_again_and_mutation_is_copied_back():
    def mutate(x, y):
        x.mul_(2)
        return (x + y,)

    compiled = CudaGraphRunner(torch.fx.symbolic_trace(mutate))
    for size in (8, 8, 12):
        x, y = torch.randn(size, device="cuda"), torch.randn(size, device="cuda")
        expected_x = x * 2
        (result,) = compiled(x, y)
        torch.testing.assert_close(x, expected_x)
        torch.testing.assert_close(result, expected_x + y)
    assert len(compiled.recordings) == 2 and compiled.replays == 3


@pytest.mark.gpu
@needs_cuda
def test_parameters_are_read_in_place():
    weight = torch.nn.Parameter(torch.randn(4, 4, device="cuda"), requires_grad=False)
    compiled = CudaGraphRunner(lambda w, x: (x @ w,))
    x = torch.randn(2, 4, device="cuda")
    compiled(weight, x)
    with torch.no_grad():
        weight.mul_(3)  # an optimizer step, in place
    torch.testing.assert_close(compiled(weight, x)[0], x @ weight)
    assert compiled.replays == 2
