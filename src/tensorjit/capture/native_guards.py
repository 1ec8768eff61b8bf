"""Tensor guards checked in C++: one call tests every guarded tensor of an entry.

A guard function checks each tensor it reads (type, dtype, device, requires_grad,
sizes, strides). In Python that is five getters of torch's bindings per tensor,
about 300 ns (docs/performance.md), 3,900 instructions: two thirds of a call's guard
time on models with hundreds of parameters and buffers, and of a small module's
(the 4-layer MLP of bench/overhead.py: 34k of its guards' 56k instructions), whose
metadata can change with no event Python sees (`p.data = ...`, `requires_grad_()`
bump no version and leave every dict as it was), so each must be read on every
call. Here the check reads them from the C++ tensor: `match(spec, (t0, t1, ...))`,
about 10 ns a tensor, one call of ~1,000 instructions. The same entries test their
modules' hook tables empty in one call too (`empty_entries`).

The extension is built once per machine and torch version with the C++ toolchain
of the CPU backend, into the disk cache (`runtime/disk_cache.get_or_build`). Every
entry with `MIN_TENSORS` or more tensor guards takes it where it is built (a
dlopen where the cache holds it); what starts a build (seconds of g++ over torch's
headers, in a background thread: nothing waits for it) is an entry with
`BUILD_TENSORS` or more (`tensorjit.compile` of a module with that much state starts
it before capture: `prepare`), or a smaller entry called `HOT_CALLS` times (api.py's
fast path counts), so that a process that compiles and calls a few small functions
(the test suite's subprocesses, each with a cache of its own) never builds it. An
entry captured before it is built checks its tensors in Python until the build is
done, then takes the native check at its next call (`when_built`,
`CompiledGuards.settle`). Without a compiler, or where the build or import fails, the
guards stay Python; one log line says why.

The same extension (one build) carries `storages_unshared`, the aliasing guard of graphs that
write their inputs (a densenet121 training step's 728 tensors: 0.55 ms in Python on the H100's
host), and the C++ of the runtime modules in `RUNTIME_PARTS` (gradient_lease.py, buffers.py): the
runtime cannot build an extension of its own without importing upwards, so each is handed the
module when loaded (`provide`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import subprocess
import sys
import sysconfig
import threading
import weakref
from typing import Callable

import torch

from .. import logs
from ..runtime import buffers, gradient_lease
from ..runtime.disk_cache import cache_key, cache_root, get_or_build, is_valid

MIN_TENSORS = 1
"""Tensor guards an entry needs to take the native check where it is built. One tensor checked in
Python costs about 3,900 instructions, the native call about 1,000 plus 150 a tensor: it pays
from the first (docs/performance.md, "Per-call overhead: small modules")."""

BUILD_TENSORS = 64
"""Tensor guards of an entry (or parameters and buffers of a module given to `tensorjit.compile`)
that start the build at capture: below, the Python checks cost at most ~20 us a call, and a
build of seconds would not pay in a short process."""

HOT_CALLS = 1000
"""Calls of a compiled function's first entry, checked in Python because the extension was not
built, after which the build starts (in the background; the fast path stops counting)."""

_GUARDS_SOURCE = r"""
#include <Python.h>
#include <algorithm>
#include <memory>
#include <vector>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tensorjit_common {

// A tuple of ints appended to `out`; false (a Python error set where one was raised) otherwise.
bool read_ints(PyObject* tuple, std::vector<int64_t>& out) {
  if (!PyTuple_Check(tuple)) return false;
  out.reserve(out.size() + PyTuple_GET_SIZE(tuple));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
    long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (value == -1 && PyErr_Occurred()) return false;
    out.push_back(value);
  }
  return true;
}

}  // namespace tensorjit_common

// the runtime's functions (RUNTIME_PARTS)

namespace {

struct Expected {
  PyTypeObject* type;  // held by the spec's tuple
  at::ScalarType dtype;
  c10::Device device;
  bool requires_grad;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

struct Spec {
  std::vector<Expected> items;
  PyObject* held;
};

const char* kName = "tensorjit.tensor_spec";

void destroy(PyObject* capsule) {
  auto* spec = static_cast<Spec*>(PyCapsule_GetPointer(capsule, kName));
  Py_XDECREF(spec->held);
  delete spec;
}

// spec(((type, dtype, device, requires_grad, sizes, strides), ...)) -> capsule
PyObject* spec(PyObject*, PyObject* items) {
  if (!PyTuple_Check(items)) {
    PyErr_SetString(PyExc_TypeError, "spec() takes a tuple");
    return nullptr;
  }
  auto made = std::make_unique<Spec>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); ++i) {
    PyObject* item = PyTuple_GET_ITEM(items, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 6 || !PyType_Check(PyTuple_GET_ITEM(item, 0)) ||
        !THPDtype_Check(PyTuple_GET_ITEM(item, 1)) || !THPDevice_Check(PyTuple_GET_ITEM(item, 2)) ||
        !PyBool_Check(PyTuple_GET_ITEM(item, 3))) {
      PyErr_SetString(PyExc_TypeError, "spec() items are (type, dtype, device, bool, sizes, strides)");
      return nullptr;
    }
    Expected expected{reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(item, 0)),
                      reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(item, 1))->scalar_type,
                      reinterpret_cast<THPDevice*>(PyTuple_GET_ITEM(item, 2))->device,
                      PyTuple_GET_ITEM(item, 3) == Py_True, {}, {}};
    if (!tensorjit_common::read_ints(PyTuple_GET_ITEM(item, 4), expected.sizes) ||
        !tensorjit_common::read_ints(PyTuple_GET_ITEM(item, 5), expected.strides)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "sizes and strides are tuples of ints");
      return nullptr;
    }
    made->items.push_back(std::move(expected));
  }
  Py_INCREF(items);
  made->held = items;
  PyObject* capsule = PyCapsule_New(made.get(), kName, destroy);
  if (capsule != nullptr) made.release();
  else Py_DECREF(items);
  return capsule;
}

bool same(c10::IntArrayRef actual, const std::vector<int64_t>& expected) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < expected.size(); ++i)
    if (actual[i] != expected[i]) return false;
  return true;
}

// match(spec, (tensor, ...)) -> bool: every tensor as its spec item says.
PyObject* match(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "match(spec, tuple)");
    return nullptr;
  }
  auto* spec = static_cast<Spec*>(PyCapsule_GetPointer(args[0], kName));
  if (spec == nullptr) return nullptr;
  PyObject* tensors = args[1];
  if (PyTuple_GET_SIZE(tensors) != static_cast<Py_ssize_t>(spec->items.size())) Py_RETURN_FALSE;
  try {
    for (size_t i = 0; i < spec->items.size(); ++i) {
      const Expected& expected = spec->items[i];
      PyObject* value = PyTuple_GET_ITEM(tensors, i);
      // The spec's types are torch.Tensor and torch.nn.Parameter: an exact match is a THPVariable.
      if (Py_TYPE(value) != expected.type) Py_RETURN_FALSE;
      const at::Tensor& tensor = THPVariable_Unpack(value);
      if (tensor.layout() != c10::kStrided || tensor.scalar_type() != expected.dtype ||
          tensor.device() != expected.device || tensor.requires_grad() != expected.requires_grad ||
          !same(tensor.sizes(), expected.sizes) || !same(tensor.strides(), expected.strides))
        Py_RETURN_FALSE;
    }
  } catch (...) {  // sizes of a tensor without them (nested, symbolic): not the tensor guarded
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// empty_entries(dicts, keys) -> bool: each dict holds each key, its value false (an empty hook table).
PyObject* empty_entries(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "empty_entries(tuple, tuple)");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[0]); ++i) {
    PyObject* dict = PyTuple_GET_ITEM(args[0], i);
    if (!PyDict_CheckExact(dict)) Py_RETURN_FALSE;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args[1]); ++k) {
      PyObject* value = PyDict_GetItemWithError(dict, PyTuple_GET_ITEM(args[1], k));
      if (value == nullptr) {
        if (PyErr_Occurred()) return nullptr;
        Py_RETURN_FALSE;  // the attribute left the instance dict: a miss, as the KeyError in Python
      }
      int truth = PyObject_IsTrue(value);
      if (truth < 0) return nullptr;
      if (truth) Py_RETURN_FALSE;
    }
  }
  Py_RETURN_TRUE;
}

// storages_unshared(written, tensors) -> bool, or None where a tensor has no storage (the Python check
// decides): no tensor of `written` shares its memory with another of `tensors` (which holds them).
PyObject* storages_unshared(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "storages_unshared(tuple, tuple)");
    return nullptr;
  }
  auto pointers_of = [](PyObject* tensors, std::vector<const void*>& out) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensors); ++i) {
      PyObject* value = PyTuple_GET_ITEM(tensors, i);
      if (!THPVariable_Check(value)) return false;
      const at::Tensor& tensor = THPVariable_Unpack(value);
      if (!tensor.has_storage()) return false;
      out.push_back(tensor.storage().data());
    }
    return true;
  };
  std::vector<const void*> all, written;
  try {
    if (!pointers_of(args[1], all) || !pointers_of(args[0], written)) Py_RETURN_NONE;
  } catch (...) {  // a tensor whose storage cannot be read (a wrapper subclass): the Python check decides
    Py_RETURN_NONE;
  }
  std::sort(all.begin(), all.end());
  if (std::adjacent_find(all.begin(), all.end()) == all.end()) Py_RETURN_TRUE;  // the usual case
  for (const void* pointer : written) {
    if (pointer == nullptr) continue;
    auto range = std::equal_range(all.begin(), all.end(), pointer);
    if (range.second - range.first > 1) Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyMethodDef methods[] = {
    {"storages_unshared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(storages_unshared)),
     METH_FASTCALL, "storages_unshared(written, tensors) -> bool or None"},
    // the runtime's methods (RUNTIME_PARTS)

    {"spec", spec, METH_O, "spec(items) -> what match() checks against"},
    {"match", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(match)), METH_FASTCALL,
     "match(spec, tensors) -> bool"},
    {"empty_entries", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(empty_entries)), METH_FASTCALL,
     "empty_entries(dicts, keys) -> bool"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "tensorjit_tensor_guards", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_tensorjit_tensor_guards() { return PyModule_Create(&module); }
"""

RUNTIME_PARTS = (gradient_lease, buffers)
"""Runtime modules whose C++ (`SOURCE`, `METHODS`) the extension carries; each is handed the loaded
module (`provide(module)`)."""

SOURCE = (_GUARDS_SOURCE
          .replace("// the runtime's functions (RUNTIME_PARTS)\n", "".join(part.SOURCE for part in RUNTIME_PARTS), 1)
          .replace("    // the runtime's methods (RUNTIME_PARTS)\n", "".join(part.METHODS for part in RUNTIME_PARTS), 1))
"""The extension: the checks above, and the functions of the runtime's parts (one build)."""

storages_unshared: Callable[[tuple, tuple], bool | None] | None = None
"""The extension's `storages_unshared(written, tensors)` once loaded (capture.guards asks it first:
728 tensors of a densenet121 training step, 0.55 ms in Python on the H100's host)."""

ELIGIBLE_TYPES = (torch.Tensor, torch.nn.Parameter)
"""Tensor classes the native check reads as C++ tensors: their attributes are torch's own getters
(a Python subclass may override them, and keeps its Python check)."""


def eligible(signature) -> bool:
    """Whether a tensor guard's signature (capture.guards.TensorSignature) can be checked natively."""
    return signature.cls in ELIGIBLE_TYPES


class TensorChecks:
    """The built extension: `spec(signatures)` once per guard function, `match` (and `empty_entries`)
    on every call."""

    def __init__(self, module) -> None:
        self.match = module.match
        self.empty_entries = module.empty_entries
        """(dicts, keys) -> whether each dict holds each key with a false value: modules' hook tables."""
        self._spec = module.spec

    def spec(self, signatures) -> object:
        return self._spec(tuple((s.cls, s.dtype, s.device, bool(s.requires_grad), tuple(s.shape), tuple(s.stride))
                                for s in signatures))


class _StandIn:
    """A check with the native one's interface, for emitting its form before it is built."""
    match = empty_entries = None

    @staticmethod
    def spec(signatures) -> None:
        return None


STAND_IN = _StandIn()


def prepare(target, config) -> None:
    """Start building the check, without waiting, when `target` is a module with enough state."""
    if isinstance(target, torch.nn.Module) and getattr(config, "native_guards", True):
        state = itertools.chain(target.parameters(), target.buffers())
        if sum(1 for _ in itertools.islice(state, BUILD_TENSORS)) >= BUILD_TENSORS:
            checker(config)


def for_config(config) -> Callable[[int], "TensorChecks | None"] | None:
    """What capture asks for an entry's native check (capture.guards `native`): (number of tensor
    guards) -> the check where it is built or in the cache, starting the build where the entry has
    `BUILD_TENSORS` or more; None where the check is off or could not be built in this process."""
    if not getattr(config, "native_guards", True):
        return None
    job = _jobs.get(_place(config))
    if job is not None and job.done.is_set() and job.result is None:
        return None  # the build or import failed: logged once, the guards stay Python
    return lambda tensors: checker(config, build=tensors >= BUILD_TENSORS)


def checker(config, wait: bool = False, build: bool = True) -> TensorChecks | None:
    """The native tensor check for `config` (Config.native_guards, its compiler and cache), or None
    while it is being built (wait=True waits for the build) and where it cannot be.
    build=False: load it where the cache holds it, but start no build."""
    if not getattr(config, "native_guards", True):
        return None
    place = _place(config)
    with _lock:
        job = _jobs.get(place)
        if job is None:
            if not build and not _in_cache(place):
                return None
            job = _jobs[place] = _Job()
            job.start(*place)
    if wait:
        job.done.wait()
    return job.result


def requested(config) -> bool:
    """Whether this process has loaded the check for `config`, or started (or failed) its build."""
    return _place(config) in _jobs


def _in_cache(place: tuple) -> bool:
    """Whether the disk cache holds the built check (asked once per place and process: it runs
    the compiler for its version)."""
    if place not in _cached:
        try:
            _cached[place] = _is_built(*_artifact(*place))
        except _FAILURES:
            _cached[place] = False
    return _cached[place]


def when_built(config, callback: Callable[[TensorChecks], None]) -> None:
    """Call `callback(checks)` once the check for `config` is built (on the building thread, or at
    once where it is built already); never where it cannot be built."""
    with _lock:
        job = _jobs.get(_place(config))
        if job is not None and not job.done.is_set():
            job.callbacks.append(callback)
            return
    if job is not None and job.result is not None:
        callback(job.result)


def settle_when_built(config, owner, guards) -> None:
    """Where `guards` (capture.guards.CompiledGuards) were built while the check was not
    (`guards.upgrade`): once it is, hand it to them and have `owner` (the CompiledFunction they
    guard) settle them at its next call. The build's thread only assigns; holds neither alive."""
    if guards.upgrade is None:
        return
    owner_ref, guards_ref = weakref.ref(owner), weakref.ref(guards)

    def built(checks: TensorChecks) -> None:
        owner, guards = owner_ref(), guards_ref()
        if owner is not None and guards is not None:
            guards.native_built = checks
            owner.settle_guards_at_next_call()
    when_built(config, built)


class _Job:
    """Loading the extension: at once where the cache holds it, else built by a background thread."""

    def __init__(self) -> None:
        self.result: TensorChecks | None = None
        self.done = threading.Event()
        self.callbacks: list[Callable[[TensorChecks], None]] = []
        """Who waits for the build without blocking (`when_built`)."""

    def start(self, compiler_name: str | None, cache_dir: str | None) -> None:
        try:
            compiler, key, suffix, cache_dir = _artifact(compiler_name, cache_dir)
            if _is_built(compiler, key, suffix, cache_dir):
                self.load(compiler, key, suffix, cache_dir)  # built before: a dlopen
                return
        except _FAILURES as error:
            self.fail(error)
            self.finish()
            return
        threading.Thread(target=self.load, args=(compiler, key, suffix, cache_dir), daemon=True,
                         name="tensorjit native guards build").start()

    def load(self, compiler: str, key: tuple, suffix: str, cache_dir: str | None) -> None:
        try:
            path = get_or_build(key, lambda out: _build(compiler, out), suffix=suffix, cache_dir=cache_dir)
            module = _import(path)
            self.result = TensorChecks(module)
            global storages_unshared
            storages_unshared = module.storages_unshared
            for part in RUNTIME_PARTS:
                part.provide(module)
        except _FAILURES as error:
            self.fail(error)
        finally:
            self.finish()

    def fail(self, error: BaseException) -> None:
        first_line = (str(error).strip().splitlines() or [""])[0]
        logs.emit("guards", f"tensor guards stay Python: the native check is unavailable "
                            f"({type(error).__name__}: {first_line[:200]})")

    def finish(self) -> None:
        with _lock:
            self.done.set()
            callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks if self.result is not None else ():
            callback(self.result)


def _place(config) -> tuple:
    """What a build depends on besides the machine: the compiler asked for and the cache."""
    return getattr(config, "cpp_compiler", None), getattr(config, "cache_dir", None)


def _cpp_compiler():
    """codegen/cpp/compiler.py, which finds and identifies the C++ compiler the code generator uses."""
    # deferred: tensorjit.codegen.cpp.compiler costs ~5 ms at import; only a native guard build needs it
    from ..codegen.cpp import compiler
    return compiler


def _artifact(compiler_name: str | None, cache_dir: str | None) -> tuple:
    """(compiler, cache key, file suffix, cache directory) of the extension built for a place."""
    compiler = _find_compiler(compiler_name)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = (SOURCE, _compiler_version(compiler), torch.__version__, torch.__file__, sys.version, suffix)
    return compiler, key, suffix, cache_dir


def _is_built(compiler: str, key: tuple, suffix: str, cache_dir: str | None) -> bool:
    digest = cache_key(key)
    return is_valid(cache_root(cache_dir) / digest[:2] / f"{digest}{suffix}")


def _find_compiler(name: str | None) -> str:
    return _cpp_compiler().find_compiler(name)


def _compiler_version(compiler: str) -> str:
    return _cpp_compiler().compiler_version(compiler)


_FAILURES = (RuntimeError, OSError, ImportError, subprocess.SubprocessError)
"""What a missing compiler (CompilerMissing is a RuntimeError), a failed build or import raise."""
_jobs: dict[tuple, _Job] = {}
_cached: dict[tuple, bool] = {}
"""Place -> whether the disk cache held the check when first asked (`_in_cache`)."""
_lock = threading.RLock()  # re-entered: a job that fails at its start finishes under checker's hold


def _build(compiler: str, output: str) -> None:
    # deferred: torch.utils.cpp_extension costs ~105 ms at import; only a native guard build needs it
    from torch.utils import cpp_extension
    includes = [f"-I{path}" for path in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    library = cpp_extension.library_paths()[0]
    command = [compiler, "-O2", "-shared", "-fPIC", f"-std={_cxx_standard()}", "-w",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}", *includes,
               "-x", "c++", "-", "-o", output, f"-L{library}", f"-Wl,-rpath,{library}",
               "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    result = subprocess.run(command, input=SOURCE, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"native guard build failed: {result.stderr[-2000:]}")


def _cxx_standard() -> str:
    """The C++ standard torch's headers are written in: C++20 from torch 2.14, C++17 before."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return "c++20" if (major, minor) >= (2, 14) else "c++17"


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader("tensorjit_tensor_guards", path)
    spec = importlib.util.spec_from_file_location("tensorjit_tensor_guards", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
