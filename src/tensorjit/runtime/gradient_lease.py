"""A backward replay's gradients handed out without a copy, and moved out of the pool if they outlive it.

A recorded backward writes its gradients into the same static buffers at each
replay. They used to be cloned for the caller (`cudagraphs.ClonePlan`): one
concatenating copy a step of every gradient (GPT-2: 500 MB) and hundreds of
views, 1.27 ms of host time a step for densenet121's 364 gradients on the H100,
and a second copy of every gradient held beside the pool (GPT-2 training: 2078
MB reserved against torch.compile's 1922). torch.compile hands its gradients out
of the pool; so does tensorjit, here.

Each replay hands out tensors over fresh storages that alias the static buffers
(`hand_out`, one C++ call for all of them). A parameter's `.grad` usually dies
before the next step (`zero_grad()` sets it to None), and then nothing more
happens. But a gradient may outlive the step: accumulated over micro-batches,
kept by `zero_grad(set_to_none=False)`, held by the caller. The next replay of
the pool (the next forward's, which may reuse those addresses for its
activations, or the same backward's) would write over it. So before any replay
of the pool, every handed-out storage still alive is moved (`move_held`): fresh
memory from the caching allocator, a device copy, and the storage's data pointer
swapped in C++, so that every tensor and view over it follows, with nothing to
revoke. A recording whose gradients were moved once clones them from then on (a
copy of each held gradient a step, as the move costs, in one batch).

The functions are C++ (`SOURCE`, compiled into the native guard extension,
capture/native_guards.py, one build): a storage per gradient built from Python
costs more host time than the clone it replaces (0.83 against 0.62 ms for 364
gradients on the development CPU), and torch before 2.13 has no call that moves
a storage's memory under its views. Until the extension is loaded (`provide`),
or where it cannot be built, gradients are cloned as before.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import torch

SOURCE = r"""
#include <unordered_map>
#include <ATen/ATen.h>

namespace tensorjit_lease {

const char* kLease = "tensorjit.gradient_lease";

using Held = std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>;

void destroy_lease(PyObject* capsule) {
  delete static_cast<Held*>(PyCapsule_GetPointer(capsule, kLease));
}

void release_static(void* context) { delete static_cast<c10::Storage*>(context); }

// A storage over the bytes of `original` that keeps it alive (its memory stays the pool's own).
c10::intrusive_ptr<c10::StorageImpl> alias(const c10::Storage& original) {
  auto* keep = new c10::Storage(original);
  at::DataPtr pointer(const_cast<void*>(original.data()), keep, release_static, original.device());
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), original.nbytes(),
                                               std::move(pointer), nullptr, false);
}

// hand_out((tensor, ...)) -> ((tensor, ...), lease): each tensor again, over a fresh storage aliasing its
// own (one per storage: views of one buffer stay views of one storage); the lease holds weak references.
PyObject* hand_out(PyObject*, PyObject* statics) {
  if (!PyTuple_Check(statics)) {
    PyErr_SetString(PyExc_TypeError, "hand_out() takes a tuple of tensors");
    return nullptr;
  }
  Py_ssize_t count = PyTuple_GET_SIZE(statics);
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (!THPVariable_Check(PyTuple_GET_ITEM(statics, i))) {
      PyErr_SetString(PyExc_TypeError, "hand_out() takes a tuple of tensors");
      return nullptr;
    }
  }
  auto held = std::make_unique<Held>();
  PyObject* handed = PyTuple_New(count);
  if (handed == nullptr) return nullptr;
  try {
    std::unordered_map<c10::StorageImpl*, c10::intrusive_ptr<c10::StorageImpl>> fresh;
    for (Py_ssize_t i = 0; i < count; ++i) {
      const at::Tensor& original = THPVariable_Unpack(PyTuple_GET_ITEM(statics, i));
      c10::StorageImpl* key = original.storage().unsafeGetStorageImpl();
      auto found = fresh.find(key);
      if (found == fresh.end()) {
        found = fresh.emplace(key, alias(original.storage())).first;
        held->emplace_back(found->second);
      }
      auto tensor = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(found->second), original.key_set(),
                                                             original.dtype());
      tensor.unsafeGetTensorImpl()->set_sizes_and_strides(original.sizes(), original.strides(),
                                                          original.storage_offset());
      PyObject* wrapped = THPVariable_Wrap(std::move(tensor));
      if (wrapped == nullptr) {
        Py_DECREF(handed);
        return nullptr;
      }
      PyTuple_SET_ITEM(handed, i, wrapped);
    }
  } catch (const std::exception& error) {
    Py_DECREF(handed);
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  PyObject* lease = PyCapsule_New(held.get(), kLease, destroy_lease);
  if (lease == nullptr) {
    Py_DECREF(handed);
    return nullptr;
  }
  held.release();
  return Py_BuildValue("(NN)", handed, lease);
}

Held* lease_of(PyObject* capsule) { return static_cast<Held*>(PyCapsule_GetPointer(capsule, kLease)); }

// move_held(lease) -> int: give each handed-out storage still alive memory of its own (the caching
// allocator's, on the current stream), its bytes copied; every tensor over it follows. How many moved.
PyObject* move_held(PyObject*, PyObject* capsule) {
  Held* storages = lease_of(capsule);
  if (storages == nullptr) return nullptr;
  long moved = 0;
  try {
    for (const auto& weak : *storages) {
      c10::intrusive_ptr<c10::StorageImpl> storage = weak.lock();
      if (!storage) continue;
      auto bytes = static_cast<int64_t>(storage->nbytes());
      auto options = at::TensorOptions().dtype(at::kByte).device(storage->device());
      at::Tensor target = at::empty({bytes}, options);
      at::Tensor source = at::empty({0}, options).set_(c10::Storage(storage), 0, {bytes}, {1});
      target.copy_(source);
      at::DataPtr memory = target.storage().unsafeGetStorageImpl()->set_data_ptr(
          at::DataPtr(nullptr, storage->device()));
      at::DataPtr pool_alias = storage->set_data_ptr(std::move(memory));  // released here: the static buffer
      ++moved;
    }
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  storages->clear();
  return PyLong_FromLong(moved);
}

}  // namespace tensorjit_lease
"""

METHODS = r"""
    {"hand_out", tensorjit_lease::hand_out, METH_O, "hand_out(tensors) -> (tensors over fresh storages, lease)"},
    {"move_held", tensorjit_lease::move_held, METH_O, "move_held(lease) -> storages moved to memory of their own"},
"""
"""Entries of the extension's method table (capture/native_guards.py puts them in)."""

_native = None


def provide(module: Any) -> None:
    """The extension is loaded (capture/native_guards.py): hand out gradients from now on."""
    global _native
    if hasattr(module, "hand_out"):
        _native = module


def available() -> bool:
    return _native is not None


class GradientLease:
    """The gradients of one backward recording that its replays hand out in place."""

    def __init__(self, positions: Sequence[int], statics: Sequence[Any], pool_leases: "PoolLeases"):
        self.positions = list(positions)
        self.statics = tuple(statics[i] for i in self.positions)
        """The static gradients at `positions` of the recording's outputs."""
        self.pool_leases = pool_leases
        self.moved = 0
        """How many storages were moved out of the pool since the recording was made."""

    @staticmethod
    def positions_of(outputs: Sequence[Any], foreign_storages: set[int]) -> list[int]:
        """The gradients among `outputs` that can be handed out: dense ones whose memory is the
        recording's own (one over an input's storage, an empty one or one that requires grad stays
        cloned)."""
        return [index for index, value in enumerate(outputs)
                if isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.requires_grad
                and value.numel() > 0 and value.untyped_storage().data_ptr() not in foreign_storages]

    def hand_out(self, outputs: list[Any]) -> None:
        """Put tensors aliasing the static gradients at their positions of `outputs`."""
        handed, lease = _native.hand_out(self.statics)
        for position, value in zip(self.positions, handed):
            outputs[position] = value
        self.pool_leases.pending.append((weakref.ref(self), lease))


class PoolLeases:
    """The leases of one memory pool's recordings whose handed-out storages a replay in the pool could
    overwrite; `release` before every replay of the pool moves those still alive."""

    def __init__(self) -> None:
        self.pending: list[tuple[weakref.ref, Any]] = []

    def release(self) -> None:
        """Move every handed-out storage still alive out of the pool (counted on its lease)."""
        for owner, lease in self.pending:
            count = _native.move_held(lease)
            gradient_lease = owner()
            if count and gradient_lease is not None:
                gradient_lease.moved += count
        self.pending = []


_pool_leases: "weakref.WeakValueDictionary[int, PoolLeases]" = weakref.WeakValueDictionary()


def pool_leases(pool: Any) -> PoolLeases:
    """The one `PoolLeases` of `pool` (held by its recordings)."""
    leases = _pool_leases.get(id(pool))
    if leases is None:
        leases = _pool_leases[id(pool)] = PoolLeases()
    return leases
