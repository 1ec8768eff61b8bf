"""The public API: compile(), disable(), reset(), and the wrappers they return.

`compile` checks its arguments and returns a `CompiledFunction` (for functions
and methods) or an `OptimizedModule` (for nn.Modules). A CompiledFunction owns
the cache of entries for its code: on each call it binds the arguments, runs
each entry's guards, and calls the first entry whose guards hold; when none
does, it captures a new entry (see `capture.convert`).
"""

from __future__ import annotations

import builtins
import functools
import inspect
import itertools
import os
import sys
import time
import types
import warnings
import weakref
from typing import Any, Callable, TypeVar, overload

import torch

from . import logs, progress
from .heap import frozen_heap
from .backends.registry import BackendCompilerFailed, get_default_backend, lookup_backend
from .capture import codegen as capture_codegen, native_guards
from .capture.breaks import CaptureError, GraphBreakError
from .capture.convert import CacheEntry, capture_entry
from .capture.dynamic import record_changed_dims
from .capture.module_call import any_hooks
from .capture.resume import TailCall, resume_code
from .capture.skipfiles import mark_disabled
from .arguments import check_compile_arguments, check_disable_arguments
from .config import MODES, Config, config as default_config
from .runtime import closure_entries, warm_start

_all_compiled: "weakref.WeakSet[CompiledFunction]" = weakref.WeakSet()


class CompiledFunction:
    """A function with a cache of captured entries, called in place of the original."""

    def __init__(self, fn: types.FunctionType, backend: Callable, config: Config, fullgraph: bool,
                 backend_name: str = "", dynamic: bool | None = None) -> None:
        self.fn = fn
        self.dynamic = dynamic
        self.dynamic_dims: dict[str, set[int]] = {}  # source -> dims seen changing (automatic dynamic)
        self.last_shapes: dict[str, tuple] = {}
        self.dynamic_ints: set[str] = set()  # int and float arguments seen changing (automatic dynamic)
        self.last_ints: dict[str, int | float] = {}
        self.backend = backend
        self.backend_name = backend_name
        self.config = config
        self.fullgraph = fullgraph
        self.entries: list[CacheEntry] = []
        self.dead_entries = 0  # entries dropped when an object their guards hold died: they count as recompiles
        self.failures: list[str] = []
        self.eager_fallback = False
        self.binder = _make_binder(fn)
        self.fast = _always_miss
        self.unsettled = False  # an entry's guards have a native check to take (settle_guards)
        self.origin: tuple | None = None  # for a resume function: (original's CompiledFunction, prologue length)
        self._resume: dict[tuple, CompiledFunction] = {}
        self._forced: dict = {}  # backend -> sibling, for set_stance(force_backend=...)
        self.warmed_up = False  # stance "eager_then_compile": the first call ran eagerly
        self.frame_id: int | None = None  # numbers this function's entries in logs ("0/1"), as torch's frame ids
        self.warm_checked = False  # the warm-start cache was asked for saved entries (once, at the first miss)
        functools.update_wrapper(self, fn)
        _all_compiled.add(self)

    def __call__(self, *args, **kwargs):
        if stance is not None:  # tensorjit.compiler.set_stance other than plain "default"
            return self._call_under_stance(args, kwargs)
        result = self.fast(*args, **kwargs)
        if result is _MISS:
            result = self.dispatch(args, kwargs)
        while type(result) is TailCall:
            resume = result.resume
            result = resume.dispatch(result.stack + result.local_values, {})
        return result

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    def dispatch(self, args: tuple, kwargs: dict):
        L = self.binder(*args, **kwargs)
        if self.unsettled:  # a resume function runs no fast path
            self.settle_guards()
        if stance is not None and stance.skip_guard_eval_unsafe and len(self.entries) == 1:
            # Unsafe by request (set_stance(skip_guard_eval_unsafe=True)): one entry has no
            # guard that tells it from another, so none is evaluated, as torch does.
            return self.entries[0].run(args, kwargs, L)
        for entry in self.entries:
            try:
                ok = entry.guards.check(L)
            except Exception:
                ok = False
            if ok:
                return entry.run(args, kwargs, L)
        if self.eager_fallback:
            return self.fn(*args, **kwargs)
        if stance is not None and stance.stance != "default":
            return self._miss_under_stance(args, kwargs, L)
        return self._compile_and_run(args, kwargs, L)

    def _call_under_stance(self, args, kwargs):
        if stance.stance == "force_eager":
            return self.fn(*args, **kwargs)
        target = self if stance.force_backend is None else self._with_backend(stance.force_backend)
        result = target.dispatch(args, kwargs)
        while type(result) is TailCall:
            result = result.resume.dispatch(result.stack + result.local_values, {})
        return result

    def _miss_under_stance(self, args, kwargs, L):
        """No entry's guards hold: what the stance says to do instead of compiling."""
        name = stance.stance
        if name == "eager_on_recompile":
            return self.fn(*args, **kwargs)
        if name == "fail_on_recompile":
            code = self.fn.__code__
            raise RuntimeError(f"Detected recompile when tensorjit.compile stance is 'fail_on_recompile'. "
                               f"filename: '{code.co_filename}', function name: '{code.co_name}', "
                               f"line number: {code.co_firstlineno}")
        if name in ("eager_then_compile", "aot_eager_then_compile") and not self.entries and not self.warmed_up:
            # The first call runs eagerly (or through aot_eager); the sizes it saw let the next
            # capture tell which dims vary.
            self.warmed_up = True
            self.last_shapes = {f"L[{i}]": tuple(v.shape) for i, v in enumerate(L) if isinstance(v, torch.Tensor)}
            if name == "aot_eager_then_compile":
                first = self._with_backend("aot_eager")
                return first._compile_and_run(args, kwargs, first.binder(*args, **kwargs))
            return self.fn(*args, **kwargs)
        return self._compile_and_run(args, kwargs, L)

    def _with_backend(self, backend) -> "CompiledFunction":
        """A sibling compiling the same function with another backend (set_stance(force_backend=))."""
        key = backend if isinstance(backend, str) else id(backend)
        sibling = self._forced.get(key)
        if sibling is None:
            backend_fn, name = _resolve_backend(backend)
            sibling = self._forced[key] = CompiledFunction(self.fn, backend_fn, self.config, self.fullgraph,
                                                           name, self.dynamic)
        return sibling

    def _compile_and_run(self, args, kwargs, L):
        if sys.version_info[:2] not in SUPPORTED_PYTHONS:
            return self._unsupported_python(args, kwargs)
        if not self.warm_checked:
            self.warm_checked = True
            entry = self._warm_start(L)
            if entry is not None:
                return entry.run(args, kwargs, L)
        borrowed = closure_entries.borrow(self, L)
        if borrowed is not None:
            self._add_entry(borrowed)
            return borrowed.run(args, kwargs, L)
        live = [e for e in self.entries if e.guards.alive()]
        self.dead_entries += len(self.entries) - len(live)
        self.entries = live
        if self.warmed_up and not self.entries:
            self._note_changed_shapes(L)
        if not self.entries and self.dead_entries >= self.config.cache_size_limit:
            # A value made anew on each call and guarded by identity: every call would capture again
            self.eager_fallback = True
            code = self.fn.__code__
            warnings.warn(logs.recompile_limit_text(code.co_name, f"{code.co_filename}:{code.co_firstlineno}",
                                                    self.config.cache_size_limit,
                                                    ("-", "an object the guards held by identity died")),
                          stacklevel=3)
            return self.fn(*args, **kwargs)
        if self.entries:
            self._note_changed_shapes(L)
            # Every entry's first failing guard, newest first, numbered "frame/entry" as torch does.
            failures = [(f"{self.frame_id}/{index}", entry.guards.failure(L) or "unknown")
                        for index, entry in reversed(list(enumerate(self.entries)))]
            self.failures.append(failures[0][1])
            code = self.fn.__code__
            location = f"{code.co_filename}:{code.co_firstlineno}"
            logs.recompile(code.co_name, location, failures)
            if len(self.entries) + self.dead_entries >= self.config.cache_size_limit:
                self.eager_fallback = True
                warnings.warn(logs.recompile_limit_text(code.co_name, location, self.config.cache_size_limit,
                                                        failures[0]), stacklevel=3)
                return self.fn(*args, **kwargs)
        elif self.frame_id is None:
            self.frame_id = next(_frame_ids)
        start = time.perf_counter()
        code = self.fn.__code__
        try:
            with progress.compiling(f"{self.fn.__qualname__} ({os.path.basename(code.co_filename)}:"
                                    f"{code.co_firstlineno})", self.config.progress), frozen_heap():
                entry = capture_entry(self, L)
        except (GraphBreakError, CaptureError, BackendCompilerFailed):
            if self.config.suppress_errors and not self.fullgraph:
                warnings.warn(f"tensorjit: capture of {self.fn.__qualname__} failed; running eagerly")
                self.eager_fallback = True
                return self.fn(*args, **kwargs)
            raise
        _note_compile_time(self, entry, time.perf_counter() - start)
        self._add_entry(entry)
        warm_start.save(self)
        return entry.run(args, kwargs, L)

    def _add_entry(self, entry: CacheEntry) -> None:
        self.entries.append(entry)
        if len(self.entries) == 1:
            self.fast = self._first_entry_fast_path()
            if entry.guards.native_built is not None:  # built while the fast path was: settle now
                self.settle_guards_at_next_call()
        closure_entries.record(self, entry)

    def _warm_start(self, L) -> CacheEntry | None:
        """Entries an earlier process compiled (runtime/warm_start.py): the one whose guards hold, if any."""
        if self.entries or not warm_start.load(self):
            return None
        if self.frame_id is None:
            self.frame_id = next(_frame_ids)
        self.fast = _fast_path_at_next_call(self)  # compiling it would cost this first call as much as loading
        name = f"{self.fn.__qualname__} ({self.fn.__code__.co_filename}:{self.fn.__code__.co_firstlineno})"
        for index, entry in enumerate(self.entries):
            try:
                ok = entry.guards.check(L)
            except Exception:
                ok = False
            if ok:
                logs.emit("cache", f"hit: {name}: saved entry {index} of {len(self.entries)}, nothing compiled")
                return entry
        logs.emit("cache", f"miss: {name}: {len(self.entries)} saved entries, none whose guards hold: "
                           f"{self.entries[-1].guards.failure(L) or 'unknown'}")
        return None

    def _unsupported_python(self, args, kwargs):
        """Capture rewrites CPython bytecode, which changes between versions: on one it was not
        built for, graph-break code crashed the interpreter (3.13). Run eagerly instead."""
        version = ".".join(map(str, sys.version_info[:2]))
        supported = " and ".join(".".join(map(str, v)) for v in SUPPORTED_PYTHONS)
        message = (f"tensorjit: capture supports CPython {supported}, not {version}; "
                   f"{self.fn.__qualname__} runs eagerly")
        if self.fullgraph:
            raise RuntimeError(message + " (fullgraph=True asks for a graph)")
        if not _warned_unsupported_python:
            _warned_unsupported_python.append(True)
            warnings.warn(message + " (and so does every other compiled function)", RuntimeWarning, stacklevel=5)
        self.eager_fallback = True
        return self.fn(*args, **kwargs)

    def settings(self) -> tuple:
        return (self.backend, self.config, self.fullgraph, self.backend_name, self.dynamic)

    def wrap_callee(self, obj):
        """A callee of the Python that runs at one of this function's graph breaks: compile it alike."""
        return _wrap_callee(obj, self.settings())

    def _note_changed_shapes(self, L: tuple) -> None:
        """Automatic dynamic: sizes and int arguments that changed since the last capture become symbolic."""
        if self.dynamic is not None:
            return
        env = {"L": L, "G": self.fn.__globals__, "C": self.fn.__closure__ or (), "S": sys.modules,
               "B": builtins.__dict__}

        def now(expression: str):
            try:
                return eval(expression, env)
            except Exception:
                return None  # the path no longer exists: nothing to compare
        for expression, shape in self.last_shapes.items():
            value = now(expression)
            if isinstance(value, torch.Tensor):
                record_changed_dims(self.dynamic_dims, expression, shape, tuple(value.shape))
        for expression, before in self.last_ints.items():
            value = now(expression)
            if type(value) is type(before) and value != before:
                self.dynamic_ints.add(expression)

    def resume_function(self, index: int, depth: int, local_names: list[str],
                        cell_names: list[str] = (), code: types.CodeType | None = None) -> "CompiledFunction":
        """The compiled resume function continuing this code at instruction `index`.

        Resume functions are always copies of the original function's code, and are
        shared: a break in a loop resumes in the same function on every iteration.
        The variables in `cell_names` (among `local_names`) arrive as cells, not values.
        `code`: the resume code saved by the warm-start cache (else it is built)."""
        if self.origin is not None:  # a resume function: translate to the original's numbering
            root, shift = self.origin
            return root.resume_function(index - shift, depth, local_names, cell_names)
        key = (index, depth, tuple(local_names), tuple(cell_names))
        resume = self._resume.get(key)
        if resume is None:
            code = code or resume_code(self.fn.__code__, index, depth, local_names, cell_names)
            fn = types.FunctionType(code, self.fn.__globals__, code.co_name, None, self.fn.__closure__)
            resume = self._resume[key] = CompiledFunction(fn, self.backend, self.config, self.fullgraph,
                                                          self.backend_name, self.dynamic)
            # its prologue: a load per stack item and a jump; less the MAKE_CELL of each cell it receives
            resume.origin = (self, depth + 1 - len(cell_names))
            resume.cell_arguments = frozenset(cell_names)
            resume.resume_key = key
        return resume

    def all_entries(self):
        """This function's entries and those of its resume functions, depth first."""
        for entry in self.entries:
            yield self, entry
        for resume in self._resume.values():
            yield from resume.all_entries()

    def settle_guards_at_next_call(self) -> None:
        """An entry's native tensor check was built after its capture (capture/native_guards.py):
        its guards take it, and the fast path is rebuilt, at the next call (on the calling thread)."""
        self.unsettled = True
        self.fast = _fast_path_at_next_call(self)

    def _first_entry_fast_path(self) -> Callable:
        """The fast path of the first entry; while an entry checks its tensors in Python because the
        native check is not built and no build was asked for, one that counts calls up to
        `native_guards.HOT_CALLS` and then asks for it (`_hot`)."""
        if not self.entries:
            return _always_miss
        hot = self._hot if self._awaits_native() else None
        return _fast_path(self.fn, self.entries[0], hot) or _always_miss

    def _awaits_native(self) -> bool:
        return not native_guards.requested(self.config) and \
            any(entry.guards.upgrade is not None for _, entry in self.all_entries())

    def _hot(self) -> None:
        """The first entry was called HOT_CALLS times with Python tensor checks: build the native
        check (in the background, or load it where another process built it since), have every
        entry take it when done, and count no more."""
        native_guards.checker(self.config)
        for owner, entry in self.all_entries():
            native_guards.settle_when_built(self.config, owner, entry.guards)
        if not self.unsettled:  # not built at once: the fast path without the count meanwhile
            self.fast = self._first_entry_fast_path()

    def settle_guards(self) -> None:
        self.unsettled = False  # first: a check built from here on asks again
        for entry in self.entries:
            entry.guards.settle()

    def reset(self) -> None:
        self.fast = _always_miss
        self.entries.clear()
        self._resume.clear()
        self._forced.clear()
        self.failures.clear()
        self.eager_fallback = False
        self.warmed_up = False
        self.frame_id = None


_MISS = object()
_frame_ids = itertools.count()
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13))
"""CPython versions whose bytecode capture handles (`_unsupported_python` for the others)."""
_warned_unsupported_python: list = []


def _always_miss(*args, **kwargs):
    return _MISS


def _fast_path(fn: types.FunctionType, entry: CacheEntry, hot: Callable | None = None) -> Callable | None:
    """One generated function for the common case: bind, check the first entry's guards, run it.

    It has fn's signature (so CPython binds the arguments) and the guard statements
    inline, saving the calls of the general path; on a miss it returns _MISS, as it
    does when a guard raises (an attribute or key it reads is gone: the general path
    then reads that as a failed guard). The graph inputs the guards read are handed
    to the entry's restore function, which would otherwise read each through its
    source again. hot: called once, at the native_guards.HOT_CALLS-th call."""
    run = getattr(entry, "run_bound", None)
    check = entry.guards.check
    if run is None:
        return None
    binder_text, binder_env = _binder_source(fn)
    names = check.__code__.co_varnames[1:check.__code__.co_argcount]
    env = dict(zip(names, check.__defaults__))
    body = entry.guards.source_text.split("\n")[1:]
    body = ["    " + line.replace("return False", "return _MISS") for line in body
            if line.strip() and line.strip() != "return True"]
    header, returned = binder_text.split("\n")[0], binder_text.split("\n")[1].replace("return", "L =", 1)
    count = [] if hot is None else [f"    if _count() == {native_guards.HOT_CALLS}: _hot()"]
    text = "\n".join([header, returned, *count, "    try:", *(body or ["        pass"]), "    except Exception:",
                      "        return _MISS", f"    return _run(L{_read_inputs(entry)})"]) + "\n"
    env.update(binder_env, _MISS=_MISS, _run=run, _count=itertools.count(1).__next__, _hot=hot)
    namespace: dict = {}
    exec(builtins.compile(text, f"<tensorjit fast path of {fn.__qualname__}>", "exec"), env, namespace)
    return namespace["bind"]


def _read_inputs(entry: CacheEntry) -> str:
    """`, (v3, v7, ...)`: the guard locals holding the restore function's graph inputs, or
    nothing where the restore function reads no inputs or a guard did not read one of them."""
    sources = getattr(entry.run_bound, "input_sources", None)
    read = entry.guards.read
    if not sources or any(source not in read for source in sources):
        return ""
    return f", ({''.join(read[source] + ', ' for source in sources)})"


def _fast_path_at_next_call(compiled: CompiledFunction) -> Callable:
    """A `fast` that builds the fast path of the first entry when it is first called, after the
    entries' guards take a native check built since (`CompiledGuards.settle`)."""
    def build_then_call(*args, **kwargs):
        if compiled.unsettled:
            compiled.settle_guards()
        compiled.fast = compiled._first_entry_fast_path()
        return compiled.fast(*args, **kwargs)
    return build_then_call


def _make_binder(fn: types.FunctionType) -> Callable:
    text, env = _binder_source(fn)
    namespace: dict = {}
    exec(text, env, namespace)
    return namespace["bind"]


def _binder_source(fn: types.FunctionType) -> tuple[str, dict]:
    """Text of a function with fn's signature that returns its arguments in co_varnames order."""
    code = fn.__code__
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    params, env = [], {}
    first_default = npos - len(defaults)
    for i, name in enumerate(names[:npos]):
        if i >= first_default:
            env[f"_d{i}"] = defaults[i - first_default]
            params.append(f"{name}=_d{i}")
        else:
            params.append(name)
        if i + 1 == code.co_posonlyargcount:
            params.append("/")
    index = npos + nkw
    if code.co_flags & 0x04:
        params.append("*" + names[index])
        index += 1
    elif nkw:
        params.append("*")
    for name in names[npos:npos + nkw]:
        if name in kwdefaults:
            env[f"_k_{name}"] = kwdefaults[name]
            params.append(f"{name}=_k_{name}")
        else:
            params.append(name)
    if code.co_flags & 0x08:
        params.append("**" + names[index])
        index += 1
    returned = ", ".join(names[:index])
    text = f"def bind({', '.join(params)}):\n    return ({returned}{',' if index else ''})\n"
    return text, env


def _wrap_callee(obj, settings: tuple | None = None):
    """At a graph break, calls from the eager step into Python functions are captured too."""
    settings = settings or _current_backend
    if isinstance(obj, CompiledFunction) or settings is None:
        return obj
    if isinstance(obj, types.FunctionType) and obj.__code__ not in _disabled_codes \
            and not (obj.__code__.co_flags & 0x3a0) and not _is_library(obj):
        # Kept on the function itself: a cycle the collector can free, unlike a weak-key
        # dictionary whose value refers back to its key.
        cached = obj.__dict__.get("_tensorjit_compiled")
        if cached is None or cached[0] != settings:
            cached = obj.__dict__["_tensorjit_compiled"] = (settings, CompiledFunction(obj, *settings))
        return cached[1]
    if isinstance(obj, torch.nn.Module) and not isinstance(obj, OptimizedModule):
        forward = type(obj).forward
        if not isinstance(forward, types.FunctionType):
            return obj
        if any_hooks(obj):  # capture could not inline its hooks: run them here, forward compiled
            compiled = _wrap_callee(forward, settings)
            return functools.partial(_hooks_around, compiled, obj)
        compiled = _wrap_callee(forward, settings)
        return obj if compiled is forward else functools.partial(compiled, obj)
    if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
        inner = _wrap_callee(obj.__func__, settings)
        return obj if inner is obj.__func__ else types.MethodType(inner, obj.__self__)
    return obj


def _is_library(fn) -> bool:
    module = fn.__globals__.get("__name__", "") or ""
    if module.startswith(_COMPILED_LIBRARY_MODULES):
        from .capture.skipfiles import is_skipped
        return is_skipped(module, fn.__code__)  # a scheduler's step runs eagerly, as Dynamo skips it
    return module.split(".")[0] in ("torch", "tensorjit", "numpy", "logging", "warnings", "builtins")


_COMPILED_LIBRARY_MODULES = ("torch.optim.",)
"""torch code that is compiled when reached at a graph break, as Dynamo compiles its frames: the
optimizers' step wrappers break (their _use_grad calls torch._dynamo.graph_break()) around the update
that should be one graph."""


def call_module(module, *args, **kwargs):
    """Compiled in place of `module(...)` when the module has hooks: capture inlines
    nn.Module.__call__'s hook protocol around forward (see capture/module_call.py)."""
    return module(*args, **kwargs)


def _hooks_around(forward, module, *args, **kwargs):
    """`module(*args, **kwargs)` with `forward` (compiled) in place of the module's forward:
    nn.Module.__call__'s forward hook protocol, run in Python. A module with backward hooks
    runs wholly through its own __call__ (they wrap forward's inputs and outputs)."""
    hooks = torch.nn.modules.module
    if module._backward_hooks or module._backward_pre_hooks or hooks._global_backward_hooks \
            or hooks._global_backward_pre_hooks:
        return module(*args, **kwargs)
    for hook_id, hook in (*hooks._global_forward_pre_hooks.items(), *module._forward_pre_hooks.items()):
        if hook_id in module._forward_pre_hooks_with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {result}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    output = forward(module, *args, **kwargs)
    for hook_id, hook in (*hooks._global_forward_hooks.items(), *module._forward_hooks.items()):
        if hook_id in module._forward_hooks_with_kwargs or hook_id in hooks._global_forward_hooks_with_kwargs:
            result = hook(module, args, kwargs, output)
        else:
            result = hook(module, args, output)
        if result is not None:
            output = result
    return output


_module_callers: list[tuple[tuple, CompiledFunction]] = []


def _module_caller(settings: tuple) -> CompiledFunction:
    """The compiled `call_module` for these compile settings (one cache of entries per settings)."""
    for known, compiled in _module_callers:
        if known == settings:
            return compiled
    compiled = CompiledFunction(call_module, *settings)
    _module_callers.append((settings, compiled))
    return compiled


_current_backend: tuple | None = None
_disabled_codes: set = set()
stance = None
"""The compiler stance (`tensorjit.compiler.set_stance`); None while it is the plain default."""


class OptimizedModule(torch.nn.Module):
    """The compiled form of an nn.Module: calls go through a compiled forward; all else reaches the original."""

    def __init__(self, module: torch.nn.Module, compiled_forward: CompiledFunction) -> None:
        super().__init__()
        self._orig_mod = module
        self._compiled_forward = compiled_forward
        # A plain reference beside the registered submodule: reading `_orig_mod` goes
        # through nn.Module.__getattr__, which costs more than the rest of a cached call.
        object.__setattr__(self, "_target", module)

    def __call__(self, *args, **kwargs):
        module = self._target
        if any_hooks(module):  # hooks are captured with forward, in one graph (a backward hook breaks it)
            return _module_caller(self._compiled_forward.settings())(module, *args, **kwargs)
        return self._compiled_forward(module, *args, **kwargs)

    def forward(self, *args, **kwargs):
        return self._compiled_forward(self._orig_mod, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_orig_mod", "_compiled_forward"):
            return self.__dict__["_modules"][name] if name == "_orig_mod" else self.__dict__[name]
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_orig_mod", "_compiled_forward", "_target") or \
                "_orig_mod" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    @property
    def training(self) -> bool:
        return self._orig_mod.training if "_orig_mod" in self.__dict__.get("_modules", {}) else True

    @training.setter
    def training(self, value: bool) -> None:
        if "_orig_mod" in self.__dict__.get("_modules", {}):
            self._orig_mod.training = value

    def train(self, mode: bool = True):
        self._orig_mod.train(mode)
        return self

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def __repr__(self) -> str:
        return f"OptimizedModule({self._orig_mod!r})"

    def __dir__(self):
        return dir(self._orig_mod)


def _resolve_config(mode: str | None, options: dict | None) -> Config:
    cfg = default_config.replace()
    if mode is not None:
        cfg = cfg.replace(**MODES[mode])
    if options:
        cfg = cfg.replace(**options)
    return cfg


_inductor_warned = False


def _resolve_backend(backend) -> tuple[Callable, str]:
    global _inductor_warned
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
    try:
        return lookup_backend(backend), name
    except RuntimeError:
        if backend != "inductor":
            raise
        if not _inductor_warned:
            warnings.warn("tensorjit: the inductor backend is unavailable; graphs run eagerly")
            _inductor_warned = True
        return lookup_backend("eager"), "eager"


_Target = TypeVar("_Target", bound=Callable[..., Any])


@overload
def compile(model: _Target, *, fullgraph: bool = ..., dynamic: bool | None = ...,
            backend: str | Callable | None = ..., mode: str | None = ..., options: dict | None = ...,
            disable: bool = ..., recompile_limit: int | None = ...) -> _Target: ...


@overload
def compile(model: None = ..., *, fullgraph: bool = ..., dynamic: bool | None = ...,
            backend: str | Callable | None = ..., mode: str | None = ..., options: dict | None = ...,
            disable: bool = ..., recompile_limit: int | None = ...) -> Callable[[_Target], _Target]: ...


def compile(model: Callable | None = None, *, fullgraph: bool = False, dynamic: bool | None = None,
            backend: str | Callable | None = None, mode: str | None = None, options: dict | None = None,
            disable: bool = False, recompile_limit: int | None = None) -> Any:
    """Compile a function or nn.Module; usable as `compile(fn)`, `@compile` and `@compile(...)`.

    backend=None means `tensorjit.compiler.get_default_backend()` ("inductor" unless set);
    recompile_limit caps this function's entries (else config.cache_size_limit)."""
    check_compile_arguments(model, fullgraph, dynamic, mode, options, disable)
    config = _resolve_config(mode, options)
    if recompile_limit is not None:
        if isinstance(recompile_limit, bool) or not isinstance(recompile_limit, int) or recompile_limit < 1:
            raise ValueError(f"tensorjit.compile: recompile_limit must be a positive int, got {recompile_limit!r}")
        config = config.replace(cache_size_limit=recompile_limit)
    if backend is None:
        backend = get_default_backend()
    backend_fn, backend_name = _resolve_backend(backend)
    if backend_name in ("inductor", "cudagraphs"):  # the mode and options reach the backend
        backend_fn = functools.partial(backend_fn, config=config)
        backend_fn.__name__ = backend_name

    def wrap(target: Callable):
        if disable:
            return target
        native_guards.prepare(target, config)  # a large module: start building the native tensor check
        if backend_name == "inductor" and isinstance(target, torch.nn.Module):
            from .backends.inductor import prepare
            prepare(target, config)  # a large CUDA module: start the kernel compile workers
        return _compile_target(target, backend_fn, backend_name, config, fullgraph, dynamic)

    if model is None:
        return wrap
    return wrap(model)


def _compile_target(target, backend, backend_name, config, fullgraph, dynamic=None):
    global _current_backend
    _current_backend = (backend, config, fullgraph, backend_name, dynamic)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is not None and code in _disabled_codes:
        return target
    if isinstance(target, functools.partial):
        inner = _compile_target(target.func, backend, backend_name, config, fullgraph, dynamic)
        return functools.partial(inner, *target.args, **target.keywords)
    if isinstance(target, torch.nn.Module):
        forward = type(target).forward
        if not isinstance(forward, types.FunctionType):
            raise TypeError(f"tensorjit.compile: {type(target).__name__}.forward is not a Python function")
        return OptimizedModule(target, CompiledFunction(forward, backend, config, fullgraph, backend_name, dynamic))
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        compiled = CompiledFunction(target.__func__, backend, config, fullgraph, backend_name, dynamic)
        return types.MethodType(compiled, target.__self__)
    if isinstance(target, types.FunctionType):
        if target.__code__.co_flags & 0x3a0:  # generators and coroutines run eagerly
            return target
        return CompiledFunction(target, backend, config, fullgraph, backend_name, dynamic)
    if isinstance(target, CompiledFunction):
        return target
    if callable(target):
        call = getattr(type(target), "__call__", None)
        if isinstance(call, types.FunctionType):
            compiled = CompiledFunction(call, backend, config, fullgraph, backend_name, dynamic)
            return types.MethodType(compiled, target)
        # A callable implemented in C (torch.add, a builtin): compiled as a Python function calling
        # it, as torch.compile does, so its call is captured (a torch op) or runs eagerly.
        return CompiledFunction(_forwarding(target), backend, config, fullgraph, backend_name, dynamic)
    raise TypeError(f"tensorjit.compile: expected a function, method or nn.Module, got {type(target).__name__}")


def _forwarding(target: Callable) -> types.FunctionType:
    def forward(*args, **kwargs):
        return target(*args, **kwargs)
    functools.update_wrapper(forward, target)
    return forward


class _CompilingGlobals(dict):
    """Globals of a function disabled with recursive=False: the functions it looks up are compiled.

    CPython reads globals through __getitem__ when they are not an exact dict, so each
    global a call reaches goes through `_wrap_callee`. Writes to globals from such a
    function land in this copy, not in the module (a documented limitation)."""

    def __init__(self, real: dict) -> None:
        super().__init__()
        self.real = real

    def __getitem__(self, name: str):
        value = self.real[name] if name in self.real else self.real["__builtins__"][name] \
            if isinstance(self.real.get("__builtins__"), dict) else getattr(self.real["__builtins__"], name)
        return _wrap_callee(value)

    def __contains__(self, name) -> bool:
        return name in self.real

    def get(self, name, default=None):
        return self[name] if name in self.real else default


class _DeferredCallee:
    """Compiles `fn` with the backend in use when it is first called."""

    def __init__(self, fn) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return _wrap_callee(self.fn)(*args, **kwargs)


def _holds_function(cell) -> bool:
    try:
        return isinstance(cell.cell_contents, types.FunctionType)
    except ValueError:
        return False


def disable(fn: Callable | None = None, recursive: bool = True, *, reason: str | None = None,
            wrapping: bool = True):
    """Exclude `fn` from capture: calls to it run eagerly (a graph break where it is called).

    With recursive=False only fn's own frame runs eagerly; the functions it calls
    through its globals are still compiled. `reason` is shown in the graph-break log.
    `wrapping` is accepted for torch.compiler.disable's signature: a function is marked
    in place either way (recursive=False returns a copy whose globals compile callees)."""
    check_disable_arguments(fn, recursive)

    def mark(f):
        target = f.__func__ if isinstance(f, types.MethodType) else f
        if not recursive and isinstance(target, types.FunctionType):
            # Closure cells holding functions get a compiled callee in a new cell of their own.
            closure = tuple(types.CellType(_DeferredCallee(c.cell_contents))
                            if _holds_function(c) else c for c in (target.__closure__ or ())) or None
            clone = types.FunctionType(target.__code__, _CompilingGlobals(target.__globals__), target.__name__,
                                       target.__defaults__, closure)
            clone.__kwdefaults__ = target.__kwdefaults__
            functools.update_wrapper(clone, target)
            mark_disabled(target.__code__, reason)
            _disabled_codes.add(target.__code__)
            return clone
        if isinstance(target, types.FunctionType):
            mark_disabled(target.__code__, reason)
            _disabled_codes.add(target.__code__)
        if isinstance(f, torch.nn.Module):
            forward = type(f).forward
            mark_disabled(forward.__code__, reason)
            _disabled_codes.add(forward.__code__)
        return f
    if fn is None:
        return mark
    return mark(fn)


def _note_compile_time(function: CompiledFunction, entry: CacheEntry, seconds: float) -> None:
    """Split one capture's wall time into capture and backend; log it as `compile_time`."""
    backend = sum(graph.compile_seconds for graph in entry.graphs)
    entry.capture_seconds = seconds - backend
    code = function.fn.__code__
    logs.emit("compile_time", f"{function.fn.__qualname__} ({code.co_filename}:{code.co_firstlineno}): "
                              f"capture {entry.capture_seconds:.3f} s, backend {backend:.3f} s "
                              f"({len(entry.graphs)} graph(s))")


def all_compiled() -> list[CompiledFunction]:
    """Every live compiled function of this process, resume functions included."""
    return list(_all_compiled)


def reset() -> None:
    """Forget every compiled entry (as torch._dynamo.reset)."""
    global _frame_ids
    for compiled in list(_all_compiled):
        compiled.reset()
    _module_callers.clear()
    closure_entries.clear()
    _frame_ids = itertools.count()
    logs.clear()
