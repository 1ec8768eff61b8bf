"""max-autotune's matrix products: the Triton GEMM template against torch.matmul (every
configuration, strided and transposed operands, bmm, addmm's alpha and beta), and the choice
between it and cuBLAS (only under max-autotune, timed once, remembered on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import ir
from tensorjit.codegen.triton import compile as triton_compile, decompositions
from tensorjit.codegen.triton import expressions, gemm_choice
from tensorjit.codegen.triton.gemm_choice import EXTERN, GemmChoice, broadcast_strides
from tensorjit.codegen.triton.gemm_template import (
    HOPPER_CONFIGS, GemmProblem, gemm_candidates, gemm_source, kernel_name, launch_shape)
from tensorjit.codegen.triton.launcher import KernelLauncher, load_kernel
from tensorjit.config import Config

aten = torch.ops.aten
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}


def strides3(tensor: torch.Tensor) -> tuple[int, int, int]:
    return tuple(tensor.stride()) if tensor.dim() == 3 else (0, *tensor.stride())


def run_template(op, a, b, bias=None, alpha=1, beta=1, config=None, tf32=False, cache_dir=None):
    """The template's result for op(a, b) (bias first for addmm), through one configuration."""
    out_shape = (*a.shape[:-1], b.shape[-1])
    out = torch.empty(out_shape, dtype=a.dtype, device=a.device)
    m, k = a.shape[-2:]
    bias_strides = None
    if bias is not None:
        buffer = ir.Buffer("bias", "float32", tuple(bias.shape), tuple(bias.stride()))
        bias_strides = broadcast_strides(buffer, (m, b.shape[-1]))
    batch = a.shape[0] if a.dim() == 3 else 1
    problem = GemmProblem(op, batch, m, b.shape[-1], k, a.dtype, strides3(a), strides3(b), strides3(out),
                          bias_strides, alpha, beta, tf32)
    kernel = load_kernel(gemm_source(problem), kernel_name(problem), cache_dir)
    shape = launch_shape(config, problem) if config is not None else gemm_candidates(problem)[0]
    pointers = (a, b, bias, out) if problem.reads_bias else (a, b, out)
    KernelLauncher(kernel, shape)(*pointers)
    return out


def assert_matches(actual, expected):
    """Within the dtype's rounding of the float64 product."""
    scale = expected.double().abs().max().item() + 1
    error = (actual.double() - expected.double()).abs().max().item()
    assert error <= TOLERANCE[actual.dtype] * scale, (error, scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("config", HOPPER_CONFIGS, ids=str)
def test_every_configuration_matches_matmul(device, dtype, config, cache_dir):
    # sizes that no tile divides: rows, columns and K all end in a partial tile
    a = torch.randn(37, 70, device=device, dtype=dtype)
    weight = torch.randn(21, 70, device=device, dtype=dtype)
    result = run_template("mm", a, weight.t(), config=config, cache_dir=cache_dir)  # a linear layer's W^T
    assert_matches(result, torch.matmul(a.double(), weight.t().double()))


@pytest.mark.parametrize("layout", ["both_transposed", "a_transposed", "sliced", "broadcast_rows"])
def test_strided_operands(device, layout, cache_dir):
    x, y = torch.randn(40, 24, device=device), torch.randn(40, 48, device=device)
    a, b = {
        "both_transposed": (x.t(), torch.randn(33, 40, device=device).t()),
        "a_transposed": (x.t(), y),
        "sliced": (torch.randn(24, 80, device=device)[:, ::2], y[:, 1:35]),
        "broadcast_rows": (torch.randn(1, 40, device=device).expand(24, 40), y),
    }[layout]
    for config in (HOPPER_CONFIGS[2], HOPPER_CONFIGS[5]):
        result = run_template("mm", a, b, config=config, cache_dir=cache_dir)
        assert_matches(result, torch.matmul(a.double(), b.double()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_bmm_with_a_transposed_batch_operand(device, dtype, cache_dir):
    a = torch.randn(3, 20, 36, device=device, dtype=dtype)
    b = torch.randn(3, 18, 36, device=device, dtype=dtype).transpose(1, 2)
    for config in (HOPPER_CONFIGS[0], HOPPER_CONFIGS[4]):
        result = run_template("bmm", a, b, config=config, cache_dir=cache_dir)
        assert_matches(result, torch.matmul(a.double(), b.double()))


@pytest.mark.parametrize("bias_shape", [(24,), (1, 24), (17, 24), (17, 1)])
@pytest.mark.parametrize("alpha, beta", [(1, 1), (0.5, 2.0), (2, 0.25)])
def test_addmm_alpha_beta_and_bias_broadcasts(device, bias_shape, alpha, beta, cache_dir):
    a, b = torch.randn(17, 40, device=device), torch.randn(24, 40, device=device).t()
    bias = torch.randn(bias_shape, device=device)
    result = run_template("addmm", a, b, bias, alpha, beta, config=HOPPER_CONFIGS[5], cache_dir=cache_dir)
    torch.testing.assert_close(result, torch.addmm(bias, a, b, alpha=alpha, beta=beta), rtol=1e-5, atol=1e-5)


def test_addmm_with_beta_zero_ignores_the_bias(device, cache_dir):
    a, b = torch.randn(17, 40, device=device), torch.randn(40, 24, device=device)
    bias = torch.full((24,), float("nan"), device=device)
    result = run_template("addmm", a, b, bias, alpha=1, beta=0, config=HOPPER_CONFIGS[5], cache_dir=cache_dir)
    torch.testing.assert_close(result, torch.addmm(bias, a, b, beta=0))


def test_float32_tf32_flag_selects_the_dot_precision():
    problem = GemmProblem("mm", 1, 32, 32, 32, torch.float32, (0, 32, 1), (0, 32, 1), (0, 32, 1))
    assert "input_precision='ieee'" in gemm_source(problem)
    tf32 = GemmProblem("mm", 1, 32, 32, 32, torch.float32, (0, 32, 1), (0, 32, 1), (0, 32, 1), tf32=True)
    assert "input_precision='tf32'" in gemm_source(tf32)
    half = GemmProblem("mm", 1, 32, 32, 32, torch.float16, (0, 32, 1), (0, 32, 1), (0, 32, 1))
    assert "input_precision" not in gemm_source(half)


def test_candidates_fit_the_problem_and_shared_memory():
    small = GemmProblem("mm", 1, 20, 24, 40, torch.float16, (0, 40, 1), (0, 1, 40), (0, 24, 1))
    assert all(s.config.block_m == 32 and s.config.block_n == 32 and s.config.block_k <= 64
               for s in gemm_candidates(small))
    large = GemmProblem("mm", 1, 2048, 3072, 768, torch.float32, (0, 768, 1), (0, 3072, 1), (0, 3072, 1))
    configs = [s.config for s in gemm_candidates(large)]
    assert HOPPER_CONFIGS[0] in configs and HOPPER_CONFIGS[1] not in configs  # 288 KB of float32 tiles
    half = GemmProblem("mm", 1, 2048, 3072, 768, torch.bfloat16, (0, 768, 1), (0, 3072, 1), (0, 3072, 1))
    assert [s.config for s in gemm_candidates(half)] == list(HOPPER_CONFIGS)


# -- the choice ---------------------------------------------------------------------------------
def trace(function, arguments):
    with torch.no_grad():
        return make_fx(function, decomposition_table=decompositions(), tracing_mode="fake")(*arguments)


def linear(x, weight, bias):
    return torch.nn.functional.linear(x, weight, bias).relu()


def linear_arguments(device):
    return [torch.randn(12, 40, device=device), torch.randn(24, 40, device=device), torch.randn(24, device=device)]


def compile_tuned(function, arguments, cache_dir, **options):
    """`function` through the Triton emitter under max-autotune (the default mode with max_autotune=False)."""
    config = Config(**{"max_autotune": True, "cache_dir": cache_dir, **options})
    return triton_compile.compile_graph(trace(function, arguments), arguments, config)


def choices(runner) -> list[GemmChoice]:
    return [step.target for step in runner.program.steps
            if isinstance(step, ir.Extern) and isinstance(step.target, GemmChoice)]


def test_default_mode_calls_the_aten_product(device, cache_dir):
    arguments = linear_arguments(device)
    runner = triton_compile.compile_graph(trace(linear, arguments), arguments, Config(cache_dir=cache_dir))
    assert not choices(runner)
    assert any(isinstance(s, ir.Extern) and s.target is aten.addmm.default for s in runner.program.steps)
    assert "gemm" not in "\n".join(runner.kernel_sources)
    torch.testing.assert_close(runner(*arguments), linear(*arguments))


def fake_timing(monkeypatch, costs: dict[str, float], measured: list[str]):
    """Timing as on a GPU: each candidate takes `costs[name]` ms (the extern `costs[EXTERN]`)."""
    def measure(self, name, call):
        call()
        measured.append(name)
        return costs.get(name, 5.0)
    monkeypatch.setattr(gemm_choice, "can_time", lambda: True)
    monkeypatch.setattr(gemm_choice, "capturing", lambda: False)
    monkeypatch.setattr(gemm_choice, "device_name", lambda: "Fake_GPU")
    monkeypatch.setattr(GemmChoice, "_measure", measure)


def test_max_autotune_times_once_and_remembers_the_choice(monkeypatch, device, cache_dir):
    arguments = linear_arguments(device)
    config = Config(max_autotune=True, cache_dir=cache_dir)
    runner = triton_compile.compile_graph(trace(linear, arguments), arguments, config)
    [choice] = choices(runner)
    fastest = str(choice.shapes[-1].config)
    measured: list[str] = []
    fake_timing(monkeypatch, {EXTERN: 2.0, fastest: 1.0}, measured)
    torch.testing.assert_close(runner(*arguments), linear(*arguments))
    assert choice.chosen == fastest and sorted(measured) == sorted(choice._candidates_text())
    assert choice.timings_ms[fastest] == 1.0
    launcher = choice.launchers[-1]
    launches = launcher.slow_launches + launcher.fast_launches
    torch.testing.assert_close(runner(*arguments), linear(*arguments))  # the template again, not timed
    assert launcher.slow_launches + launcher.fast_launches == launches + 1
    assert len(measured) == len(choice._candidates_text())

    # a later process (a new compile): the choice is read from disk, nothing is timed
    again = triton_compile.compile_graph(trace(linear, arguments), arguments, config)
    measured.clear()
    torch.testing.assert_close(again(*arguments), linear(*arguments))
    assert choices(again)[0].chosen == fastest and not measured
    assert Path(choice.fused_path + ".Fake_GPU.gemm-choice").exists()  # beside the (fused) template's source


def test_cublas_kept_where_it_is_faster(monkeypatch, device, cache_dir):
    arguments = linear_arguments(device)
    function = torch.nn.functional.linear  # the product is returned: no epilogue
    runner = compile_tuned(function, arguments, cache_dir)
    measured: list[str] = []
    fake_timing(monkeypatch, {EXTERN: 0.5}, measured)
    torch.testing.assert_close(runner(*arguments), function(*arguments))
    [choice] = choices(runner)
    assert choice.epilogue is None and choice.chosen == EXTERN and choice._call is aten.addmm.default


def test_without_timing_the_extern_runs(device, cache_dir):
    # the interpreter (or a CPU) cannot time: the ATen product, and nothing written
    arguments = linear_arguments(device)
    runner = compile_tuned(linear, arguments, cache_dir)
    if gemm_choice.can_time():
        pytest.skip("a GPU times for real")
    torch.testing.assert_close(runner(*arguments), linear(*arguments))
    assert choices(runner)[0].chosen == EXTERN


def test_a_changed_tf32_setting_runs_the_extern(monkeypatch, device, cache_dir):
    a, b = torch.randn(16, 32, device=device), torch.randn(32, 16, device=device)
    runner = triton_compile.compile_graph(trace(lambda a, b: (a @ b) * 2, [a, b]), [a, b],
                                          Config(max_autotune=True, cache_dir=cache_dir))
    [choice] = choices(runner)
    fake_timing(monkeypatch, {EXTERN: 9.0}, [])
    runner(a, b)
    assert choice.chosen != EXTERN
    launcher = [choice.launchers[i] for i, s in enumerate(choice.shapes) if str(s.config) == choice.chosen][0]
    before = launcher.slow_launches + launcher.fast_launches
    # Set and restored by hand: the flag is a property of torch's cuBLASModule, which monkeypatch's
    # undo deletes instead of restoring on some torch builds (3.13's CUDA wheel).
    flag = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = not choice.problem.tf32
    try:
        torch.testing.assert_close(runner(a, b), (a @ b) * 2)
        assert launcher.slow_launches + launcher.fast_launches == before  # cuBLAS ran, following the flag
    finally:
        torch.backends.cuda.matmul.allow_tf32 = flag


def test_configurations_compile_at_build_time_until_a_choice_is_recorded(monkeypatch, device, cache_dir):
    arguments = linear_arguments(device)
    config = Config(max_autotune=True, cache_dir=cache_dir)
    runner = triton_compile.compile_graph(trace(linear, arguments), arguments, config)
    [choice] = choices(runner)
    fake_timing(monkeypatch, {EXTERN: 0.5}, [])
    jobs = choice.compile_jobs()
    assert len(jobs) == 2 * len(choice.shapes)  # the template, and the template with the relu in its store
    assert all(job.arguments == (torch.float32,) * 4 for job in jobs)
    runner(*arguments)  # timed, recorded
    assert choice.compile_jobs() == []


# -- epilogues -----------------------------------------------------------------------------------
def residual_gelu(x, weight, bias, residual):
    """GPT-2's MLP shape: a linear layer over (batch, tokens, width), GELU, then a residual add."""
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias), approximate="tanh") + residual


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_an_epilogue_fused_into_the_store_equals_the_separate_kernels(monkeypatch, device, dtype, cache_dir):
    arguments = [torch.randn(2, 6, 40, device=device, dtype=dtype), torch.randn(24, 40, device=device, dtype=dtype),
                 torch.randn(24, device=device, dtype=dtype), torch.randn(2, 6, 24, device=device, dtype=dtype)]
    plain = triton_compile.compile_graph(trace(residual_gelu, arguments), arguments, Config(cache_dir=cache_dir))
    runner = triton_compile.compile_graph(trace(residual_gelu, arguments), arguments,
                                          Config(max_autotune=True, cache_dir=cache_dir))
    [choice] = choices(runner)
    assert choice.epilogue is not None and choice.epilogue.inputs  # reads the residual too
    assert not [s for s in runner.program.steps if isinstance(s, ir.Pointwise)]  # merged into the product's step
    fused = str(choice.shapes[0].config) + gemm_choice.FUSED
    fake_timing(monkeypatch, {fused: 0.1}, [])
    result = runner(*arguments)
    assert choice.chosen == fused and result.dtype == dtype and result.shape == (2, 6, 24)
    separate = [choice.candidate(name)(*_step_arguments(runner, choice, arguments)) for name in
                (EXTERN, str(choice.shapes[0].config))]
    expected = plain(*arguments)
    # The product is rounded to its dtype before the epilogue reads it, as between two kernels: the
    # same bits under the interpreter; on a GPU the two kernels' arithmetic may contract differently.
    exact = {"rtol": 0, "atol": 0} if expressions.interpreted() else {}
    torch.testing.assert_close(result, separate[1], **exact)
    torch.testing.assert_close(result, expected, **({} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}))
    torch.testing.assert_close(separate[0], expected, **exact)


def _step_arguments(runner, choice, arguments):
    """The tensors the wrapper hands `choice`: addmm's operands (the bias, x as rows, the weight
    transposed), then the epilogue's input (the residual)."""
    [step] = [s for s in runner.program.steps if isinstance(s, ir.Extern) and s.target is choice]
    x, weight, bias, residual = arguments
    assert [ref.name for ref in step.args][-1] == runner.program.inputs[3] and len(step.args) == 4
    return [bias, x.reshape(-1, x.shape[-1]), weight.t(), residual]


def read_twice(x, weight, bias):
    y = torch.nn.functional.linear(x, weight, bias)
    return y.relu(), y * 2


def also_returned(x, weight, bias):
    y = torch.nn.functional.linear(x, weight, bias)
    return y, y.relu()


@pytest.mark.parametrize("function", [read_twice, also_returned])
def test_a_product_read_twice_or_returned_keeps_its_store(device, function, cache_dir):
    arguments = linear_arguments(device)
    runner = compile_tuned(function, arguments, cache_dir)
    [choice] = choices(runner)
    assert choice.epilogue is None
    for got, want in zip(runner(*arguments), function(*arguments)):
        torch.testing.assert_close(got, want)


def test_a_cast_epilogue_stores_the_cast_type(monkeypatch, device, cache_dir):
    a, b = torch.randn(16, 32, device=device), torch.randn(32, 24, device=device)
    function = lambda a, b: (a @ b).to(torch.float16)  # noqa: E731
    runner = compile_tuned(function, [a, b], cache_dir)
    [choice] = choices(runner)
    fake_timing(monkeypatch, {str(choice.shapes[1].config) + gemm_choice.FUSED: 0.1}, [])
    result = runner(a, b)
    assert choice.chosen.endswith(gemm_choice.FUSED) and result.dtype == torch.float16
    torch.testing.assert_close(result, function(a, b))


@pytest.mark.parametrize("prefer", ["fused", "template"])
def test_gpt2_with_every_product_on_templates_matches_eager(monkeypatch, device, prefer, cache_dir):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
    from gpu_models import GPT2, GPT2Settings

    model = GPT2(GPT2Settings(vocab_size=100, context=32, layers=2, heads=2, width=32)).to(device).eval()
    parameters = dict(model.named_parameters())
    tokens = torch.randint(0, 100, (2, 16), device=device)
    arguments = [tokens, *parameters.values()]

    def function(tokens, *values):
        return torch.func.functional_call(model, dict(zip(parameters, values)), (tokens,))

    def measure(self, name, call):  # cuBLAS slowest; then the fused or the plain template
        call()
        if name == EXTERN:
            return 9.0
        return 0.5 if name.endswith(gemm_choice.FUSED) == (prefer == "fused") else 1.0
    fake_timing(monkeypatch, {}, [])
    monkeypatch.setattr(GemmChoice, "_measure", measure)
    runner = triton_compile.compile_graph(trace(function, arguments), arguments,
                                          Config(max_autotune=True, cache_dir=cache_dir))
    with torch.no_grad():
        result, expected = runner(*arguments), model(tokens)
    chosen = [choice.chosen for choice in choices(runner)]
    assert chosen and all(name != EXTERN for name in chosen)
    assert any(name.endswith(gemm_choice.FUSED) for name in chosen) == (prefer == "fused")
    assert ((result.double() - expected.double()).norm() / expected.double().norm()).item() < 1e-5


def test_a_fused_epilogue_on_a_gpu_finds_libdevice(monkeypatch, device, cache_dir):
    # under the interpreter tanh is a formula; on a GPU the epilogue calls libdevice.tanh
    arguments = linear_arguments(device)
    runner = compile_tuned(residual_gelu, arguments + [torch.randn(12, 24, device=device)], cache_dir)
    [choice] = choices(runner)
    monkeypatch.setattr(expressions, "interpreted", lambda: False)
    choice.load_fused()
    source = Path(choice.fused_path).read_text()
    assert "libdevice.tanh(" in source and "from triton.language.extra import libdevice" in source


def test_a_template_that_fails_to_compile_ahead_leaves_the_graph_compiled(monkeypatch, device, cache_dir):
    from tensorjit import logs

    arguments = linear_arguments(device)
    runner = compile_tuned(linear, arguments, cache_dir)
    fake_timing(monkeypatch, {}, [])

    def failing(jobs, workers):
        raise RuntimeError("out of resources")
    monkeypatch.setattr(triton_compile, "compile_in_parallel", failing)
    triton_compile.compile_templates(runner.program, 0)  # logged, not raised
    assert any("out of resources" in line for line in logs.recent("autotuning"))


def test_a_batched_product_with_an_epilogue(monkeypatch, device, cache_dir):
    a, b = torch.randn(3, 20, 36, device=device), torch.randn(3, 18, 36, device=device)
    function = lambda a, b: torch.sigmoid(torch.bmm(a, b.transpose(1, 2))) * 3  # noqa: E731
    runner = compile_tuned(function, [a, b], cache_dir)
    [choice] = choices(runner)
    assert choice.epilogue is not None and choice.problem.batch == 3
    fake_timing(monkeypatch, {str(choice.shapes[0].config) + gemm_choice.FUSED: 0.1}, [])
    torch.testing.assert_close(runner(a, b), function(a, b))
    assert choice.chosen.endswith(gemm_choice.FUSED)


def test_offsets_past_two_to_the_31_index_in_64_bits():
    # the LM head of a long batch: 65536 x 50264 outputs
    wide = GemmProblem("mm", 1, 65536, 50264, 768, torch.bfloat16, (0, 768, 1), (0, 1, 768), (0, 50264, 1))
    assert "rm = rm.to(tl.int64)" in gemm_source(wide)
    narrow = GemmProblem("mm", 1, 4096, 50264, 768, torch.bfloat16, (0, 768, 1), (0, 1, 768), (0, 50264, 1))
    assert "tl.int64" not in gemm_source(narrow)


def test_a_kernel_reading_two_products_joins_one(device, cache_dir):
    a, b, c = (torch.randn(16, 32, device=device) for _ in range(3))
    function = lambda a, b, c: (a @ b.t()) * (a @ c.t()) + 1  # noqa: E731
    runner = compile_tuned(function, [a, b, c], cache_dir)
    merged = [choice for choice in choices(runner) if choice.epilogue is not None]
    assert len(merged) == 1 and len(choices(runner)) == 2
    # Against float64: the template and cuBLAS sum the 32 products in different orders, a few
    # float32 ulps apart (5 at a value near 36 on the H100), while both are within float32's error.
    exact = function(a.double(), b.double(), c.double())
    torch.testing.assert_close(runner(a, b, c).double(), exact, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(function(a, b, c).double(), exact, rtol=2e-5, atol=2e-5)


def test_transformers_gpt2_with_every_product_on_templates_matches_eager(monkeypatch, device, cache_dir):
    # Conv1D's addmm (x @ W, W stored in x out), eager attention's two bmm, the tied LM head's mm
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    settings = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=128, n_positions=64, bos_token_id=0,
                                       eos_token_id=0, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(settings).to(device).eval()
    parameters = dict(model.named_parameters())
    tokens = torch.randint(0, 128, (2, 16), device=device)

    def function(tokens, *values):
        return torch.func.functional_call(model, dict(zip(parameters, values)), (tokens,), {"use_cache": False}).logits

    def measure(self, name, call):  # every product on a template, fused where it can be
        call()
        return 9.0 if name == EXTERN else (0.5 if name.endswith(gemm_choice.FUSED) else 1.0)
    fake_timing(monkeypatch, {}, [])
    monkeypatch.setattr(GemmChoice, "_measure", measure)
    arguments = [tokens, *parameters.values()]
    runner = compile_tuned(function, arguments, cache_dir)
    with torch.no_grad():
        result, expected = runner(*arguments), function(*arguments)
    chosen = {choice.problem.op: choice.chosen for choice in choices(runner)}
    assert set(chosen) == {"mm", "addmm", "bmm"} and EXTERN not in chosen.values()
    assert any(choice.chosen.endswith(gemm_choice.FUSED) for choice in choices(runner))  # the MLP's GELU
    assert ((result - expected).norm() / expected.norm()).item() < 1e-5


def test_the_wrapper_checks_no_layout_after_a_choice(device, cache_dir):
    # a GemmChoice returns a fresh tensor of the traced layout, as the ATen product does
    a, b = torch.randn(16, 32, device=device), torch.randn(32, 24, device=device)
    runner = compile_tuned(torch.mm, [a, b], cache_dir)
    assert choices(runner) and ".stride() != " not in runner.wrapper_source


def test_a_first_call_inside_a_capture_runs_the_extern_and_chooses_later(monkeypatch, device, cache_dir):
    arguments = linear_arguments(device)
    runner = compile_tuned(linear, arguments, cache_dir)
    [choice] = choices(runner)
    measured: list[str] = []
    fake_timing(monkeypatch, {EXTERN: 0.5}, measured)
    monkeypatch.setattr(gemm_choice, "capturing", lambda: True)
    torch.testing.assert_close(runner(*arguments), linear(*arguments))
    assert choice.chosen is None and not measured  # nothing timed while recording
    monkeypatch.setattr(gemm_choice, "capturing", lambda: False)
    torch.testing.assert_close(runner(*arguments), linear(*arguments))
    assert choice.chosen == EXTERN and measured
