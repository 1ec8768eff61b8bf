"""Replay outputs handed out without a copy, and revoked when the next replay overwrites them.

A CUDA graph replay writes its outputs into the same static buffers every
time. Cloning them for the caller costs a device copy per output and call
(GPT-2's logits: 0.51 ms of a 2.8 ms inference step on the H100), which
torch.compile does not pay: it hands out the buffers. So does tensorjit. Each
replay hands out tensors over storages of their own that alias the static
buffers (`torch._C._construct_storage_from_data_pointer`), and the next replay
of the recording first revokes those still alive
(`torch._C._set_storage_data_ptr_access_error_msg`): any later read of such a
tensor, or of a view taken from it (views share the storage), raises `REVOKED`
instead of seeing the new values. A caller who keeps an output across calls
clones it, as under torch.compile; the common loop `out = model(x)` pays nothing.

Outputs whose storage is not the recording's own (a parameter returned as it
is, a view of a copied input) and empty ones are cloned: revoking them would
revoke memory that is not the graph's to overwrite. Without the revoking call
(a torch built without it) every output is cloned, as before: an output is never
silently overwritten.

A handed-out storage keeps the recording's static outputs alive (an attribute
of the storage's Python object, which torch preserves with the storage), so the
memory stays allocated for as long as the caller holds any view of it, even
after the compiled function is dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

REVOKED = ("tensorjit: this tensor is an output of {name}, replayed through a CUDA graph "
           "(mode=\"reduce-overhead\" or backend=\"cudagraphs\"), and a later call of it has overwritten it. "
           "To keep an output past the next call, clone it (`out.clone()`) before calling the compiled "
           "function again.")


def can_revoke() -> bool:
    """Whether this torch can make a storage raise on access (its CUDA build can)."""
    return hasattr(torch._C, "_set_storage_data_ptr_access_error_msg")


def revoke_storage(storage_pointer: int, message: str) -> None:
    """Release a handed-out storage's data; reading it, or any view of it, raises `message`."""
    torch._C._set_storage_data_ptr_access_error_msg(storage_pointer, message)


@dataclasses.dataclass(eq=False)
class OutputLease:
    """The outputs of one recording that its replays hand out in place, and those handed out last."""

    groups: list[tuple[torch.UntypedStorage, list[int]]]
    """Each static storage and the output positions viewing it (they get one fresh storage a replay)."""
    message: str
    owner: Any
    """What keeps the static buffers allocated: the recording's static outputs."""
    live: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    """(weak reference, storage pointer) of each storage the last replay handed out."""

    @classmethod
    def of(cls, outputs: Sequence[Any], foreign_storages: set[int], name: str) -> "OutputLease":
        """The lease of `outputs` (the kept ones); storages at `foreign_storages` (the inputs') stay out."""
        by_storage: dict[int, tuple[torch.UntypedStorage, list[int]]] = {}
        for position, value in enumerate(outputs):
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            address = storage.data_ptr()
            if address == 0 or storage.nbytes() == 0 or address in foreign_storages:
                continue
            by_storage.setdefault(address, (storage, []))[1].append(position)
        return cls(list(by_storage.values()), REVOKED.format(name=name), list(outputs))

    @property
    def positions(self) -> set[int]:
        return {position for _, positions in self.groups for position in positions}

    def aliases(self, value: Any) -> bool:
        """Whether `value` views one of the static buffers (an earlier replay's output passed back in)."""
        if not isinstance(value, torch.Tensor):
            return False
        address = value.untyped_storage().data_ptr()
        return any(storage.data_ptr() == address for storage, _ in self.groups)

    def revoke(self, revoke=revoke_storage) -> int:
        """Revoke what the last replay handed out and the caller still holds; how many were held."""
        held = 0
        for weak, pointer in self.live:
            if not torch.UntypedStorage._expired(weak):
                revoke(pointer, self.message)
                held += 1
            torch.UntypedStorage._free_weak_ref(weak)
        self.live = []
        return held

    def hand_out(self, outputs: list[Any]) -> None:
        """Replace the leased positions of `outputs` (the static buffers) by fresh tensors aliasing them."""
        for storage, positions in self.groups:
            fresh = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), storage.device,
                                                                  storage.nbytes())
            fresh.tensorjit_owner = self.owner
            self.live.append((fresh._weak_ref(), fresh._cdata))
            for position in positions:
                static = outputs[position]
                outputs[position] = torch.empty(0, dtype=static.dtype, device=static.device).set_(
                    fresh, static.storage_offset(), static.shape, static.stride())

    def __del__(self):
        for weak, _ in self.live:
            torch.UntypedStorage._free_weak_ref(weak)
        self.live = []
