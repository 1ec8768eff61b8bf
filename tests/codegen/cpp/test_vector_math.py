"""tj_ vector math: ulp error sweeps against double libm, special values against eager, and
proof (g++'s -fopt-info-vec report) that loops calling each function vectorise."""

import ctypes
import os
import shutil
import subprocess
import tempfile

import pytest
import torch

from tensorjit.codegen.cpp.compiler import FLAGS, toolchain_options, vectorisation_report, vectorised_lines
from tensorjit.codegen.cpp.vector_math import ACCURACY_ULP, FLOAT32_FUNCTIONS, VECTOR_MATH

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

REFERENCES = {"exp": "std::exp(x)", "log": "std::log(x)", "log1p": "std::log1p(x)", "expm1": "std::expm1(x)",
              "tanh": "std::tanh(x)", "sigmoid": "1.0 / (1.0 + std::exp(-x))", "erf": "std::erf(x)"}
EAGER = {"exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1, "tanh": torch.tanh,
         "sigmoid": torch.sigmoid, "erf": torch.erf}

HARNESS = r"""
#include <cmath>
#include <cstdlib>
static inline long long tj_ordered(float f) {
  const uint32_t i = tj_bits(f);
  return (i & 0x80000000u) ? -(long long)(i & 0x7fffffffu) : (long long)i;
}
// Largest distance, in floats, between f's results and double libm rounded to float, over the
// bit patterns start, start + stride, ... below stop. NaN must meet NaN.
template <class F, class R>
static void tj_sweep(F f, R reference, uint64_t start, uint64_t stop, uint64_t stride, double* worst, float* at) {
  const int chunk = 4096;
  float in[chunk], out[chunk];
  for (uint64_t base = start; base < stop; base += stride * (uint64_t)chunk) {
    int n = 0;
    for (uint64_t bits = base; n < chunk && bits < stop; bits += stride) in[n++] = tj_float((uint32_t)bits);
    for (int i = 0; i < n; ++i) out[i] = f(in[i]);
    for (int i = 0; i < n; ++i) {
      const float want = (float)reference((double)in[i]);
      const bool want_nan = want != want, got_nan = out[i] != out[i];
      const double error = (want_nan || got_nan) ? (want_nan == got_nan ? 0.0 : 1e9)
                                                   : (double)std::llabs(tj_ordered(out[i]) - tj_ordered(want));
      if (error > *worst) { *worst = error; *at = in[i]; }
    }
  }
}
"""


def harness_source() -> str:
    parts = [VECTOR_MATH, HARNESS, UNDERFLOW_HARNESS]
    for op, function in FLOAT32_FUNCTIONS.items():
        parts.append(
            f'extern "C" void apply_{op}(const float* in, float* out, long long n) {{\n'
            f"  for (long long i = 0; i < n; ++i) out[i] = {function}(in[i]);\n}}\n"
            f'extern "C" void sweep_{op}(uint64_t start, uint64_t stop, uint64_t stride, double* worst, float* at) {{\n'
            f"  tj_sweep({function}, [](double x) {{ return {REFERENCES[op]}; }}, start, stop, stride, worst, at);\n}}\n")
    return "".join(parts)


@pytest.fixture(scope="module")
def library():
    directory = tempfile.mkdtemp(prefix="tj_vector_math_")
    path = os.path.join(directory, "harness.so")
    subprocess.run(["g++", *FLAGS, "-x", "c++", "-", "-o", path], input=harness_source(), text=True, check=True)
    return ctypes.CDLL(path)


def apply(library, op: str, values: torch.Tensor) -> torch.Tensor:
    values = values.to(torch.float32).contiguous()
    out = torch.empty_like(values)
    getattr(library, f"apply_{op}")(ctypes.c_void_p(values.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                                     ctypes.c_longlong(values.numel()))
    return out


def sweep(library, op: str, low: float, high: float, stride: int) -> tuple[float, float]:
    """Max ulp error over every stride-th float with bit pattern in [bits(low), bits(high)), both signs."""
    worst, at = ctypes.c_double(0.0), ctypes.c_float(0.0)
    start = torch.tensor(low, dtype=torch.float32).view(torch.int32).item()
    stop = torch.tensor(high, dtype=torch.float32).view(torch.int32).item()
    for sign in (0, 1 << 31):
        getattr(library, f"sweep_{op}")(ctypes.c_uint64(sign + start), ctypes.c_uint64(sign + stop),
                                        ctypes.c_uint64(stride), ctypes.byref(worst), ctypes.byref(at))
    return worst.value, at.value


# Where each function's interesting behaviour is (dense sampling), beyond the full-range sweep.
DENSE = {"exp": (1e-8, 104.0), "log": (1e-3, 1e3), "log1p": (1e-8, 1.0), "expm1": (1e-8, 90.0),
         "tanh": (1e-8, 10.0), "sigmoid": (1e-8, 110.0), "erf": (1e-8, 4.5)}


@pytest.mark.parametrize("op", sorted(FLOAT32_FUNCTIONS))
def test_ulp_error_full_range(library, op):
    worst, at = sweep(library, op, 0.0, float("nan"), 97)  # every 97th pattern up to the NaNs
    assert worst <= ACCURACY_ULP[op], f"{op}: {worst} ulp at x={at!r}"


@pytest.mark.parametrize("op", sorted(FLOAT32_FUNCTIONS))
def test_ulp_error_dense(library, op):
    worst, at = sweep(library, op, *DENSE[op], 7)
    assert worst <= ACCURACY_ULP[op], f"{op}: {worst} ulp at x={at!r}"


def test_erf_every_float_between_its_two_approximations(library):
    """Every float in [0.5, 4.5), both signs: the join at |x| = 1 of x P(x^2) and 1 - exp(Q(|x|)),
    Q's whole fitted range and the point past which erf rounds to 1."""
    worst, at = sweep(library, "erf", 0.5, 4.5, 1)
    assert worst <= ACCURACY_ULP["erf"], f"erf: {worst} ulp at x={at!r}"


SPECIALS = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38,
            -1.0, 1.0, 88.7, 88.72283, 88.73, 89.0, -87.3, -103.0, -103.97, -104.0, -150.0, 3.4e38, -3.4e38,
            9.0, 9.2, -9.2, 3.9, 4.0, 0.5, -0.5, 1e-7, -1e-7, -0.99999994, 1e30, -1e30]


@pytest.mark.parametrize("op", sorted(FLOAT32_FUNCTIONS))
def test_special_values_match_eager(library, op):
    x = torch.tensor(SPECIALS, dtype=torch.float32)
    got, want = apply(library, op, x), EAGER[op](x)
    # Eager (SLEEF) gives 0 for some denormal results (log1p(1e-45), sigmoid(-89)); we keep them.
    torch.testing.assert_close(got, want, equal_nan=True, rtol=4e-7, atol=1.2e-38)
    zero = x == 0
    assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero])), f"{op}: sign of zero"


def test_named_thresholds(library):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([88.7, 89.0, -104.0, -1.0, 0.0, inf, -inf, nan])
    assert torch.isfinite(apply(library, "exp", x[:1])).all() and apply(library, "exp", x[1:2]).item() == inf
    assert apply(library, "exp", x[2:3]).item() == 0.0
    log = apply(library, "log", x)
    assert log[3].isnan() and log[4].item() == -inf and log[5].item() == inf and log[7].isnan()
    assert apply(library, "tanh", torch.tensor([20.0, -20.0, inf, -inf])).tolist() == [1.0, -1.0, 1.0, -1.0]
    assert apply(library, "erf", torch.tensor([inf, -inf])).tolist() == [1.0, -1.0]


UNDERFLOW_HARNESS = r"""
#include <cfenv>
// Was the underflow flag raised while applying f to in[0..n)? (The flag is what marks the slow
// path: an x86 core takes a microcode assist for every vector whose result underflows.)
template <class F> static int tj_underflows(F f, const float* in, float* out, long long n) {
  std::feclearexcept(FE_ALL_EXCEPT);
  for (long long i = 0; i < n; ++i) out[i] = f(in[i]);
  return std::fetestexcept(FE_UNDERFLOW) != 0;
}
extern "C" int underflows_exp(const float* in, float* out, long long n) {
  return tj_underflows([](float x) { return tj_expf(x); }, in, out, n);
}
extern "C" int underflows_sigmoid(const float* in, float* out, long long n) {
  return tj_underflows([](float x) { return tj_sigmoidf(x); }, in, out, n);
}
"""


@pytest.mark.parametrize("op", ["exp", "sigmoid"])
def test_results_that_round_to_zero_do_not_underflow(library, op):
    """exp of the -FLT_MAX a masked softmax adds (and sigmoid far below 0) is exactly 0 without
    computing an underflowing product: the underflow took a microcode assist per vector, ten
    times the time of the whole softmax."""
    values = torch.tensor([-3.4028235e38, -1e30, -1e4, -200.0, -104.5] * 8)
    out = torch.empty_like(values)
    flagged = getattr(library, f"underflows_{op}")(ctypes.c_void_p(values.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                                                   ctypes.c_longlong(values.numel()))
    assert torch.equal(out, EAGER[op](values))
    assert not flagged, f"{op} underflowed on inputs whose result is exactly 0"


# native here is AVX-512 (masked selects); haswell is AVX2, what CI machines may have.
@pytest.mark.parametrize("march", ["-march=native", "-march=haswell"])
def test_every_function_vectorises(march):
    """g++ must report the loop calling each function as vectorised, with everything inlined."""
    lines = [VECTOR_MATH]
    loop_lines = {}
    for op, function in FLOAT32_FUNCTIONS.items():
        lines.append(f'extern "C" void apply_{op}(const float* __restrict in, float* __restrict out, long n) {{')
        loop_lines[sum(text.count("\n") + 1 for text in lines) + 1] = op
        lines.append(f"  for (long i = 0; i < n; ++i) out[i] = {function}(in[i]);\n}}")
    source = "\n".join(lines) + "\n"
    report = vectorisation_report(source, "g++", missed=True, extra_flags=(march,))
    missing = [op for line, op in loop_lines.items() if line not in vectorised_lines(report)]
    assert not missing, f"not vectorised: {missing}\n{report[-3000:]}"


def test_generated_kernel_inlines_and_vectorises():
    """A float32 sigmoid kernel from the code generator: same values as eager, inner loop vectorised."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorjit.codegen import compile_aten_graph
    from tensorjit.codegen.decomp import decompositions

    def fn(x):
        return x.sigmoid() * 1.01 + 0.1

    x = torch.randn(1024, 1024) * 10
    compiled = compile_aten_graph(make_fx(fn, decomposition_table=decompositions())(x), [x])
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (tuple, list)) else result, fn(x))
    assert "tj_sigmoid<float>" in compiled.source
    report = vectorisation_report(compiled.source, "g++")
    kernel_line = compiled.source[:compiled.source.index('extern "C"')].count("\n") + 1
    assert any(line > kernel_line for line in vectorised_lines(report)), report[-3000:]


def test_float64_kernels_keep_std():
    """Only float32 goes to the tj_ functions: a float64 kernel still matches eager to double precision."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorjit.codegen import compile_aten_graph
    from tensorjit.codegen.decomp import decompositions

    def fn(x):
        return torch.erf(x).exp() + x.sigmoid() + x.tanh() + x.abs().log1p() + x.expm1()

    x = torch.randn(64, 32, dtype=torch.float64)
    compiled = compile_aten_graph(make_fx(fn, decomposition_table=decompositions())(x), [x])
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (tuple, list)) else result, fn(x), rtol=1e-11, atol=1e-15)
    assert "<double>" in compiled.source and "<float>(" not in compiled.source.split('extern "C" void kernel')[-1]


# -- sin and cos: glibc's libmvec through SIMD declarations (vector_math.LIBMVEC) ----------------

needs_libmvec = pytest.mark.skipif(toolchain_options() == ((), ()), reason="no libmvec on this machine")

TRIG_HARNESS = r"""
extern "C" void trig_float(const float* __restrict in, float* __restrict sin_out, float* __restrict cos_out,
                           long n) {
  for (long i = 0; i < n; ++i) sin_out[i] = std::sin(in[i]);
  for (long i = 0; i < n; ++i) cos_out[i] = std::cos(in[i]);
}
extern "C" void trig_double(const double* __restrict in, double* __restrict sin_out,
                            double* __restrict cos_out, long n) {
  for (long i = 0; i < n; ++i) sin_out[i] = std::sin(in[i]);
  for (long i = 0; i < n; ++i) cos_out[i] = std::cos(in[i]);
}
"""


def trig_source() -> str:
    return "#include <cmath>\n" + VECTOR_MATH + TRIG_HARNESS


@pytest.fixture(scope="module")
def trig_library():
    flags, libraries = toolchain_options()
    directory = tempfile.mkdtemp(prefix="tj_trig_")
    path = os.path.join(directory, "trig.so")
    subprocess.run(["g++", *FLAGS, *flags, "-x", "c++", "-", "-o", path, *libraries], input=trig_source(),
                   text=True, check=True)
    return ctypes.CDLL(path)


def ulp_error(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of the spacing of got's dtype at the exact value."""
    rounded = exact.to(got.dtype).abs()
    spacing = (torch.nextafter(rounded, torch.full_like(rounded, float("inf"))) - rounded).to(exact.dtype)
    return ((got.to(exact.dtype) - exact) / spacing).abs()


@needs_libmvec
@pytest.mark.parametrize("dtype,bound", [(torch.float32, 2.5), (torch.float64, 1.0)])
def test_libmvec_sin_cos_accuracy(trig_library, dtype, bound):
    """float32 through libmvec within 2.5 ulp of exact; float64 stays std::sin, within 1 ulp of eager."""
    pieces = [torch.linspace(-10, 10, 200_001, dtype=torch.float64), torch.randn(100_000, dtype=torch.float64) * 1e4,
              torch.logspace(-30, 30, 100_001, dtype=torch.float64),  # tiny arguments and the large-argument path
              torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4e38, -3.4e38],
                           dtype=torch.float64)]
    x = torch.cat(pieces).to(dtype)
    sin_out, cos_out = torch.empty_like(x), torch.empty_like(x)
    function = trig_library.trig_float if dtype == torch.float32 else trig_library.trig_double
    function(*(ctypes.c_void_p(t.data_ptr()) for t in (x, sin_out, cos_out)), ctypes.c_long(x.numel()))
    exact = x.to(torch.float64) if dtype == torch.float32 else x
    for name, got, reference in (("sin", sin_out, torch.sin), ("cos", cos_out, torch.cos)):
        want = reference(exact)  # float32: double-precision reference; float64: eager's own (1 ulp)
        finite = torch.isfinite(want)
        assert torch.equal(got[~finite].isnan(), want[~finite].isnan()), f"{name}: NaN/inf handling"
        worst = ulp_error(got[finite], want[finite]).max().item()
        assert worst <= bound, f"{name} {dtype}: {worst} ulp"
    zero = x == 0
    assert torch.equal(torch.signbit(sin_out[zero]), torch.signbit(x[zero])), "sin keeps the sign of zero"


@needs_libmvec
@pytest.mark.parametrize("march", ["-march=native", "-march=haswell"])
def test_libmvec_sin_cos_loops_vectorise(march):
    report = vectorisation_report(trig_source(), "g++", missed=True, extra_flags=(march,))
    start = trig_source().count("\n", 0, trig_source().index("extern \"C\" void trig_float"))
    loop_lines = {start + offset for offset in (3, 4)}  # the float loops (double stays scalar libm)
    assert loop_lines <= vectorised_lines(report), f"not vectorised: {sorted(loop_lines - vectorised_lines(report))}"


def test_long_fused_chain_vectorises():
    """Fifty fused ops with relu between the transcendentals (bench/cpu_bench.py's chain): selects
    are blends, so g++ finds no control flow in the loop. With ternaries this loop stayed
    scalar and ran 14x slower (123 ms against 8.6 ms on 1024x1024)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorjit.codegen import compile_aten_graph
    from tensorjit.codegen.decomp import decompositions

    def fn(x):
        for step in range(10):
            x = (x * 1.0001 + 0.001)
            x = (torch.sigmoid, torch.tanh, torch.exp)[step % 3](x)
            x = torch.relu(x) - 0.0005
        return x

    x = torch.randn(256, 1024)
    compiled = compile_aten_graph(make_fx(fn, decomposition_table=decompositions())(x), [x])
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (tuple, list)) else result, fn(x))
    lines = compiled.source.splitlines()
    starts = [n for n, text in enumerate(lines, 1) if text.startswith('extern "C" void kernel')]
    assert len(starts) == 1, f"{len(starts)} kernels: the chain should fuse"
    vectorised = vectorised_lines(vectorisation_report(compiled.source, "g++"))
    for start, end in zip(starts, starts[1:] + [len(lines) + 1]):
        assert any(start < line < end for line in vectorised), f"{lines[start - 1]} did not vectorise"


@pytest.mark.skipif("avx512f" not in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else True,
                    reason="needs AVX-512")
def test_kernels_use_the_full_vector_width_on_avx512():
    """g++ tunes recent Intel cores for 256-bit vectors; the kernels ask for the full 512 bits
    (a ViT layer's GELU ran 1.5x faster)."""
    source = VECTOR_MATH + '\nextern "C" void apply(const float* __restrict in, float* __restrict out, long n) {\n' \
        "  for (long i = 0; i < n; ++i) out[i] = tj_erff(in[i]);\n}\n"
    report = vectorisation_report(source, "g++")
    assert "loop vectorized using 64 byte vectors" in report, report[-2000:]
