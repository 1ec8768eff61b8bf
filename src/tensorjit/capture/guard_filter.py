"""The guard_filter_fn option: the user chooses which of an entry's guards are kept.

Takes the guards capture recorded for one entry and the objects they were read from;
describes each as a `GuardEntry` with the fields torch.compile's filters read (name,
value, guard_type, is_global, orig_guard.source...), so torch.compiler's
skip_guard_on_*_unsafe / keep_*_unsafe functions work as well as tensorjit.compiler's,
and returns the guards the filter kept. Dropping guards is unsafe by design: an entry
then runs for inputs it was not captured for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .guard_kinds import GUARD_KINDS
from .guards import Guard, GuardSet
from .sources import GlobalSource, ModuleGlobalSource, Source


@dataclass
class SourceView:
    """What filters ask of a guard's source: does its path go through an nn.Module?"""

    source: Source | None
    modules: tuple  # the nn.Modules on the path from the root to the guarded value

    def is_unspecialized_nn_module(self) -> bool:
        return bool(self.modules)

    def is_unspecialized_builtin_nn_module(self) -> bool:
        return any(type(m).__module__.startswith("torch.nn.") for m in self.modules)

    def name(self) -> str:
        return str(self.source) if self.source is not None else ""


@dataclass
class OriginalGuard:
    source: SourceView
    kind: str


@dataclass
class GuardEntry:
    name: str
    has_value: bool
    value: Any
    guard_type: str
    derived_guard_types: tuple
    is_global: bool
    orig_guard: OriginalGuard


def filter_guards(guards: GuardSet, wrapped: dict, guard_filter: Callable) -> GuardSet:
    """A GuardSet holding the guards `guard_filter` keeps; `wrapped` maps sources to the objects read."""
    entries = [_entry(guard, wrapped) for guard in guards.guards]
    keep = list(guard_filter(entries))
    if len(keep) != len(entries):
        raise ValueError(f"tensorjit: guard_filter_fn returned {len(keep)} flags for {len(entries)} guards")
    kept = GuardSet()
    for guard, flag in zip(guards.guards, keep):
        if flag:
            kept.add(guard)
    return kept


def _entry(guard: Guard, wrapped: dict) -> GuardEntry:
    source = guard.source
    has_value = source is not None and source in wrapped
    value = wrapped[source][0] if has_value else None
    modules = []
    node = source.base() if source is not None else None
    while node is not None:
        if node in wrapped and isinstance(wrapped[node][0], torch.nn.Module):
            modules.append(wrapped[node][0])
        node = node.base()
    if isinstance(value, torch.nn.Module):
        modules.append(value)
    root = source.root() if source is not None else None
    kind = GUARD_KINDS[guard.kind].torch_type
    return GuardEntry(name=str(source) if source is not None else "", has_value=has_value, value=value,
                      guard_type=kind, derived_guard_types=(), is_global=isinstance(root, (GlobalSource,
                                                                                            ModuleGlobalSource)),
                      orig_guard=OriginalGuard(SourceView(source, tuple(modules)), kind))
