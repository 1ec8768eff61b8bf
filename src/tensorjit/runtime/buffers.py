"""The two tensor constructors generated wrappers call most: a new buffer, and an alias of one.

A GPT-2 training step's wrappers allocate about 180 buffers and take about 250
strided views of them (codegen/wrapper.py). Through torch's Python bindings
each costs the argument parser: on the H100 machine's host `torch.empty` 5.8 us,
`torch.empty_strided` 3.5, `Tensor.as_strided` 3.0, `Tensor.view` 3.4; through
a C function that reads its arguments positionally, 1-2 us (torch.compile's
wrappers call such functions too). In a host-bound step that is a millisecond.

`new(shape, strides, dtype, device)` is `torch.empty_strided`. `alias(base,
shape, strides, offset)` is a tensor over `base`'s memory with that layout,
starting `offset` elements after `base`'s start: it is not a view in autograd's
books (no `_base`, a version counter of its own), so the wrapper takes it only
for memory that the call allocated and that nothing it returns can reach
(`memory.private_memory`), where no one can tell the difference; otherwise
`as_strided`.

The fast versions are C++ (`SOURCE`, compiled into the native guard
extension, capture/native_guards.py, one build), swapped in by `provide` when
the extension loads; until then, or where it cannot be built, these are
torch's own calls.
"""

from __future__ import annotations

from typing import Any

import torch


def _new(shape: tuple, strides: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


def _alias(base: torch.Tensor, shape: tuple, strides: tuple, offset: int) -> torch.Tensor:
    return base.as_strided(shape, strides, base.storage_offset() + offset)


new = _new
"""new(shape, strides, dtype, device) -> an uninitialised tensor of that layout."""
alias = _alias
"""alias(base, shape, strides, offset) -> a tensor of that layout over base's memory, `offset`
elements after base's own start."""


def provide(module: Any) -> None:
    """The extension is loaded (capture/native_guards.py): the generated wrappers call its functions."""
    global new, alias
    if hasattr(module, "new_buffer") and hasattr(module, "alias"):
        new, alias = module.new_buffer, module.alias


SOURCE = r"""
#include <ATen/ATen.h>

namespace tensorjit_buffers {

using tensorjit_common::read_ints;  // capture/native_guards.py's, before the runtime's parts

// new_buffer(shape, strides, dtype, device) -> torch.empty_strided(shape, strides, dtype=dtype, device=device)
PyObject* new_buffer(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::vector<int64_t> shape, strides;
  if (nargs != 4 || !read_ints(args[0], shape) || !read_ints(args[1], strides) || shape.size() != strides.size()
      || !THPDtype_Check(args[2]) || !THPDevice_Check(args[3])) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "new_buffer(shape: tuple, strides: tuple, dtype, device)");
    return nullptr;
  }
  try {
    auto options = at::TensorOptions()
        .dtype(reinterpret_cast<THPDtype*>(args[2])->scalar_type)
        .device(reinterpret_cast<THPDevice*>(args[3])->device);
    return THPVariable_Wrap(at::empty_strided(shape, strides, options));
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

// alias(base, shape, strides, offset) -> a tensor of that layout over base's storage, `offset` elements
// after base's start (no view bookkeeping: see runtime/buffers.py)
PyObject* alias(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::vector<int64_t> shape, strides;
  if (nargs != 4 || !THPVariable_Check(args[0]) || !read_ints(args[1], shape) || !read_ints(args[2], strides)
      || shape.size() != strides.size() || !PyLong_Check(args[3])) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "alias(base, shape: tuple, strides: tuple, offset: int)");
    return nullptr;
  }
  long long offset = PyLong_AsLongLong(args[3]);
  if (offset == -1 && PyErr_Occurred()) return nullptr;
  try {
    const at::Tensor& base = THPVariable_Unpack(args[0]);
    at::Tensor result = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(),
                                                                 base.dtype());
    result.unsafeGetTensorImpl()->set_sizes_and_strides(shape, strides, base.storage_offset() + offset);
    return THPVariable_Wrap(std::move(result));
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

}  // namespace tensorjit_buffers
"""

METHODS = r"""
    {"new_buffer", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensorjit_buffers::new_buffer)),
     METH_FASTCALL, "new_buffer(shape, strides, dtype, device) -> tensor"},
    {"alias", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensorjit_buffers::alias)), METH_FASTCALL,
     "alias(base, shape, strides, offset) -> tensor"},
"""
"""Entries of the extension's method table (capture/native_guards.py puts them in)."""
