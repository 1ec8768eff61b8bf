"""The CPU code generator: fused pointwise kernels match eager; the cache and the fallbacks hold."""

import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import tensorjit
from tensorjit.codegen import cpp
from tensorjit.codegen.cpp import build

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C++ compiler")


def arithmetic(x, y):
    a = (x * 1.5 + y).relu() - 0.25
    b = torch.maximum(a, y) / 2
    return a * b, b.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_chain_matches_eager(dtype, tmp_path):
    class Config:
        cache_dir = str(tmp_path)
        cpp_compiler = None

    x, y = torch.randn(33, 65, dtype=dtype), torch.randn(33, 65, dtype=dtype)
    gm = make_fx(arithmetic, tracing_mode="fake")(x, y)
    compiled = cpp.compile_aten_graph(gm, [x, y], config=Config())
    assert "kernel_0" in compiled.__self__.kernel_source
    for got, want in zip(compiled(x, y), arithmetic(x, y)):
        torch.testing.assert_close(got, want)


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    class Config:
        cache_dir = str(tmp_path)
        cpp_compiler = None

    x, y = torch.randn(8, 8), torch.randn(8, 8)
    source = "#include <cstdint>\nextern \"C\" int64_t answer() { return 42; }\n"
    compiler = build.find_compiler()
    path = build.library_path(source, compiler, str(tmp_path))
    with open(path, "wb") as f:  # a partial write left by a crashed process
        f.write(b"not a library")
    library = build.load_library(source, compiler, str(tmp_path))
    assert library.answer() == 42
    gm = make_fx(arithmetic, tracing_mode="fake")(x, y)
    compiled = cpp.compile_aten_graph(gm, [x, y], config=Config())
    torch.testing.assert_close(compiled(x, y)[0], arithmetic(x, y)[0])
    assert oct(os.stat(tmp_path / "cpp").st_mode & 0o777) == "0o700"


def test_other_layouts_take_the_aten_ops():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    gm = make_fx(arithmetic, tracing_mode="fake")(x, y)
    compiled = cpp.compile_aten_graph(gm, [x, y])
    xt, yt = torch.randn(8, 8).t(), torch.randn(8, 8).t()
    torch.testing.assert_close(compiled(xt, yt)[0], arithmetic(xt, yt)[0])


def test_no_compiler_falls_back_to_aten(monkeypatch):
    monkeypatch.setattr(cpp, "find_compiler", lambda preferred=None: None)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    gm = make_fx(arithmetic, tracing_mode="fake")(x, y)
    with pytest.warns(UserWarning, match="no C\\+\\+ compiler"):
        compiled = cpp.compile_aten_graph(gm, [x, y])
    torch.testing.assert_close(compiled(x, y)[0], arithmetic(x, y)[0])


def test_inductor_backend_on_cpu_uses_the_kernels():
    def fn(x):
        return ((x * 2 + 1).relu() * 3 - 1).abs()

    compiled = tensorjit.compile(fn, backend="inductor")
    x = torch.randn(100)
    torch.testing.assert_close(compiled(x), fn(x))
    x = torch.randn(100, requires_grad=True)
    compiled(x).sum().backward()
    expected = torch.autograd.grad(fn(x).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)
