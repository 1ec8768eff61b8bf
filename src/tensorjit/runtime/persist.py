"""Pickling what a compiled entry is made of, for the warm-start cache (`warm_start.py`).

A compiled entry is generated Python (guards, restore, wrappers) plus the objects it
names: classes and functions (pickled by reference, as pickle does), ATen operators,
tensors, kernels loaded from shared libraries in the disk cache, and callables that
tensorjit built (an autograd.Function runner, a generated wrapper). Those carry
`__tensorjit_reduce__ = (rebuild, args, kwargs)`, set where they are built, and are pickled
as that call. Everything else that pickle cannot take by reference (a lambda, a module
instance, a closure over a local tensor) raises `NotPersistable`, naming it; the entry is
then not saved, and a later process compiles it as usual.

Objects read by reference are checked later against their source files: every module
that a pickled reference names outside torch and tensorjit (whose versions are part of
the cache key) is listed in `Pickler.modules`, and the loader compares the files.

Loading runs code from the cache, as loading a cached shared library does: the files are
read only from private directories (`disk_cache.private_directory`) and verified against
their checksums.
"""

from __future__ import annotations

import collections
import ctypes
import enum
import functools
import hashlib
import importlib
import io
import marshal
import pickle
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch

from . import disk_cache


class NotPersistable(Exception):
    """What an entry holds that cannot be saved (a lambda, a module instance, ...)."""


# -- kernels loaded from the disk cache ------------------------------------------------------
_kernels: dict[int, tuple[Any, str, str]] = {}
"""id(ctypes function) -> (the function, its library's path, symbol): kept for the process's life,
as the libraries are."""


def remember_kernel(function: Any, library_path: str, symbol: str) -> None:
    _kernels[id(function)] = (function, library_path, symbol)


cache_directory: list[str | None] = [None]
"""The cache directory of the compiled function being saved or loaded (its `Config.cache_dir`):
kernels are named relative to it (`warm_start` sets it around each save and load)."""


def load_kernel(relative: str, symbol: str, returns_int: bool = False):
    """A kernel (`extern "C" void|int64_t symbol(void**)`) of a library in the disk cache, verified;
    returns_int: it returns a count (an index check's), as `CppLaunch.statement` declared it."""
    path = disk_cache.cache_root(cache_directory[0]) / relative
    if not disk_cache.is_valid(path):
        raise FileNotFoundError(f"kernel library {relative} is missing or fails its checksum")
    function = getattr(_library(str(path)), symbol)
    function.argtypes = [ctypes.c_void_p]
    function.restype = ctypes.c_int64 if returns_int else None
    remember_kernel(function, str(path), symbol)
    return function


_libraries: dict[str, ctypes.CDLL] = {}


def _library(path: str) -> ctypes.CDLL:
    library = _libraries.get(path)
    if library is None:
        library = _libraries[path] = ctypes.CDLL(path)
    return library


def _relative_to_cache(path: str) -> str:
    root = Path(disk_cache.cache_root(cache_directory[0])).resolve()
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        raise NotPersistable(f"kernel library {path} is outside the cache directory") from None


# -- rebuilders --------------------------------------------------------------------------------
def rebuild(function: Callable, args: tuple, kwargs: dict) -> Any:
    """Calls what `__tensorjit_reduce__` named: how a tensorjit-built callable comes back."""
    return function(*args, **kwargs)


def operator(qualified: str, overload: str | None) -> Any:
    namespace, name = qualified.split("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet if overload is None else getattr(packet, overload)


def c_pointer_array(length: int) -> type:
    return ctypes.c_void_p * length


def module_named(name: str) -> types.ModuleType:
    return sys.modules.get(name) or importlib.import_module(name)


def module_dictionary(name: str) -> dict:
    return module_named(name).__dict__


def code_object(data: bytes) -> types.CodeType:
    return marshal.loads(data)


class CompiledText:
    """Generated Python (a wrapper, a restore function, a guard check) with its code object: saved with
    both, so that a later process skips compile(), the larger part of rebuilding an entry."""

    def __init__(self, text: str, label: str, code: types.CodeType | bytes | None = None) -> None:
        self.text, self.label = text, label
        self._code = marshal.loads(code) if isinstance(code, bytes) else code

    def code(self) -> types.CodeType:
        if self._code is None:
            self._code = compile(self.text, self.label, "exec")
        return self._code

    def __reduce__(self):
        return CompiledText, (self.text, self.label, marshal.dumps(self.code()))


def rebuild_runner(code: CompiledText, names: dict):
    """A generated wrapper (codegen/wrapper.py) from its code and the globals it names: how it is built,
    and how a saved one comes back (here, so that loading one imports no code generator)."""
    names = dict(names)
    names.pop("__builtins__", None)
    exec(code.code(), names)
    run = names["run"]
    run.wrapper_source = code.text
    return run


class GraphCode:
    """A GraphModule's forward as saved: its generated Python, the globals it names and the
    attributes it reads (constants, subgraphs), made into a function at its first call.

    Rebuilding a GraphModule from its pickle traces its code again (torch.fx's reduce); the
    graphs kept for a fallback (a wrapper's other layouts, an eager backend) only need to run."""

    def __init__(self, source: str, names: dict, attributes: dict, boxed: bool = False) -> None:
        self.source, self.names, self.attributes = source, names, attributes
        self.takes_boxed_inputs = boxed  # source from runtime/boxed.py: called with one list
        self._forward = None

    @staticmethod
    def of(gm: torch.fx.GraphModule, code=None, boxed: bool = False) -> "GraphCode":
        """code: gm's torch.fx PythonCode where not its own (boxed: a boxed signature's)."""
        code = code or gm.graph.python_code(root_module="self")
        names = {k: v for k, v in code.globals.items() if k != "__builtins__"}
        attributes = {}
        for node in gm.graph.nodes:
            if node.op in ("get_attr", "call_module"):
                value = gm
                for part in node.target.split("."):
                    value = getattr(value, part)
                if isinstance(value, torch.fx.GraphModule):
                    value = GraphCode.of(value)
                elif not isinstance(value, torch.Tensor):
                    raise NotPersistable(f"a graph attribute {node.target} of type {type(value).__name__}")
                attributes[node.target] = value
        return GraphCode(code.src, names, attributes, boxed)

    def __reduce__(self):
        return GraphCode, (self.source, self.names, self.attributes, self.takes_boxed_inputs)

    def __call__(self, *args):
        if self._forward is None:
            holder = types.SimpleNamespace()
            for path, value in self.attributes.items():
                *parents, last = path.split(".")
                place = holder
                for part in parents:
                    if not hasattr(place, part):
                        setattr(place, part, types.SimpleNamespace())
                    place = getattr(place, part)
                setattr(place, last, value)
            names = dict(self.names)
            exec(compile(self.source, "<tensorjit saved graph>", "exec"), names)
            self._forward = types.MethodType(names["forward"], holder)
        return self._forward(*args)


class SavedGraphModule:
    """A GraphModule that a saved callable compiles again later (a dynamic graph's new sizes):
    pickled as torch.fx pickles it, rebuilt (traced again) only when `get()` is first called."""

    def __init__(self, reduce: tuple) -> None:
        self.reduce = reduce
        self._module = None

    @staticmethod
    def of(gm) -> "SavedGraphModule":
        if isinstance(gm, SavedGraphModule):
            return gm
        saved = SavedGraphModule(gm.__reduce__())
        saved._module = gm
        return saved

    def __reduce__(self):
        return SavedGraphModule, (self.reduce,)

    def get(self) -> torch.fx.GraphModule:
        if self._module is None:
            import torch._higher_order_ops.triton_kernel_wrap  # noqa: F401 - read while the graph is traced again
            function, arguments = self.reduce
            self._module = function(*arguments)
        return self._module


def code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does (its bytecode, constants, names), nested code included."""
    digest = hashlib.sha256()

    def feed(c: types.CodeType) -> None:
        for part in (c.co_code, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars, c.co_qualname,
                     c.co_filename, c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags):
            digest.update(repr(part).encode() if not isinstance(part, bytes) else part)
        for constant in c.co_consts:
            if isinstance(constant, types.CodeType):
                feed(constant)
            else:
                digest.update(f"{type(constant).__name__}:{constant!r}".encode())
    feed(code)
    return digest.hexdigest()


class SavedCode:
    """Stands for a code object in a saved identity guard (a decorated method's wrapped function, a
    closure's code): the live code object matches when its `code_digest` is the saved one."""

    def __init__(self, digest: str) -> None:
        self.digest = digest
        self.known: types.CodeType | None = None  # the code object that matched, compared by identity after

    def __reduce__(self):
        return SavedCode, (self.digest,)

    def matches(self, code) -> bool:
        if code is self.known:
            return True
        if isinstance(code, types.CodeType) and code_digest(code) == self.digest:
            self.known = code
            return True
        return False


class ModuleDict:
    """Stands for a module's `__dict__` in a saved guard (a closure's `__globals__`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return module_dictionary, (self.name,)

    def live(self) -> dict:
        return module_dictionary(self.name)


_VALUE_TYPES = (torch.Tensor, torch.Size, torch.dtype, torch.device, torch.layout, torch.memory_format, slice,
                range, complex, type(Ellipsis), type(NotImplemented), bool, int, float, str, bytes, tuple, list,
                dict, set, frozenset, type(None), enum.Enum, collections.OrderedDict, torch.storage.TypedStorage,
                torch.UntypedStorage)


def _saved_by_value(obj) -> bool:
    """Objects a copy of which is as good as the original: values, tensors, tensorjit's own records."""
    if isinstance(obj, _VALUE_TYPES) and not isinstance(obj, torch.nn.Parameter) and \
            type(obj).__module__ != "torch._subclasses.fake_tensor":
        return type(obj) in (torch.Tensor, torch.Size) or not isinstance(obj, torch.Tensor)
    return type(obj) in _record_types()


@functools.lru_cache(maxsize=1)
def _record_types() -> frozenset:
    """tensorjit's classes whose instances are plain records, a copy as good as the original (never a
    runner holding device state, as a CUDA graph's)."""
    from ..capture.guards import TensorSignature
    from ..capture.sources import Source
    from ..config import Config

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)
    return frozenset({Config, TensorSignature, *subclasses(Source), CompiledText, GraphCode, SavedGraphModule,
                      SavedCode, ModuleDict})

_TYPES_MODULE = {value: name for name, value in vars(types).items() if isinstance(value, type)}

_VERSIONED = ("torch", "tensorjit", "builtins", "ctypes", "_operator", "operator", "math", "types", "functools",
              "collections", "itertools", "typing", "_collections", "_functools", "sympy", "triton")
"""Modules whose contents the cache key's versions (torch, tensorjit, Python, Triton) already fix."""


class Pickler(pickle.Pickler):
    """pickle.Pickler that knows tensorjit's rebuildable objects and refuses the rest by name.

    `persistent` maps objects to ids that the loader resolves itself (the compiled function's
    resume functions); `modules` collects the modules named by references (checked at load)."""

    def __init__(self, file, persistent: Callable[[Any], Any] | None = None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._persistent = persistent
        self.modules: set[str] = set()

    def persistent_id(self, obj):
        return self._persistent(obj) if self._persistent is not None else None

    def reducer_override(self, obj):
        reduce = _tensorjit_reduce(obj)
        if reduce is not None:
            return rebuild, reduce
        kind = type(obj)
        if kind is torch._ops.OpOverload:
            return operator, (obj._schema.name, obj._overloadname)
        if kind is torch._ops.OpOverloadPacket:
            return operator, (obj._qualified_op_name, None)
        if isinstance(obj, types.ModuleType):
            if sys.modules.get(obj.__name__) is not obj:
                raise NotPersistable(f"module {obj.__name__} is not importable by its name")
            self._note_module(obj.__name__)
            return module_named, (obj.__name__,)
        if isinstance(obj, type) and obj in _TYPES_MODULE:  # FunctionType & co. have no name in builtins
            return getattr, (types, _TYPES_MODULE[obj])
        if isinstance(obj, types.CodeType):
            return code_object, (marshal.dumps(obj),)
        if id(obj) in _kernels and _kernels[id(obj)][0] is obj:
            _, path, symbol = _kernels[id(obj)]
            return load_kernel, (_relative_to_cache(path), symbol, obj.restype is ctypes.c_int64)
        if isinstance(obj, type) and issubclass(obj, ctypes.Array) and obj._type_ is ctypes.c_void_p:
            return c_pointer_array, (obj._length_,)
        if isinstance(obj, torch.fx.GraphModule):
            return GraphCode.of(obj).__reduce__()
        if isinstance(obj, torch.nn.Module):
            raise NotPersistable(f"an nn.Module instance ({type(obj).__qualname__}) held by the entry")
        if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.fx.GraphModule) \
                and obj.__func__.__name__ in ("forward", "__call__", "_wrapped_call"):
            return GraphCode.of(obj.__self__).__reduce__()
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None)
            if module:
                self._note_module(module)
            if isinstance(obj, types.FunctionType) and "<locals>" in obj.__qualname__:
                raise NotPersistable(f"a local function {obj.__qualname__}")
            if isinstance(obj, types.FunctionType) and obj.__name__ == "<lambda>":
                raise NotPersistable(f"a lambda ({obj.__code__.co_filename}:{obj.__code__.co_firstlineno})")
            return NotImplemented
        if not _saved_by_value(obj):
            # A copy would stand where the entry had this very object (a callable compared by
            # identity, a user's configuration object): not saved.
            raise NotPersistable(f"an object of type {kind.__module__}.{kind.__qualname__}")
        return NotImplemented

    def _note_module(self, name: str) -> None:
        if name.split(".")[0] not in _VERSIONED:
            self.modules.add(name)


def _tensorjit_reduce(obj):
    try:
        reduce = obj.__dict__.get("__tensorjit_reduce__") if hasattr(obj, "__dict__") else None
    except Exception:  # noqa: BLE001 - objects whose __dict__ raises are pickled as pickle would
        return None
    return reduce


def set_reduce(obj: Any, function: Callable, *args, **kwargs) -> Any:
    """Mark `obj` (a function tensorjit built) as rebuilt by `function(*args, **kwargs)` when saved."""
    obj.__tensorjit_reduce__ = (function, args, kwargs)
    return obj


def dumps(obj: Any, persistent: Callable[[Any], Any] | None = None) -> tuple[bytes, set[str]]:
    """(pickled bytes, modules named by reference); raises NotPersistable with the reason."""
    buffer = io.BytesIO()
    pickler = Pickler(buffer, persistent)
    try:
        pickler.dump(obj)
    except NotPersistable:
        raise
    except RecursionError:
        raise NotPersistable("an object graph too deep to save") from None
    except Exception as error:  # noqa: BLE001 - pickle raises many kinds for what it cannot take
        raise NotPersistable(f"{type(error).__name__}: {str(error)[:200]}") from None
    return buffer.getvalue(), pickler.modules


class Unpickler(pickle.Unpickler):
    def __init__(self, file, persistent: Callable[[Any], Any] | None = None) -> None:
        super().__init__(file)
        self._persistent = persistent

    def persistent_load(self, pid):
        if self._persistent is None:
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        return self._persistent(pid)


def loads(data: bytes, persistent: Callable[[Any], Any] | None = None) -> Any:
    return Unpickler(io.BytesIO(data), persistent).load()
