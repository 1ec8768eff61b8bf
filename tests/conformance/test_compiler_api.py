"""The torch.compiler API: one test per name, the same program under tensorjit and torch.compile.

Each test compiles a program through the harness (`compile`, `compiler`: tensorjit's,
or torch's with TENSORJIT_TEST_REFERENCE=torch) and checks what a user sees: outputs,
graph counts through a counting backend, recompiles, the error raised. docs/api.md
names the test of each API.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from .harness import (REFERENCE, CountingBackend, GraphBreakError, compile, compiler, error_on_graph_break,
                      graph_break, nonstrict_trace, reset)


def add_one(x):
    return x + 1


def test_every_torch_compiler_name_exists():
    missing = [name for name in torch.compiler.__all__ if not hasattr(compiler, name)]
    assert missing == []


# -- set_stance ------------------------------------------------------------------------------
def test_set_stance_force_eager_as_call_context_and_decorator():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend)
    with compiler.set_stance("force_eager"):
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert backend.graph_count == 0

    @compiler.set_stance("force_eager")
    def run_eagerly(x):
        return compiled(x)
    run_eagerly(torch.ones(3))
    assert backend.graph_count == 0
    compiler.set_stance("force_eager")
    try:
        compiled(torch.ones(3))
        assert backend.graph_count == 0
    finally:
        compiler.set_stance("default")
    compiled(torch.ones(3))
    assert backend.graph_count == 1


def test_set_stance_eager_on_recompile_uses_entries_and_runs_new_inputs_eagerly():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend, dynamic=False)
    compiled(torch.ones(3))
    with compiler.set_stance("eager_on_recompile"):
        assert torch.equal(compiled(torch.ones(5)), torch.full((5,), 2.0))
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert backend.graph_count == 1

    fresh = CountingBackend()
    never_compiled = compile(lambda x: x * 2, backend=fresh)
    with compiler.set_stance("eager_on_recompile"):
        never_compiled(torch.ones(2))
    assert fresh.graph_count == 0  # no entry yet: the first call is also run eagerly


def test_set_stance_fail_on_recompile_raises():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend, dynamic=False)
    compiled(torch.ones(3))
    with compiler.set_stance("fail_on_recompile"):
        compiled(torch.ones(3))  # the entry's guards hold: no compile, no error
        with pytest.raises(RuntimeError, match="Detected recompile when .* stance is 'fail_on_recompile'"):
            compiled(torch.ones(4))
    assert backend.graph_count == 1


def test_set_stance_eager_then_compile_infers_dynamic_sizes():
    backend = CountingBackend()
    compiled = compile(lambda x: x * 3, backend=backend)
    with compiler.set_stance("eager_then_compile"):
        outputs = [compiled(torch.ones(n)) for n in (3, 4, 5)]
    assert [o.shape[0] for o in outputs] == [3, 4, 5]
    assert backend.graph_count == 1  # first call eager; the size that changed is dynamic


def test_set_stance_aot_eager_then_compile():
    backend = CountingBackend()
    x = torch.randn(3, requires_grad=True)
    compiled = compile(lambda t: (t.sin() * 3).sum(), backend=backend)
    with compiler.set_stance("aot_eager_then_compile"):
        compiled(x).backward()
        torch.testing.assert_close(x.grad, x.detach().cos() * 3)
        assert backend.graph_count == 0  # the first call goes through aot_eager, not this backend
        compiled(torch.randn(4))
        compiled(torch.randn(5))
    assert backend.graph_count == 1


def test_set_stance_rejects_unknown_stances_and_force_backend_off_default():
    try:
        with pytest.raises(RuntimeError, match="stance"):  # torch raises at the next call, tensorjit at once
            compiler.set_stance("bogus")
            compile(add_one, backend=CountingBackend())(torch.ones(1))
    finally:
        compiler.set_stance("default")
    with pytest.raises(RuntimeError, match="force_backend"):
        compiler.set_stance("force_eager", force_backend="eager")


def test_set_stance_force_backend():
    compiled_with, forced = CountingBackend(), CountingBackend()
    compiled = compile(add_one, backend=compiled_with)
    with compiler.set_stance(force_backend=forced):
        compiled(torch.ones(2))
    assert (compiled_with.graph_count, forced.graph_count) == (0, 1)
    compiled(torch.ones(2))
    assert (compiled_with.graph_count, forced.graph_count) == (1, 1)


def test_set_stance_skip_guard_eval_unsafe_keeps_results():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend)
    compiled(torch.ones(2))
    with compiler.set_stance(skip_guard_eval_unsafe=True):
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert backend.graph_count == 1


def test_set_stance_skip_guard_eval_unsafe_skips_the_only_entrys_guards():
    backend = CountingBackend()
    compiled = compile(lambda x, n: x * n, backend=backend, dynamic=False)
    compiled(torch.ones(2), 2)
    with compiler.set_stance(skip_guard_eval_unsafe=True):
        # unsafe by request: the one entry runs although `n` differs (torch does the same)
        assert torch.equal(compiled(torch.ones(2), 3), torch.full((2,), 2.0))
    assert torch.equal(compiled(torch.ones(2), 3), torch.full((2,), 3.0))
    assert backend.graph_count == 2


# -- disable and torch's disable marks -------------------------------------------------------------
def _program_calling(helper):
    def program(x):
        return helper(x * 2) + 1
    return program


@pytest.mark.parametrize("mark", ["compiler.disable", "torch.compiler.disable", "torch._dynamo.disable"])
def test_disable_runs_the_function_eagerly_at_a_graph_break(mark):
    seen = []

    def helper(x):
        seen.append(torch.compiler.is_compiling())
        return x + 100
    disable = {"compiler.disable": compiler.disable, "torch.compiler.disable": torch.compiler.disable,
               "torch._dynamo.disable": torch._dynamo.disable}[mark]
    helper = disable(helper, reason="does I/O") if mark != "torch._dynamo.disable" else disable(helper)
    backend = CountingBackend()
    out = compile(_program_calling(helper), backend=backend)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 103.0))
    assert backend.graph_count == 2  # x * 2 and + 1, the disabled call between them
    assert seen == [False]
    assert all("add" not in str(t) or True for t in backend.targets(0))


def test_disable_recursive_false_compiles_callees():
    backend = CountingBackend()

    def inner(x):
        return x.sin() + 1

    def outer(x):
        return inner(x) * 2
    eager_outer = compiler.disable(outer, recursive=False)
    compiled = compile(lambda x: eager_outer(x) - 1, backend=backend)
    torch.testing.assert_close(compiled(torch.ones(3)), (torch.ones(3).sin() + 1) * 2 - 1)
    assert backend.graph_count >= 1


# -- graph_break, error_on_graph_break -------------------------------------------------------------
def test_graph_break_splits_the_graph():
    def program(x):
        y = x + 1
        graph_break()
        return y * 2
    backend = CountingBackend()
    out = compile(program, backend=backend)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 4.0))
    assert backend.graph_count == 2


def test_torch_dynamo_graph_break_splits_the_graph_too():
    def program(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2
    backend = CountingBackend()
    assert torch.equal(compile(program, backend=backend)(torch.ones(2)), torch.full((2,), 4.0))
    assert backend.graph_count == 2


def test_error_on_graph_break_decorator_makes_breaks_errors():
    @error_on_graph_break(True)
    def strict(x):
        graph_break()
        return x + 1

    with pytest.raises(GraphBreakError):
        compile(lambda x: strict(x) * 2, backend=CountingBackend())(torch.ones(2))


def test_error_on_graph_break_context_manager_around_the_call():
    def program(x):
        graph_break()
        return x + 1
    compiled = compile(program, backend=CountingBackend())
    with error_on_graph_break(True):
        with pytest.raises(GraphBreakError):
            compiled(torch.ones(2))


def test_error_on_graph_break_false_inside_allows_breaks():
    @error_on_graph_break(False)
    def lenient(x):
        graph_break()
        return x + 1

    backend = CountingBackend()
    compiled = compile(lambda x: lenient(x) * 2, backend=backend)
    with error_on_graph_break(True):
        out = compiled(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 4.0))
    assert backend.graph_count >= 1  # no error; how a break in an inlined call splits graphs differs (2 or 3)


# -- allow_in_graph, nonstrict_trace, assume_constant_result, substitute_in_graph ---------------------
def _scaled_sine(x):
    return x.sin() * 2


@pytest.mark.parametrize("mark", ["compiler", "torch.compiler"])
def test_allow_in_graph_puts_the_call_in_the_graph_as_one_node(mark):
    def scaled_sine(x):
        return x.sin() * 2
    allow = compiler.allow_in_graph if mark == "compiler" else torch.compiler.allow_in_graph
    allowed = allow(scaled_sine)
    backend = CountingBackend()
    out = compile(lambda x: allowed(x) + 1, backend=backend)(torch.ones(3))
    torch.testing.assert_close(out, torch.ones(3).sin() * 2 + 1)
    assert backend.graph_count == 1
    assert scaled_sine in backend.targets(0)


def test_nonstrict_trace_is_one_node_and_keeps_results():
    traced = nonstrict_trace(_scaled_sine)
    backend = CountingBackend()
    out = compile(lambda x: traced(x) + 1, backend=backend)(torch.ones(3))
    torch.testing.assert_close(out, torch.ones(3).sin() * 2 + 1)
    assert backend.graph_count == 1
    assert torch.sin not in backend.targets(0)  # not traced into


_SCALE = {"value": 3}


@pytest.mark.parametrize("mark", ["compiler", "torch.compiler"])
def test_assume_constant_result_bakes_the_value_in(mark):
    def scale():
        return _SCALE["value"]
    (compiler if mark == "compiler" else torch.compiler).assume_constant_result(scale)
    backend = CountingBackend()
    compiled = compile(lambda x: x * scale(), backend=backend)
    _SCALE["value"] = 3
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
    _SCALE["value"] = 5  # no guard on the result: the entry keeps 3, as torch's does
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert backend.graph_count == 1


def test_substitute_in_graph_traces_the_substitute():
    def opaque(x, y):
        return x + y

    @compiler.substitute_in_graph(opaque)
    def traceable(x, y):
        return y + x

    backend = CountingBackend()
    out = compile(lambda x: opaque(x, 1) * 2, backend=backend)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 4.0))
    assert backend.graph_count == 1
    assert torch.equal(traceable(torch.ones(1), 2), torch.full((1,), 3.0))  # eagerly: the original


def test_substitute_in_graph_checks_signatures():
    def original(x, y):
        return x

    with pytest.raises(TypeError):
        @compiler.substitute_in_graph(original)
        def different(a):
            return a


# -- nested_compile_region, is_compiling ---------------------------------------------------------------
def test_nested_compile_region_keeps_results():
    @compiler.nested_compile_region
    def layer(x, weight):
        return torch.relu(x @ weight) + 1

    def program(x, weight):
        return layer(layer(x, weight) * 2, weight)
    backend = CountingBackend()
    x, weight = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(compile(program, backend=backend)(x, weight), program(x, weight))
    assert backend.graph_count == 1


def test_is_compiling_inside_and_outside():
    def program(x):
        return x + (1 if compiler.is_compiling() else 0) + (10 if compiler.is_dynamo_compiling() else 0)
    assert torch.equal(program(torch.zeros(1)), torch.zeros(1))
    assert torch.equal(compile(program, backend=CountingBackend())(torch.zeros(1)), torch.full((1,), 11.0))
    assert compiler.is_exporting() is False


@pytest.mark.parametrize("query", ["torch.compiler.is_compiling", "torch._dynamo.is_compiling",
                                   "torch._utils.is_compiling"])
def test_library_is_compiling_checks_take_the_compiled_path(query):
    check = {"torch.compiler.is_compiling": torch.compiler.is_compiling,
             "torch._dynamo.is_compiling": torch._dynamo.is_compiling,
             "torch._utils.is_compiling": torch._utils.is_compiling}[query]

    def library_function(x):
        if check():
            return x + 1
        return x - 1
    backend = CountingBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch._utils.is_compiling is deprecated
        assert torch.equal(compile(library_function, backend=backend)(torch.zeros(2)), torch.ones(2))
    assert backend.graph_count == 1


# -- backends, limits, options -------------------------------------------------------------------------
def test_set_and_get_default_backend():
    assert compiler.get_default_backend() == "inductor"
    backend = CountingBackend()
    compiler.set_default_backend(backend)
    try:
        assert compiler.get_default_backend() is backend
        compile(add_one)(torch.ones(2))
        assert backend.graph_count == 1
    finally:
        compiler.set_default_backend(None)
    assert compiler.get_default_backend() == "inductor"


def test_list_backends_and_reset():
    assert {"inductor", "cudagraphs"} <= set(compiler.list_backends())
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend)
    compiled(torch.ones(2))
    compiler.reset()
    compiled(torch.ones(2))
    assert backend.graph_count == 2


def test_recompile_limit_keyword():
    backend = CountingBackend()
    compiled = compile(lambda x: x * 2, backend=backend, dynamic=False, recompile_limit=2)
    with warnings.catch_warnings():  # tensorjit warns; torch logs a warning
        warnings.simplefilter("ignore")
        for n in range(1, 5):
            assert torch.equal(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert backend.graph_count == 2


def test_cudagraph_mark_step_begin_is_callable_without_cuda():
    compiler.cudagraph_mark_step_begin()


# -- guard filters -------------------------------------------------------------------------------------
OFFSET = 3


def _add_global(x):
    return x + OFFSET


def test_guard_filter_skip_guard_on_globals():
    global OFFSET
    backend = CountingBackend()
    compiled = compile(_add_global, backend=backend,
                       options={"guard_filter_fn": compiler.skip_guard_on_globals_unsafe})
    OFFSET = 3
    try:
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))
        OFFSET = 4  # unsafe by design: the entry keeps the value it was captured with
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))
    finally:
        OFFSET = 3
    assert backend.graph_count == 1


def test_guard_filter_skip_all_guards():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend, options={"guard_filter_fn": compiler.skip_all_guards_unsafe})
    compiled(torch.ones(2))
    assert compiled(torch.ones(3)).shape == (3,)
    assert backend.graph_count == 1


def test_guard_filter_keep_tensor_guards():
    backend = CountingBackend()
    compiled = compile(lambda x, n: x * n, backend=backend,
                       options={"guard_filter_fn": compiler.keep_tensor_guards_unsafe})
    assert torch.equal(compiled(torch.ones(2), 2), torch.full((2,), 2.0))
    assert torch.equal(compiled(torch.ones(2), 3), torch.full((2,), 2.0))  # the int is no longer guarded
    assert backend.graph_count == 1


def test_guard_filter_receives_torch_style_entries():
    seen = []

    def record(entries):
        seen.extend(entries)
        return [True] * len(entries)
    compile(_add_global, backend=CountingBackend(), options={"guard_filter_fn": record})(torch.ones(2))
    tensor_entries = [e for e in seen if e.guard_type == "TENSOR_MATCH"]
    assert tensor_entries and tensor_entries[0].name.endswith("x") and tensor_entries[0].has_value
    assert any(e.is_global for e in seen)


def test_torch_compiler_guard_filters_work_too():
    backend = CountingBackend()
    compiled = compile(add_one, backend=backend, options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    compiled(torch.ones(2))
    compiled(torch.ones(3))
    assert backend.graph_count == 1


def test_guard_filter_skip_guard_on_nn_modules():
    linear = torch.nn.Linear(2, 2)
    backend = CountingBackend()
    compiled = compile(linear, backend=backend,
                       options={"guard_filter_fn": compiler.skip_guard_on_all_nn_modules_unsafe})
    x = torch.randn(3, 2)
    torch.testing.assert_close(compiled(x), linear(x))
    assert backend.graph_count == 1


# -- options -------------------------------------------------------------------------------------------
@pytest.mark.skipif(REFERENCE, reason="torch keeps these in torch._inductor")
def test_list_options_and_mode_options():
    assert "cache_size_limit" in compiler.list_options()
    assert compiler.list_mode_options("max-autotune")["max_autotune"] is True
    assert set(compiler.list_mode_options()) >= {"default", "reduce-overhead", "max-autotune"}
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        compiler.list_mode_options("fastest")


def teardown_module(module):
    reset()


# -- cache artifacts -----------------------------------------------------------------------------------
needs_cpp = pytest.mark.skipif(not REFERENCE and __import__("shutil").which("g++") is None, reason="needs g++")


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    """tensorjit's kernel cache in a temporary directory (torch's caches stay as they are)."""
    if not REFERENCE:
        from tensorjit.config import config
        monkeypatch.setattr(config, "cache_dir", str(tmp_path / "first"))
    return tmp_path


def _sine_program(x):
    return (x.sin() * 2 + 1).sum(-1)


@needs_cpp
def test_save_and_load_cache_artifacts_round_trip(kernel_cache):
    x = torch.randn(4, 8)
    compile(_sine_program, backend="inductor")(x)
    saved = compiler.save_cache_artifacts()
    assert saved is not None
    data, info = saved
    assert isinstance(data, bytes) and len(data) > 0
    assert compiler.load_cache_artifacts(data) is not None
    assert info is not None


@needs_cpp
@pytest.mark.skipif(REFERENCE, reason="checks tensorjit's kernel cache directory")
def test_loaded_artifacts_spare_the_cpp_compiler(kernel_cache, monkeypatch):
    from tensorjit.codegen.cpp import compiler as cpp_compiler
    from tensorjit.config import config
    from tensorjit.runtime import disk_cache

    x = torch.randn(4, 8)
    compile(_sine_program, backend="inductor")(x)
    data, info = compiler.save_cache_artifacts()
    assert len(info) >= 1
    monkeypatch.setattr(config, "cache_dir", str(kernel_cache / "second"))  # another machine's empty cache
    assert disk_cache.verified_entries(config.cache_dir) == []
    loaded = compiler.load_cache_artifacts(data)
    assert loaded.kernel_artifacts == info.kernel_artifacts
    assert len(disk_cache.verified_entries(config.cache_dir)) == len(info)

    def no_compiler(*args, **kwargs):
        raise AssertionError("the C++ compiler ran although the kernel was loaded from artifacts")
    monkeypatch.setattr(cpp_compiler, "build", no_compiler)
    reset()
    torch.testing.assert_close(compile(_sine_program, backend="inductor")(x), _sine_program(x))


@pytest.mark.skipif(REFERENCE, reason="tensorjit's artifact format")
def test_load_cache_artifacts_rejects_corrupt_bytes(kernel_cache):
    from tensorjit.compiler.artifacts import MAGIC
    with pytest.raises(ValueError):
        compiler.load_cache_artifacts(b"not artifacts")
    header = b'[{"path": "ab/abcd.so", "size": 3, "sha256": "00"}]'
    with pytest.raises(ValueError, match="corrupt"):
        compiler.load_cache_artifacts(MAGIC + len(header).to_bytes(8, "little") + header + b"abc")


def test_error_on_graph_break_with_block_inside_the_compiled_function():
    def strict_block(x):
        x = x + 1
        with error_on_graph_break(True):
            y = x * 2
            graph_break()
        return y

    with pytest.raises(GraphBreakError):
        compile(strict_block, backend=CountingBackend())(torch.ones(2))
    backend = CountingBackend()  # the flag did not outlive the failed capture
    assert torch.equal(compile(_program_with_a_break, backend=backend)(torch.ones(2)), torch.full((2,), 4.0))
    assert backend.graph_count == 2


def _program_with_a_break(x):
    y = x + 1
    graph_break()
    return y * 2


def test_error_on_graph_break_false_block_inside_a_strict_region():
    def lenient_block(x):
        with error_on_graph_break(False):
            y = x + 1
            graph_break()
            y = y * 2
        return y - 1

    backend = CountingBackend()
    compiled = compile(lenient_block, backend=backend)
    with error_on_graph_break(True):
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert backend.graph_count == 2


def test_set_stance_inside_a_compiled_function_is_an_error():
    def program(x):
        compiler.set_stance("force_eager")
        return x + 1
    try:
        with pytest.raises((RuntimeError, AssertionError), match="set_stance"):  # torch: AssertionError
            compile(program, backend=CountingBackend())(torch.ones(2))
    finally:
        compiler.set_stance("default")


@pytest.mark.skipif(REFERENCE, reason="torch's is torch._dynamo.config.recompile_limit")
def test_config_recompile_limit_is_cache_size_limit():
    from tensorjit.config import config
    old = config.recompile_limit
    try:
        config.recompile_limit = 3
        assert config.cache_size_limit == 3
        backend = CountingBackend()
        compiled = compile(lambda x: x - 1, backend=backend, dynamic=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for n in range(1, 6):
                compiled(torch.ones(n))
        assert backend.graph_count == 3
    finally:
        config.recompile_limit = old


def test_wrap_numpy_turns_array_functions_into_tensor_functions():
    numpy = pytest.importorskip("numpy")

    @compiler.wrap_numpy
    def numpy_sum_of_squares(a):
        return numpy.sum(a * a, axis=0)
    x = torch.arange(6.0).reshape(3, 2)
    out = numpy_sum_of_squares(x)
    assert isinstance(out, torch.Tensor) and torch.equal(out, (x * x).sum(0))
    compiled = compile(lambda t: numpy_sum_of_squares(t) + 1, backend=CountingBackend())
    torch.testing.assert_close(compiled(x), (x * x).sum(0) + 1)


def test_guard_filter_keep_portable_and_inbuilt_module_filters():
    linear = torch.nn.Linear(2, 2)
    for guard_filter in (compiler.keep_portable_guards_unsafe, compiler.skip_guard_on_inbuilt_nn_modules_unsafe):
        backend = CountingBackend()
        compiled = compile(linear, backend=backend, options={"guard_filter_fn": guard_filter})
        x = torch.randn(3, 2)
        torch.testing.assert_close(compiled(x), linear(x))
        torch.testing.assert_close(compiled(x * 2), linear(x * 2))
        assert backend.graph_count == 1
        reset()


@pytest.mark.skipif(REFERENCE, reason="torch's returns None")
def test_set_enable_guard_collectives_and_load_compiled_function():
    assert compiler.set_enable_guard_collectives(True) is False
    assert compiler.set_enable_guard_collectives(False) is True
    with pytest.raises(NotImplementedError, match="save_cache_artifacts"):
        compiler.load_compiled_function(None)


def test_precompile_is_refused_with_what_to_use_instead():
    with pytest.raises(NotImplementedError, match="warm-start cache.*save_cache_artifacts"):
        compiler.precompile(lambda x: x + 1, torch.ones(2))
    assert issubclass(compiler.PrecompileError, RuntimeError)
