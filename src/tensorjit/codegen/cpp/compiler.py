"""The C++ toolchain: find a compiler, build a shared library through the disk cache, load it.

Takes C++ source and a Config; `load_library` returns a ctypes.CDLL, or raises
CompilerMissing (the caller warns once and runs ATen instead).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import shutil
import subprocess

from ...runtime.disk_cache import get_or_build

FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
         "-fno-math-errno", "-w", "-ffp-contract=off")
"""-ffp-contract=off: eager rounds after every operation; g++ (12, in C++ modes too) otherwise fuses
a*b + c into one rounding, so `x*y + z*w` was no longer `z*w + x*y` to the last bit (argmax of
`v + v.flip(0)` then broke eager's exact ties differently; inductor passes the flag too). Where a
helper wants a fused multiply-add it says so (vector_math.tj_fmaf).

-mprefer-vector-width=512: g++ tunes recent Intel cores for 256-bit vectors; on AVX-512 machines
the full width ran the GELU (erf) kernel of a ViT layer 1.5x faster (262 -> 174 us) and an
attention softmax group 7.5 -> 5.0 us, as inductor's 512-bit code does. Without AVX-512 it
changes nothing."""


class CompilerMissing(RuntimeError):
    pass


def find_compiler(configured: str | None) -> str:
    for candidate in ([configured] if configured else ["g++", "clang++", "c++"]):
        path = shutil.which(candidate)
        if path:
            return path
    raise CompilerMissing(f"no C++ compiler found (tried {configured or 'g++, clang++, c++'})")


@functools.lru_cache(maxsize=8)
def compiler_version(compiler: str) -> str:
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    return result.stdout.splitlines()[0] if result.stdout else compiler


@functools.lru_cache(maxsize=1)
def machine_identity() -> str:
    """-march=native code is only valid on the same kind of CPU: part of the cache key."""
    model = platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("model name", "flags")):
                model += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return model


# glibc's SIMD versions of these (x86-64 vector ABI names: b/c/d/e = SSE/AVX/AVX2/AVX-512).
LIBMVEC_SYMBOLS = tuple(f"_ZGV{isa}N{lanes * width}v_{name}"
                        for isa, lanes in (("b", 1), ("c", 2), ("d", 2), ("e", 4))
                        for name, width in (("sinf", 4), ("cosf", 4)))


@functools.lru_cache(maxsize=1)
def toolchain_options() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compile flags, link flags) beyond FLAGS for what this machine's C library offers.

    With glibc's libmvec (x86-64 Linux), -DTJ_LIBMVEC makes the prelude declare SIMD
    versions of float sin and cos (vector_math.LIBMVEC), so g++ vectorises loops that call them;
    elsewhere those loops stay scalar, still correct.
    """
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return (), ()
    try:
        library = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return (), ()
    if not all(hasattr(library, symbol) for symbol in LIBMVEC_SYMBOLS):
        return (), ()
    return ("-DTJ_LIBMVEC",), ("-l:libmvec.so.1",)


def build(source: str, compiler: str, output: str) -> None:
    flags, libraries = toolchain_options()
    command = [compiler, *FLAGS, *flags, "-x", "c++", "-", "-o", output, *libraries]
    result = subprocess.run(command, input=source, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"C++ compile failed:\n{result.stderr[-4000:]}")


def vectorisation_report(source: str, compiler: str | None = None, missed: bool = False,
                         extra_flags: tuple[str, ...] = ()) -> str:
    """g++'s -fopt-info-vec report for source compiled with our FLAGS (debugging aid, builds nothing).

    Lines read `<stdin>:LINE:COL: optimized: loop vectorized using 64 byte vectors`; with
    missed=True also the reasons loops were not vectorised; extra_flags go after FLAGS (e.g.
    "-march=haswell" to see what an AVX2 machine would get). Usage:
    `print(vectorisation_report(compiled.source))` on a runner from compile_cpu_graph.
    """
    options = ["-fopt-info-vec-optimized"] + (["-fopt-info-vec-missed"] if missed else [])
    flags, libraries = toolchain_options()
    command = [find_compiler(compiler), *FLAGS, *flags, *extra_flags, *options, "-x", "c++", "-", "-o", os.devnull,
               *libraries]
    result = subprocess.run(command, input=source, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"C++ compile failed:\n{result.stderr[-4000:]}")
    return result.stderr


def vectorised_lines(report: str) -> set[int]:
    """Source line numbers of the loops a vectorisation_report says were vectorised."""
    return {int(line.split(":")[1]) for line in report.splitlines() if "loop vectorized" in line}


def load_library(source: str, config) -> ctypes.CDLL:
    compiler = find_compiler(getattr(config, "cpp_compiler", None))
    key = (source, compiler_version(compiler), FLAGS, toolchain_options(), machine_identity())
    cache_dir = getattr(config, "cache_dir", None)
    path = get_or_build(key, lambda out: build(source, compiler, out), cache_dir=cache_dir)
    try:
        return ctypes.CDLL(path)
    except OSError:
        path = get_or_build(key, lambda out: build(source, compiler, out), cache_dir=cache_dir, rebuild=True)
        return ctypes.CDLL(path)
