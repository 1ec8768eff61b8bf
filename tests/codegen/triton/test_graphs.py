"""Whole ATen graphs through the Triton emitter of the shared pipeline, against eager (interpreted
without a GPU): models, layouts, training through the autograd stage, fallbacks."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, compile_aten_graph, decompositions

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
from gpu_models import GPT2, GPT2Settings, TinyBlock  # noqa: E402


def trace(function, arguments):
    with torch.no_grad():
        return make_fx(function, decomposition_table=decompositions(), tracing_mode="fake")(*arguments)


def relative_error(actual, expected) -> float:
    return ((actual.double() - expected.double()).norm() / expected.double().norm()).item()


def kernel_count(graph, arguments) -> int:
    program, _ = triton_compile.lower(graph, arguments)
    return sum(isinstance(step, (ir.Pointwise, ir.Reduction, ir.LoopGroup)) for step in program.steps)


def test_softmax_layer_norm_gelu_fuse_into_one_kernel(device):
    def function(x, weight, bias):
        return F.gelu(F.layer_norm(x, (32,), weight, bias)) * 2 + x.softmax(-1)

    arguments = [torch.randn(6, 32, device=device), torch.randn(32, device=device), torch.randn(32, device=device)]
    graph = trace(function, arguments)
    assert kernel_count(graph, arguments) == 1
    compiled = compile_aten_graph(graph, arguments)
    assert relative_error(compiled(*arguments), function(*arguments)) < 1e-6


def test_bfloat16_rounds_where_eager_rounds(device):
    def function(x):
        return torch.softmax(x, -1) * 3

    x = torch.randn(8, 64, device=device, dtype=torch.bfloat16)
    compiled = compile_aten_graph(trace(function, [x]), [x])
    result = compiled(x)
    assert result.dtype == torch.bfloat16
    assert relative_error(result, function(x)) < 1e-2


def test_long_rows_loop_over_the_row(device):
    def function(x):
        return x.softmax(-1) + x.var(-1, keepdim=True)

    x = torch.randn(3, 20000, device=device)
    compiled = compile_aten_graph(trace(function, [x]), [x])
    assert relative_error(compiled(x), function(x)) < 1e-6


def test_broadcasts_and_non_contiguous_inputs(device):
    def function(x, row, column):
        return (x * row + column).relu().sum(-1)

    x = torch.randn(16, 8, device=device).t()  # non-contiguous
    row, column = torch.randn(1, 16, device=device), torch.randn(8, 1, device=device)
    compiled = compile_aten_graph(trace(function, [x, row, column]), [x, row, column])
    assert relative_error(compiled(x, row, column), function(x, row, column)) < 1e-6


def test_other_strides_at_call_time_run_eagerly(device, monkeypatch):
    x = torch.randn(8, 8, device=device)
    graph = trace(lambda v: v.exp() + 1, [x])
    calls = []
    forward = graph.forward
    monkeypatch.setattr(graph, "forward", lambda *a: calls.append(1) or forward(*a))
    compiled = compile_aten_graph(graph, [x])
    transposed = torch.randn(8, 8, device=device).t()
    torch.testing.assert_close(compiled(transposed), transposed.exp() + 1)
    torch.testing.assert_close(compiled(x), x.exp() + 1)
    assert calls == [1]  # the transposed call only


def test_tiny_block_and_gpt2_match_eager(device):
    torch.manual_seed(0)
    for model, inputs in (
        (TinyBlock(64, 256), [torch.randn(2, 8, 64)]),
        (GPT2(GPT2Settings(vocab_size=100, context=32, layers=1, heads=2, width=32)), [torch.randint(0, 100, (2, 16))]),
    ):
        model = model.to(device).eval()
        inputs = [value.to(device) for value in inputs]
        parameters = dict(model.named_parameters())

        def function(*arguments):
            return torch.func.functional_call(model, dict(zip(parameters, arguments[1:])), (arguments[0],))

        arguments = [*inputs, *parameters.values()]
        graph = trace(function, arguments)
        compiled = compile_aten_graph(graph, arguments)
        with torch.no_grad():
            assert relative_error(compiled(*arguments), model(*inputs)) < 1e-5


def test_lowering_failure_runs_eagerly(monkeypatch, device):
    x = torch.randn(4, device=device)
    graph = trace(lambda v: v * 2, [x])

    def refuse(*arguments, **keywords):
        raise NotImplementedError("planted")

    monkeypatch.setattr(triton_compile, "compile_graph", refuse)
    torch.testing.assert_close(compile_aten_graph(graph, [x])(x), x * 2)


def test_convolutions_read_channels_last_and_activations_stay_so(device):
    from tensorjit.codegen.triton.layout import prefer_channels_last

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
            self.norm = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            y = torch.relu(self.norm(self.first(x)))
            return self.second(y) + y

    model = Net().to(device).eval()
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    arguments = [torch.randn(2, 3, 8, 8, device=device), *state.values()]

    def function(x, *values):
        return torch.func.functional_call(model, dict(zip(state, values)), (x,))

    graph = trace(function, arguments)
    assert prefer_channels_last(graph, arguments, require_cuda=False)
    copies = [n.args[0].name for n in graph.graph.nodes if n.target is torch.ops.aten.clone.default
              and n.kwargs.get("memory_format") is torch.channels_last]
    assert len(copies) == 3  # the image and both weights; the activation arrives channels-last already
    compiled = compile_aten_graph(graph, arguments)
    # TF32 off: cuDNN picks other algorithms for NHWC than for NCHW, and their TF32 roundings
    # differ by 1e-4 (eager against eager)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        result, want = compiled(*arguments), model(arguments[0])
        assert relative_error(result, want) < 1e-6
        [result] = result if isinstance(result, (tuple, list)) else [result]
        assert result.stride() == want.stride(), "the output is copied back to eager's layout"


def test_channels_last_is_not_used_where_many_outputs_would_change_layout():
    """A training forward graph returns every activation its backward graph saved, traced in
    eager's layout and checked on every call: channels-last there is undone."""
    from tensorjit.codegen.triton.layout import prefer_channels_last

    convolutions = [torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(3)]
    weights = [c.weight.detach() for c in convolutions]
    arguments = [torch.randn(2, 4, 8, 8), *weights]

    def function(x, *weights):
        saved = []
        for weight in weights:
            x = torch.relu(torch.nn.functional.conv2d(x, weight, padding=1))
            saved.append(x)
        return (x, *saved)

    graph = trace(function, arguments)
    assert not prefer_channels_last(graph, arguments, require_cuda=False)
    assert not any(n.target is torch.ops.aten.clone.default for n in graph.graph.nodes)
    outputs = next(n for n in graph.graph.nodes if n.op == "output").all_input_nodes
    assert all(n.meta["val"].is_contiguous() for n in outputs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_reduce_overhead_replays_the_compiled_graph():
    from tensorjit.config import Config
    from tensorjit.runtime.cudagraphs import CudaGraphRunner

    def function(x, weight):
        return (F.layer_norm(x, (64,), weight) @ weight.new_ones(64, 16)).softmax(-1)

    arguments = [torch.randn(32, 64, device="cuda"), torch.randn(64, device="cuda")]
    compiled = compile_aten_graph(trace(function, arguments), arguments, config=Config(triton_cudagraphs=True))
    assert isinstance(compiled, CudaGraphRunner)
    for _ in range(3):
        arguments = [torch.randn(32, 64, device="cuda"), torch.randn(64, device="cuda")]
        assert relative_error(compiled(*arguments), function(*arguments)) < 1e-5
    assert compiled.replays == 3


def test_decompositions_stays_a_function_after_every_submodule_is_imported():
    import importlib
    import pkgutil

    import tensorjit.codegen.triton as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    assert callable(package.decompositions) and callable(package.compile_aten_graph)
    assert isinstance(package.decompositions(), dict)


def assert_training_matches_eager(model, x, *, loss, rtol, atol, buffers=False):
    """One training step of `model` through aot_compile with the Triton code generator as the
    forward and backward compiler: every parameter's gradient matches eager's. buffers=True
    passes the module's buffers (batch-norm statistics) as fresh graph inputs on each call."""
    from tensorjit import autograd
    import copy

    reference = copy.deepcopy(model)
    parameters = list(model.parameters())
    names = [n for n, _ in model.named_parameters()] + ([n for n, _ in model.named_buffers()] if buffers else [])

    def function(x, *values):
        return (torch.func.functional_call(model, dict(zip(names, values)), (x,)),)

    def arguments():
        return [x, *parameters, *([b.clone() for b in model.buffers()] if buffers else [])]

    graph = make_fx(function)(*arguments())
    compiled = autograd.aot_compile(graph, arguments(), fw_compiler=compile_aten_graph, decompositions=decompositions())
    loss(compiled(*arguments())[0].float()).backward()
    loss(reference(x).float()).backward()
    for mine, theirs in zip(parameters, reference.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=rtol, atol=atol)


def test_training_through_the_autograd_stage_matches_eager_gradients(device):
    autograd = pytest.importorskip("tensorjit.autograd")
    if not hasattr(autograd, "aot_compile"):
        pytest.skip("tensorjit.autograd.aot_compile absent")
    torch.manual_seed(0)
    model = TinyBlock(64, 256).to(device)
    x = torch.randn(2, 8, 64, device=device)
    assert_training_matches_eager(model, x, loss=torch.mean, rtol=1e-5, atol=1e-6)


class _DenseLayer(torch.nn.Module):
    def __init__(self, channels, growth):
        super().__init__()
        self.norm1, self.conv1 = torch.nn.BatchNorm2d(channels), torch.nn.Conv2d(channels, 2 * growth, 1, bias=False)
        self.norm2 = torch.nn.BatchNorm2d(2 * growth)
        self.conv2 = torch.nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = self.conv1(torch.relu(self.norm1(torch.cat(features, 1))))
        return self.conv2(torch.relu(self.norm2(x)))


class _MiniDenseNet(torch.nn.Module):
    """densenet121's structure at toy size: concatenated features, batch norm in training mode."""

    def __init__(self):
        super().__init__()
        self.conv0, self.norm0 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
        self.layers = torch.nn.ModuleList([_DenseLayer(8 + 4 * i, 4) for i in range(3)])
        self.norm5, self.fc = torch.nn.BatchNorm2d(20), torch.nn.Linear(20, 5)

    def forward(self, x):
        features = [torch.relu(self.norm0(self.conv0(x)))]
        for layer in self.layers:
            features.append(layer(features))
        out = torch.relu(self.norm5(torch.cat(features, 1)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def test_densenet_like_training_matches_eager_gradients(device):
    """The backward graph recomputes relu(batch_norm(...)) behind an alias that another kernel
    reads: the kernel must store the alias's source (it once stored only the alias and the
    wrapper named an unwritten buffer: NameError on densenet121's first backward)."""
    torch.manual_seed(0)
    model = _MiniDenseNet().to(device).train()
    x = torch.randn(2, 3, 8, 8, device=device)
    assert_training_matches_eager(model, x, loss=torch.sum, rtol=1e-4, atol=1e-5, buffers=True)


def test_pointwise_groups_iterate_channels_last_buffers_in_memory_order(device):
    from tensorjit.codegen.triton import compile_aten_graph, decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(2, 5, 3, 4, device=device).to(memory_format=torch.channels_last)
    scale = torch.randn(5, 1, 1, device=device)
    fn = lambda x, scale: (torch.relu(x * scale) + 1,)  # noqa: E731
    gm = make_fx(fn, decomposition_table=decompositions())(x, scale)
    compiled = compile_aten_graph(gm, [x, scale])
    [got], [want] = compiled(x, scale), fn(x, scale)
    torch.testing.assert_close(got, want)
    assert got.is_contiguous(memory_format=torch.channels_last)
    source = "\n".join(compiled.kernel_sources)
    assert "i1 = xindex % 5" in source  # channels vary fastest


def test_symbolic_graphs_are_specialised_to_the_example_and_other_sizes_run_eagerly(device):
    # Sizes are literals in kernels and the wrapper: a symbolic graph once compiled and then
    # failed at call time with "name 's0' is not defined".
    def function(x, y):
        return (x - y).pow(2).sum() / x.amax()

    arguments = [torch.randn(5, 5, device=device), torch.randn(5, 5, device=device)]
    graph = make_fx(function, decomposition_table=decompositions(), tracing_mode="symbolic")(*arguments)
    compiled = compile_aten_graph(graph, arguments)
    torch.testing.assert_close(compiled(*arguments), function(*arguments))
    other = [torch.randn(6, 7, device=device), torch.randn(6, 7, device=device)]
    torch.testing.assert_close(compiled(*other), function(*other))


def test_batch_norm_statistics_run_as_aten_not_prims(device):
    """No prims op is left as an ATen call (prims.var once ran as one: a third of the host time
    a call)."""
    x = torch.randn(4, 6, 5, 5, device=device)
    weight, bias = torch.rand(6, device=device), torch.rand(6, device=device)

    def function(x, weight, bias):
        return (F.batch_norm(x, None, None, weight, bias, training=True),)

    graph = trace(function, [x, weight, bias])
    compiled = compile_aten_graph(graph, [x, weight, bias])
    assert relative_error(compiled(x, weight, bias)[0], function(x, weight, bias)[0]) < 1e-5
    called = [step.target for step in compiled.program.steps if isinstance(step, ir.Extern)]
    assert torch.ops.prims.var.default not in called  # lowered into a kernel, or run as aten.var


def test_gpt2_training_matches_eager_gradients(device):
    """The backward graph passes flash attention's output through alias nodes: a group that is
    only a view of an outside value still defines it (it once launched nothing and named an
    undefined alias: NameError on GPT-2's first backward)."""
    torch.manual_seed(0)
    model = GPT2(GPT2Settings(vocab_size=100, context=32, layers=2, heads=2, width=32)).to(device)
    tokens = torch.randint(0, 100, (2, 16), device=device)
    assert_training_matches_eager(model, tokens, loss=torch.mean, rtol=1e-4, atol=1e-5)


def test_equal_layers_share_their_kernels(device):
    # Kernel text names nothing of the graph, so a 3-layer model compiles one layer's kernels
    # (each layer's own kernels made GPT-2's cold compile 8x slower)
    model = GPT2(GPT2Settings(vocab_size=100, context=32, layers=3, heads=2, width=32)).to(device).eval()
    parameters = dict(model.named_parameters())
    tokens = torch.randint(0, 100, (2, 16), device=device)
    arguments = [tokens, *parameters.values()]

    def function(tokens, *values):
        return torch.func.functional_call(model, dict(zip(parameters, values)), (tokens,))

    compiled = triton_compile.compile_graph(trace(function, arguments), arguments)
    names = [kernel.name for kernel in compiled.hook.kernels.values()]
    assert len(set(names)) <= len(names) // 2, names
    with torch.no_grad():
        assert relative_error(compiled(*arguments), model(tokens)) < 1e-5


def test_max_autotune_offers_launch_shapes_to_time(device):
    from tensorjit.codegen.triton import heuristics
    from tensorjit.config import Config

    function = lambda x: (x.softmax(-1) * 2, (x + 1).relu())  # noqa: E731
    x = torch.randn(64, 96, device=device)
    graph = trace(function, [x])
    tuned = triton_compile.compile_graph(graph, [x], Config(max_autotune=True))
    plain = triton_compile.compile_graph(trace(function, [x]), [x], Config())
    assert all(len(kernel.shapes) > 1 for kernel in tuned.hook.kernels.values())
    assert all(len(kernel.shapes) == 1 for kernel in plain.hook.kernels.values())
    for got, want in zip(tuned(x), function(x)):
        torch.testing.assert_close(got, want)
    # the rule's own choice is always a candidate, tried first
    assert heuristics.pointwise_candidates(5000)[0] == heuristics.pointwise_shape(5000)
    assert heuristics.persistent_candidates(64, 96)[0] == heuristics.persistent_reduction_shape(64, 96)


def test_tensors_on_another_device_only_reach_aten_calls():
    # Kernels run on one device: a value elsewhere (here every one, the kernels being on 'meta')
    # is computed and read by ATen calls only (a CPU tensor reached a Triton kernel on the H100:
    # "Pointer argument cannot be accessed from Triton")
    from tensorjit.codegen.graph import GraphLowering

    x = torch.randn(4)
    graph = make_fx(lambda x: (x * 2 + 1, torch.arange(3).isinf()), decomposition_table=decompositions())(x)
    program = GraphLowering(graph, [x], device=torch.device("meta")).run()
    assert all(isinstance(step, ir.Extern) for step in program.steps), program


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_scalars_and_cpu_results_in_a_cuda_graph():
    def function(x):
        return x * torch.tensor(0.5) + 1, torch.isinf(torch.arange(3)), (x[0] > 0).cpu()

    x = torch.randn(5, device="cuda")
    graph = make_fx(function, decomposition_table=decompositions())(x)
    compiled = compile_aten_graph(graph, [x])
    for got, want in zip(compiled(x), function(x)):
        assert got.device == want.device
        torch.testing.assert_close(got, want)
