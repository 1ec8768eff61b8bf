"""Compiling generated C++ into a shared library, cached on disk.

One library per graph (one compiler invocation). The cache lives in config.cache_dir or
~/.cache/tensorjit/cpp (created with mode 0700); an entry is named by the SHA-256 of the
source, the compiler's version and the flags, written to a temporary file and renamed
into place (atomic, so concurrent processes never load a partial library), and a library
that fails to load is deleted and rebuilt.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings

# -fno-math-errno lets the compiler call vectorised math (libmvec) inside the loops; the
# results are the same functions, only errno is not set, which nothing reads.
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]


@functools.lru_cache(maxsize=None)
def find_compiler(preferred: str | None = None) -> str | None:
    for name in ([preferred] if preferred else []) + ["g++", "clang++", "c++"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def cache_directory(configured: str | None) -> str:
    root = os.path.join(configured or os.path.join(os.path.expanduser("~"), ".cache", "tensorjit"), "cpp")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def library_path(source: str, compiler: str, cache_dir: str | None) -> str:
    key = hashlib.sha256("\0".join([source, compiler_version(compiler), *FLAGS]).encode()).hexdigest()[:32]
    return os.path.join(cache_directory(cache_dir), f"k{key}.so")


def load_library(source: str, compiler: str, cache_dir: str | None) -> ctypes.CDLL:
    path = library_path(source, compiler, cache_dir)
    directory = os.path.dirname(path)
    if os.path.exists(path):
        try:
            return ctypes.CDLL(path)
        except OSError:
            os.unlink(path)  # corrupt or partial: rebuild
    with tempfile.TemporaryDirectory(dir=directory) as work:
        cpp = os.path.join(work, "kernels.cpp")
        with open(cpp, "w") as f:
            f.write(source)
        built = os.path.join(work, "kernels.so")
        result = subprocess.run([compiler, *FLAGS, cpp, "-o", built], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"C++ compiler failed:\n{result.stderr[-2000:]}")
        os.replace(built, path)
    return ctypes.CDLL(path)


_warned = False


def warn_no_compiler() -> None:
    global _warned
    if not _warned:
        warnings.warn("tensorjit: no C++ compiler found (g++, clang++, c++); CPU graphs run through ATen")
        _warned = True
