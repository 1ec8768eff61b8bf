"""Entries shared by the functions of one code object: closures made anew on each call.

A function defined inside another (a decorator's wrapper, a helper made in forward) is a new
function object with new closure cells on every call of its maker; compiling each one as a
function of its own would capture and compile the same code again, once per call. Entries are
kept per compiled function, their guards and restore code bound to its closure, so a closure
that misses borrows its siblings' entries instead (those of the functions compiled with the same
code, globals and settings, kept with the code object as Dynamo keeps its cache, so that they
outlive the compiled function that captured them): each is rebuilt over this closure as the warm-start cache rebuilds
one in a later process (`convert.rebuilt_entry`). Its guards, saved as data, are built again over
this closure's cells, and its restore function and a break's transformed code bound to them; the
compiled graph is the same object, so nothing is captured or compiled. The guards decide as for
any entry: a cell's contents are guarded (a tensor by its properties: it is a graph input, read
from the cell on each call; an object by identity), so a closure whose cells differ there
captures its own entry, which its siblings may borrow in turn.

What is kept holds none of the closure: the guards as data, the restore function's text, its
constants and compiled graph, a break's transformed code, and its resume functions by place and
code (the callee wrapper and the resume functions are the borrower's own). Entries whose guards
cannot be saved (an identity guard on an object no name reaches) are not shared. At most
`cache_size_limit` are kept per code and place (the oldest dropped); `tensorjit.reset` drops all. A resume function (the code after a graph break) is the sibling of the resume function
at the same place in a sibling of its root.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from .. import logs
from ..capture.convert import CacheEntry, rebuilt_entry


@dataclass(eq=False)
class SharedEntry:
    """What an entry is rebuilt from over another function of its code."""

    settings: tuple  # the CompiledFunction's (backend, config, fullgraph, backend name, dynamic)
    globals_id: int  # id() of the function's globals: holding the dict, which holds the function and
    # so the code object keying `_shared`, would keep the entry (and its graph) alive for ever
    kind: str  # "eager", "return" or "break"
    guard_data: bytes
    restore: tuple | None = None  # (text, constants, compiled graph, name), the callee wrapper left out
    code: Any = None  # a break's transformed code
    resumes: tuple = ()  # a break's resume functions: (resume key, code) each


_shared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""root code object -> {None (the root) or a resume key: [SharedEntry, oldest first]}"""


def _root(function):
    while function.origin is not None:
        function = function.origin[0]
    return function


def _place(function) -> tuple:
    """(the root function's code, where in it: None for the root, else the resume key)."""
    return _root(function).fn.__code__, (None if function.origin is None else function.resume_key)


def record(function, entry: CacheEntry) -> None:
    """Keep `function`'s new entry for the other functions of its code, where it can be shared."""
    if getattr(entry, "shared", None) is not None:  # borrowed: its original is kept already
        return
    shared = _shared_entry(function, entry)
    if shared is None:
        return
    entry.shared = shared
    code, place = _place(function)
    kept = _shared.setdefault(code, {}).setdefault(place, [])
    kept.append(shared)
    del kept[:-function.config.cache_size_limit]


def _shared_entry(function, entry: CacheEntry) -> SharedEntry | None:
    recipe, saved = entry.recipe, entry.guards.saved
    if recipe is None or not isinstance(saved, tuple):
        return None
    shared = SharedEntry(function.settings(), id(function.fn.__globals__), recipe["kind"], saved[0])
    if shared.kind == "eager":
        return shared
    text, constants, compiled, name = recipe["restore"]
    constants = {key: value for key, value in constants.items() if key != "_wrap_callee"}
    shared.restore = (text, constants, compiled, name)
    if shared.kind == "break":
        shared.code = recipe["code"]
        shared.resumes = tuple((resume.resume_key, resume.fn.__code__) for resume in recipe["resumes"])
    return shared


def borrow(function, L: tuple) -> CacheEntry | None:
    """An entry of another function of this code, rebuilt over `function`, whose guards hold for
    `L`; None when there is none. Entries borrowed already are not tried again."""
    code, place = _place(function)
    held = {getattr(entry, "shared", None) for entry in function.entries}
    settings, globals_id = function.settings(), id(function.fn.__globals__)
    for shared in reversed(_shared.get(code, {}).get(place, ())):
        if shared in held or shared.globals_id != globals_id or shared.settings != settings:
            continue
        entry = _rebuild(function, shared)
        try:
            ok = entry.guards.check(L)
        except Exception:  # noqa: BLE001 - a guard that cannot be read fails, as at dispatch
            ok = False
        if ok:
            entry.shared = shared
            logs.emit("cache", f"hit: {function.fn.__qualname__}: an entry of another function of its code "
                               f"(a closure made again), nothing compiled")
            return entry
    return None


def _rebuild(function, shared: SharedEntry) -> CacheEntry:
    if shared.kind == "eager":
        return rebuilt_entry(function, "eager", shared.guard_data)
    text, constants, compiled, name = shared.restore
    restore = (text, {**constants, "_wrap_callee": function.wrap_callee}, compiled, name)
    root = _root(function)
    resumes = [root.resume_function(*key, code=code) for key, code in shared.resumes]
    return rebuilt_entry(function, shared.kind, shared.guard_data, restore, shared.code, resumes)


def clear() -> None:
    _shared.clear()
