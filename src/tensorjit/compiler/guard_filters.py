"""Ready-made guard filters for `options={"guard_filter_fn": ...}`, as torch.compiler's.

Each takes the list of GuardEntry records of one new entry (`capture/guard_filter.py`)
and returns one flag per guard: True keeps it. All are unsafe: a dropped guard no
longer protects the entry from inputs it was not captured for.
"""

from __future__ import annotations

import torch


def skip_guard_on_inbuilt_nn_modules_unsafe(guard_entries):
    """Drop guards on the attributes of torch.nn's own modules (torch.nn.Linear...)."""
    return [not entry.orig_guard.source.is_unspecialized_builtin_nn_module() for entry in guard_entries]


def skip_guard_on_all_nn_modules_unsafe(guard_entries):
    """Drop guards on the attributes of every nn.Module, user-defined or built in."""
    return [not entry.orig_guard.source.is_unspecialized_nn_module() for entry in guard_entries]


def keep_tensor_guards_unsafe(guard_entries, keep_parameters: bool = False):
    """Keep only the guards on tensors (parameters too with keep_parameters=True)."""
    return [entry.guard_type == "TENSOR_MATCH"
            and (keep_parameters or not isinstance(entry.value, torch.nn.Parameter))
            for entry in guard_entries]


def skip_guard_on_globals_unsafe(guard_entries):
    """Drop the guards on values read from globals."""
    return [not entry.is_global for entry in guard_entries]


def keep_portable_guards_unsafe(guard_entries):
    """Keep tensor metadata, shape and global-state (grad mode, autocast...) guards only."""
    return [entry.guard_type in ("GLOBAL_STATE", "SHAPE_ENV")
            or (entry.guard_type == "TENSOR_MATCH" and not entry.is_global) for entry in guard_entries]


def skip_all_guards_unsafe(guard_entries):
    """Drop every guard: the first entry runs for every later call."""
    return [False for _ in guard_entries]
