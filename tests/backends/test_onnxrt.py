"""The onnxrt backend against eager, on the CPU provider (and CUDA where present)."""

import pytest
import torch

pytest.importorskip("onnxruntime")

from tensorjit.backends.onnxrt import OnnxRuntimeRunner, onnxrt  # noqa: E402


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 5)

    def forward(self, x, unused):
        return torch.relu(self.linear(x)) + 1, x.sum(1)


def test_matches_eager_and_reuses_session():
    module = LinearRelu()
    gm = torch.fx.symbolic_trace(module)
    x, unused = torch.randn(4, 8), torch.randn(3)
    compiled = onnxrt(gm, [x, unused])
    with torch.no_grad():
        expected = module(x, unused)
        for _ in range(2):
            actual = compiled(x, unused)
            for left, right in zip(expected, actual):
                torch.testing.assert_close(right, left)
    assert compiled.eager_calls == 0 and len(compiled.sessions) == 1


def test_new_shape_exports_again():
    gm = torch.fx.symbolic_trace(lambda x: (torch.tanh(x) * 2,))
    compiled = onnxrt(gm, [torch.randn(3)])
    for size in (3, 7):
        x = torch.randn(size, 2)
        torch.testing.assert_close(compiled(x)[0], torch.tanh(x) * 2)
    assert len(compiled.sessions) == 2


def test_gradients_run_eagerly():
    module = LinearRelu()
    compiled = OnnxRuntimeRunner(torch.fx.symbolic_trace(module))
    x = torch.randn(4, 8)
    output, _ = compiled(x, torch.randn(3))
    output.sum().backward()
    assert compiled.eager_calls == 1 and module.linear.weight.grad is not None


def test_input_mutation_runs_eagerly():
    def mutate(x, y):
        x.add_(y)
        return (x * 2,)

    compiled = onnxrt(torch.fx.symbolic_trace(mutate), [])
    x, y = torch.randn(5), torch.randn(5)
    expected_x = x + y
    (result,) = compiled(x, y)
    torch.testing.assert_close(x, expected_x)
    torch.testing.assert_close(result, expected_x * 2)
    assert compiled.eager_calls == 1


def test_missing_onnxruntime_is_a_clean_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("no onnxruntime")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(ImportError, match="pip install onnxruntime"):
        onnxrt(torch.fx.symbolic_trace(lambda x: (x,)), [])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs_match_eager_with_any_provider():
    module = LinearRelu().cuda()
    x, unused = torch.randn(4, 8, device="cuda"), torch.randn(3, device="cuda")
    compiled = onnxrt(torch.fx.symbolic_trace(module), [x, unused])
    with torch.no_grad():
        expected, actual = module(x, unused), compiled(x, unused)
    for left, right in zip(expected, actual):
        assert right.device == left.device
        torch.testing.assert_close(right, left, rtol=1e-4, atol=1e-4)
    assert compiled.eager_calls == 0
