"""Vectorisable float32 transcendental functions, as C++ source for the emitter's prelude.

Takes nothing; holds `VECTOR_MATH`, a string of `static inline` C++ functions
(`tj_expf`, `tj_logf`, `tj_log1pf`, `tj_expm1f`, `tj_tanhf`, `tj_sigmoidf`,
`tj_erff`), `FLOAT32_FUNCTIONS`, the map from our unary op names to them, and
`DISPATCH`, templates `tj_exp<T>(x)`... that pick them for float and std:: otherwise.

sin and cos come from glibc's libmvec where the machine has it (`LIBMVEC`).

Why: we compile without -ffast-math to keep IEEE semantics, so g++ will not
vectorise a loop that calls `std::exp` (libmvec is only used under fast-math)
and math-heavy kernels run 3-5x slower than eager's SLEEF code. These functions
are branch-free (special cases are selects, bit casts instead of frexp/ldexp,
polynomials instead of table look-ups), so `g++ -O3` inlines and vectorises a
loop calling them. Each reduces its argument Cody-Waite style and evaluates a
short polynomial, then patches +-0, +-inf, NaN, overflow and underflow with
bit-mask selects. Max errors against double-precision libm rounded to float, measured
by tests/codegen/cpp/test_vector_math.py with and without FMA: 1 ulp exp/log/log1p/erf,
2 expm1/tanh/sigmoid; the tests assert ACCURACY_ULP.
"""

from __future__ import annotations

FLOAT32_FUNCTIONS = {"exp": "tj_expf", "log": "tj_logf", "log1p": "tj_log1pf", "expm1": "tj_expm1f",
                     "tanh": "tj_tanhf", "sigmoid": "tj_sigmoidf", "erf": "tj_erff"}

# The bound each function is tested against (in units in the last place of the float result).
ACCURACY_ULP = {"exp": 2, "log": 2, "log1p": 2, "expm1": 2, "tanh": 2, "sigmoid": 2, "erf": 2}

BIT_CASTS = r"""
#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define TJ_HAVE_BIT_CAST 1
#endif
#endif
static inline uint32_t tj_bits(float x) {
#ifdef TJ_HAVE_BIT_CAST
  return __builtin_bit_cast(uint32_t, x);
#else
  uint32_t i; std::memcpy(&i, &x, 4); return i;
#endif
}
static inline float tj_float(uint32_t i) {
#ifdef TJ_HAVE_BIT_CAST
  return __builtin_bit_cast(float, i);
#else
  float x; std::memcpy(&x, &i, 4); return x;
#endif
}
// A fused multiply-add where the hardware has one (one rounding); a*b+c elsewhere, where a
// libm fmaf call would stop vectorisation. g++'s own contraction is off (-ffp-contract=off, compiler.FLAGS).
static inline float tj_fmaf(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
static inline float tj_copysignf(float magnitude, float sign) {
  return tj_float((tj_bits(magnitude) & 0x7fffffffu) | (tj_bits(sign) & 0x80000000u));
}
// cond ? a : b through bit masks, used for every float select here. A ternary lets g++ sink
// the computation of one side into a branch, and without AVX-512 masking it will not
// speculate the (trapping) float operations back out, so the loop does not vectorise
// ("control flow in loop"); a blend of both values cannot be sunk.
static inline float tj_selectf(bool cond, float a, float b) {
  const uint32_t mask = 0u - (uint32_t)cond;
  return tj_float((tj_bits(a) & mask) | (tj_bits(b) & ~mask));
}
static inline float tj_absf(float x) { return tj_float(tj_bits(x) & 0x7fffffffu); }
"""

EXP = r"""
// p * 2^n for n in [-150, 129], in two steps so both factors are normal floats: the
// first product is exact and the second rounds once, also into the denormal range.
static inline float tj_scale2f(float p, int32_t n) {
  const int32_t n1 = n >> 1;
  const int32_t n2 = n - n1;
  return p * tj_float((uint32_t)(n1 + 127) << 23) * tj_float((uint32_t)(n2 + 127) << 23);
}
// exp(r) - 1 for |r| <= ln2/2 (+ slack): Taylor to r^7, truncation error < 1e-8 relative.
static inline float tj_expm1_reduced(float r) {
  float q = tj_fmaf(r, 1.98412698e-4f, 1.38888889e-3f);
  q = tj_fmaf(q, r, 8.33333333e-3f);
  q = tj_fmaf(q, r, 4.16666667e-2f);
  q = tj_fmaf(q, r, 1.66666667e-1f);
  q = tj_fmaf(q, r, 0.5f);
  return tj_fmaf(r * r, q, r);
}
// x = k ln2 + r with k = round(x / ln2): the shifter's low mantissa bits hold k.
// ln2 is split so that k * ln2_hi is exact (ln2_hi has 9 trailing zero bits).
struct tj_reduced { float r; int32_t k; };
static inline tj_reduced tj_reduce_ln2(float x) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23
  const float t = tj_fmaf(x, 1.44269504f, shifter);
  const float k = t - shifter;
  float r = tj_fmaf(-k, 0.693145751953125f, x);
  r = tj_fmaf(-k, 1.42860677e-6f, r);
  return {r, (int32_t)(tj_bits(t) - tj_bits(shifter))};
}
static inline float tj_expf(float x) {
  // Clamp so that k stays in [-150, 129]; the top end still overflows to inf. Below -104 the
  // result rounds to 0: it is selected, not computed from a clamped input, because underflowing
  // to zero takes a microcode assist per vector on x86 (a masked softmax's -FLT_MAX entries made
  // it ten times slower).
  const bool zero = x < -104.0f;
  const float xc = tj_selectf((x != x) | zero, 0.0f, tj_selectf(x > 89.0f, 89.0f, x));
  const tj_reduced red = tj_reduce_ln2(xc);
  const float y = tj_scale2f(1.0f + tj_expm1_reduced(red.r), red.k);
  return tj_selectf(x != x, x, tj_selectf(zero, 0.0f, y));
}
static inline float tj_expm1f(float x) {
  // expm1(x) = 2^k (e + 1) - 1 = fma(2^k, e, 2^k - 1), with 2^k - 1 exact for -24 <= k <= 24.
  const float xc = tj_selectf(x != x, 0.0f, tj_selectf(x < -30.0f, -30.0f, tj_selectf(x > 89.0f, 89.0f, x)));
  const tj_reduced red = tj_reduce_ln2(xc);
  const float e = tj_expm1_reduced(red.r);
  const int32_t k = red.k > 127 ? 127 : red.k;  // k = 128 only where the result is ~2^128: scale after
  const float two_k = tj_float((uint32_t)(k + 127) << 23);
  const float y = tj_fmaf(two_k, e, two_k - 1.0f) * tj_selectf(red.k > 127, 2.0f, 1.0f);
  return tj_selectf((x != x) | (x == 0.0f), x, y);  // x == 0 keeps the sign of zero
}
static inline float tj_sigmoidf(float x) {
  // With e = exp(-|x|) <= 1 nothing overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below,
  // which stays accurate down into the denormals where 1 / (1 + exp(-x)) would give 0.
  const float e = tj_expf(-tj_absf(x));
  return tj_selectf(x >= 0.0f, 1.0f, e) / (1.0f + e);
}
static inline float tj_tanhf(float x) {
  // tanh|x| = t / (t + 2) with t = expm1(2|x|): no cancellation near 0; |x| > 9.1 rounds to 1.
  const float a = tj_absf(x);
  const float t = tj_expm1f(a + a);
  const float y = tj_selectf(a > 9.1f, 1.0f, t / (t + 2.0f));
  return tj_copysignf(y, x);
}
"""

LOG = r"""
// log(1 + f) + k ln2 + c for f in [sqrt(1/2) - 1, sqrt(2) - 1]: with s = f / (2 + f),
// log(1 + f) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + R(s^2)), R the atanh Taylor tail
// (|s| <= 0.172, so terms past z^4 are below 1e-10). c corrects a rounding in f's source.
static inline float tj_log_kernel(float f, float k, float c) {
  const float s = f / (2.0f + f);
  const float z = s * s;
  float R = tj_fmaf(z, 0.222222222f, 0.285714286f);
  R = tj_fmaf(R, z, 0.4f);
  R = tj_fmaf(R, z, 0.666666667f);
  R = R * z;
  const float half_f2 = 0.5f * f * f;
  const float tail = tj_fmaf(s, half_f2 + R, tj_fmaf(k, 9.05800061e-6f, c));
  return tj_fmaf(k, 0.693138123f, tail - half_f2 + f);
}
// Splits u > 0 as 2^k * m with m in [sqrt(1/2), sqrt(2)): k through the biased exponent of
// u * sqrt(2), m by putting the mantissa back under the exponent of sqrt(1/2).
static inline int32_t tj_log_exponent(float u) {
  return (int32_t)((tj_bits(u) + (0x3f800000u - 0x3f3504f3u)) >> 23) - 127;
}
static inline float tj_log_mantissa(float u) {
  return tj_float(((tj_bits(u) + (0x3f800000u - 0x3f3504f3u)) & 0x7fffffu) + 0x3f3504f3u);
}
static inline float tj_logf(float x) {
  const bool denormal = x < 1.17549435e-38f;
  const float u = tj_selectf(denormal, x * 8388608.0f, x);  // 2^23 lifts denormals into the normal range
  const float k = (float)(tj_log_exponent(u) - (denormal ? 23 : 0));
  const float y = tj_log_kernel(tj_log_mantissa(u) - 1.0f, k, 0.0f);
  float result = tj_selectf(x == 0.0f, -std::numeric_limits<float>::infinity(), y);
  result = tj_selectf(x < 0.0f, std::numeric_limits<float>::quiet_NaN(), result);
  return tj_selectf((x > 3.40282347e38f) | (x != x), x, result);  // +inf, NaN
}
static inline float tj_log1pf(float x) {
  const float u = 1.0f + x;
  const int32_t k = tj_log_exponent(u);
  // The rounding error of 1 + x, relative to u (log(u + c) ~ log(u) + c / u); negligible past 2^25.
  const float c = tj_selectf(k >= 25, 0.0f, tj_selectf(k >= 2, 1.0f - (u - x), x - (u - 1.0f)) / u);
  const float y = tj_log_kernel(tj_log_mantissa(u) - 1.0f, (float)k, c);
  float result = tj_selectf(x == -1.0f, -std::numeric_limits<float>::infinity(), y);
  result = tj_selectf(x < -1.0f, std::numeric_limits<float>::quiet_NaN(), result);
  return tj_selectf((x > 3.40282347e38f) | (x == 0.0f) | (x != x), x, result);  // +inf, NaN, +-0 with its sign
}
"""

ERF = r"""
// erf: |x| < 1: x P(x^2), P a least-squares fit on Chebyshev nodes with float coefficients;
// 1 <= |x| <= 4: 1 - exp(Q(|x|)), Q a degree-6 polynomial fitting log(erfc) (weighted by erfc,
// the size of its error in the result); past 3.92 erf rounds to 1. Q's values lie in
// [-17.4, -1.8], so its exp needs no overflow, underflow or NaN handling of its own:
// k in [-26, -2] makes 2^k one normal float. Both sides cost ~35 vector operations together.
static inline float tj_erff(float x) {
  const float a0 = tj_absf(x);
  const float a = tj_selectf(a0 > 4.0f, 4.0f, a0);  // NaN passes through
  const float s = a * a;
  float p = tj_fmaf(s, 7.87752e-05f, -8.01824150e-04f);
  p = tj_fmaf(p, s, 5.18939132e-03f);
  p = tj_fmaf(p, s, -2.68544964e-02f);
  p = tj_fmaf(p, s, 1.12836070e-01f);
  p = tj_fmaf(p, s, -3.76126289e-01f);
  // x * 2/sqrt(pi) with the constant split in two floats: the small part rides with the tail.
  const float small = tj_fmaf(a, 1.12837923f, tj_fmaf(a * s, p, a * -5.86353834e-8f));
  float q = tj_fmaf(a, 1.855740702e-04f, -2.939607948e-03f);
  q = tj_fmaf(q, a, 2.180531994e-02f);
  q = tj_fmaf(q, a, -1.030373722e-01f);
  q = tj_fmaf(q, a, -6.382256746e-01f);
  q = tj_fmaf(q, a, -1.127040029e+00f);
  q = tj_fmaf(q, a, -3.537187586e-04f);
  const tj_reduced red = tj_reduce_ln2(q);
  const float two_k = tj_float((uint32_t)(red.k + 127) << 23);
  const float large = tj_fmaf(-two_k, tj_expm1_reduced(red.r), 1.0f - two_k);
  return tj_copysignf(tj_selectf(a < 1.0f, small, large), x);
}
"""

LIBMVEC = r"""
#if defined(TJ_LIBMVEC) && defined(__GNUC__) && !defined(__clang__)
// glibc's libmvec has SIMD sinf and cosf (max error 2 ulp, measured by
// tests/codegen/cpp/test_vector_math.py; large arguments take its exact scalar path). Its
// double versions are left out: 3 ulp, where eager's double sin is within 1.
// <math.h> declares them only under -ffast-math; declared here, g++ vectorises loops calling
// std::sin and std::cos. compiler.toolchain_options defines TJ_LIBMVEC and links libmvec.
extern "C" {
__attribute__((simd("notinbranch"))) float sinf(float) noexcept;
__attribute__((simd("notinbranch"))) float cosf(float) noexcept;
}
#endif
"""

# One name per op for the emitter's templates: float32 goes to the tj_ function, every other
# type keeps the std:: expression it had (same result type, e.g. double for integers).
GENERIC = {"exp": "std::exp(x)", "log": "std::log(x)", "log1p": "std::log1p(x)", "expm1": "std::expm1(x)",
           "tanh": "std::tanh(x)", "sigmoid": "(T)1 / ((T)1 + std::exp(-x))", "erf": "std::erf(x)"}


def dispatch_source() -> str:
    lines = []
    for op, function in FLOAT32_FUNCTIONS.items():
        lines.append(f"template <class T> static inline auto tj_{op}(T x) {{ return {GENERIC[op]}; }}")
        lines.append(f"template <> inline auto tj_{op}<float>(float x) {{ return {function}(x); }}")
    return "\n".join(lines) + "\n"


VECTOR_MATH = LIBMVEC + BIT_CASTS + EXP + LOG + ERF
DISPATCH = dispatch_source()
