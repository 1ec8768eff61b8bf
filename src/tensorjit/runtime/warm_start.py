"""Warm start: a later process runs the entries an earlier one compiled, with no capture,
autograd or code generation.

Per compiled code object (a `CompiledFunction` that is not a resume function) one record
lives in the disk cache, `<cache>/<2 hex>/<key>.entry` with its checksum sidecar, written
and checked as the kernel libraries are (private directories, 0600 files, atomic replace).
The key names the function (file, qualified name, first line), the backend, the options
that change what is compiled, and `dynamic`/`fullgraph`. The record holds:

- the versions it was made with (tensorjit, torch, Triton, Python, the CPU), and a digest of
  the function's code;
- the digests of every source file capture ran code from, and the file of every module a
  saved reference names (torch's and tensorjit's own files are covered by their versions);
- one pickled entry per compiled entry (`runtime/persist.py`): its guards as data (built
  again into a check function), the restore function's text and constants, the compiled
  graph (the generated wrappers, kernels named by their library in the cache, the
  autograd.Function's two halves), a graph break's transformed bytecode and the resume
  functions it continues in, whose code and entries are saved too;
- the automatic-dynamic history (which sizes were seen changing).

A `CompiledFunction` that misses its first call loads the record once (`load`): anything
stale, corrupt or unloadable (a changed file, another version, a bad pickle, a kernel library
gone) leaves it compiling as usual, with a `cache` log line saying why; a record this process
wrote itself is not read back (in-process behaviour stays as before). After every compile the
record is written again (`save`), and at exit, for graphs compiled later for new sizes. What
cannot be saved (a lambda in the graph, a custom backend's callable, CUDA graph runners) keeps
its entry out of the record, logged.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import marshal
import os
import pickle
import platform
import sys
import types
import uuid
import weakref
from pathlib import Path
from typing import Any

import torch

from .. import logs
from . import disk_cache, persist
from .persist import NotPersistable, code_digest

FORMAT = 1
PROCESS = uuid.uuid4().hex
"""This process: a record it wrote itself is not loaded back."""

PERSISTED_BACKENDS = ("inductor", "eager", "aot_eager")
"""Backends whose compiled graphs the cache knows how to save; a user's backend returns any callable."""

_UNKEYED_OPTIONS = ("cache_dir", "progress", "compile_threads", "warm_start")
"""Options that do not change what is compiled."""


def enabled(owner) -> bool:
    return bool(getattr(owner.config, "warm_start", False)) and owner.backend_name in PERSISTED_BACKENDS \
        and owner.origin is None and _built_in(owner.backend)


def _built_in(backend) -> bool:
    """The backend is tensorjit's own (a user's function that happens to be called "eager" may count
    its compiles or keep state that a saved result would skip)."""
    function = getattr(backend, "func", backend)
    return (getattr(function, "__module__", None) or "").startswith("tensorjit.")


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """What a saved entry was made with; any difference recompiles."""
    from .. import __version__
    return {"tensorjit": __version__, "tensorjit files": _package_fingerprint(), "torch": torch.__version__,
            "triton": _triton_version(), "python": sys.version,
            "platform": f"{sys.platform} {platform.machine()}", "cpu": _cpu()}


def _package_fingerprint(root: str | None = None) -> str:
    """tensorjit's own source files by name, size and modification time: a checkout edited
    under one version number (development, an editable install) must not run entries an
    older compiler made. About 200 stat calls, no reads."""
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for directory, subdirectories, files in sorted(os.walk(root)):
        subdirectories.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(directory, name))
                digest.update(f"{directory}/{name}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def _triton_version() -> str:
    """Triton's version without importing it, from its dist-info directory (importlib.metadata scans
    every installed distribution: 10 ms of a warm start)."""
    import importlib.util
    module = sys.modules.get("triton")
    if module is not None and hasattr(module, "__version__"):
        return module.__version__
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "none"
    site = os.path.dirname(os.path.dirname(spec.origin))
    for name in sorted(os.listdir(site)):
        if name.startswith("triton-") and name.endswith((".dist-info", ".egg-info")):
            return name[len("triton-"):].rsplit(".", 1)[0]
    from importlib.metadata import version
    return version("triton")


def _cpu() -> str:
    """The CPU model and flags: kernels are built with -march=native."""
    try:
        from ..codegen.cpp.compiler import machine_identity
        return hashlib.sha256(machine_identity().encode()).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - no C++ path: nothing native is saved
        return platform.machine()


def _option_text(value: Any) -> str:
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    return repr(value)


def _key_parts(owner) -> tuple:
    code = owner.fn.__code__
    options = sorted((f.name, _option_text(getattr(owner.config, f.name))) for f in dataclasses.fields(owner.config)
                     if f.name not in _UNKEYED_OPTIONS)
    return ("tensorjit warm start", code.co_filename, code.co_qualname, code.co_firstlineno, owner.backend_name,
            repr(options), owner.dynamic, owner.fullgraph)


def _path(owner) -> Path:
    key = disk_cache.cache_key(_key_parts(owner))
    return disk_cache.cache_root(owner.config.cache_dir) / key[:2] / f"{key}.entry"


def _name(owner) -> str:
    code = owner.fn.__code__
    return f"{owner.fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"


# -- source files ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _versioned_directories() -> tuple[str, ...]:
    import tensorjit
    return tuple(os.path.dirname(os.path.realpath(m.__file__)) + os.sep for m in (torch, tensorjit))


_digests: dict[str, str | None] = {}


def file_digest(path: str) -> str | None:
    """sha256 of a source file's bytes (once per process), None when it is not a readable file."""
    if path not in _digests:
        try:
            with open(path, "rb") as handle:
                _digests[path] = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            _digests[path] = None
    return _digests[path]


def _file_stamp(path: str) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _file_unchanged(path: str, saved) -> bool:
    """saved: (digest, size, mtime) as `_fingerprint` recorded it. The same size and modification
    time stand for the same bytes (as for Python's own .pyc files); otherwise the digest decides
    (a cache carried to another machine by save_cache_artifacts)."""
    digest, *stamp = saved
    if stamp and _file_stamp(path) == tuple(stamp):
        return True
    return file_digest(path) == digest


def _checked_file(path: str) -> bool:
    """Whether `path` needs a digest (torch's and tensorjit's files are fixed by their versions)."""
    if path.startswith("<frozen"):  # the standard library's frozen modules: fixed by Python's version
        return False
    return not os.path.realpath(path).startswith(_versioned_directories())


_module_files: dict[str, str | None] = {}


def _module_file(name: str) -> str | None:
    """A module's file as first seen: CPython removes `__main__.__file__` once the script returns,
    before the records are written again at exit."""
    if name not in _module_files:
        module = sys.modules.get(name)
        if module is None:
            raise NotPersistable(f"a reference to module {name}, which is not imported")
        _module_files[name] = getattr(module, "__file__", None)
    return _module_files[name]


def _fingerprint(files: set[str], modules: set[str]) -> dict:
    digests, module_files = {}, {}
    for name in sorted(modules):
        file = _module_file(name)
        if file is None and name == "__main__":
            raise NotPersistable("a reference to __main__, which has no file (python -c, a notebook)")
        module_files[name] = file
        if file is not None:
            files = files | {file}
    for path in sorted(files):
        if not _checked_file(path):
            continue
        digest = file_digest(path)
        if digest is None:
            raise NotPersistable(f"code from {path}, which is not a file that can be checked")
        digests[path] = (digest, *(_file_stamp(path) or ()))
    return {"files": digests, "modules": module_files}


def _stale(record: dict, owner) -> str | None:
    """Why a record no longer fits this process (None: it does)."""
    if record.get("format") != FORMAT:
        return f"saved in format {record.get('format')}, this tensorjit reads {FORMAT}"
    for what, now in versions().items():
        then = record["versions"].get(what)
        if then != now:
            return f"saved with {what} {then}, this process has {now}"
    if record["code"] != code_digest(owner.fn.__code__):
        return "the function's code changed"
    return _changed_sources(record["fingerprint"])


def _changed_sources(fingerprint: dict) -> str | None:
    for name, file in fingerprint["modules"].items():
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None) != file:
            return f"module {name} is now {getattr(module, '__file__', None)}, was {file}"
    for path, saved in fingerprint["files"].items():
        if not _file_unchanged(path, saved):
            return f"{path} changed"
    return None


# -- saving ---------------------------------------------------------------------------------------
def _persistent_id(obj):
    """The compiled functions an entry refers to, saved by what names them in the loading process."""
    from ..api import CompiledFunction
    if isinstance(obj, CompiledFunction):
        key = getattr(obj, "resume_key", None)
        if key is None:
            raise NotPersistable(f"a compiled function ({obj.__qualname__}) held by the entry")
        return ("resume", key)
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, CompiledFunction) \
            and obj.__func__ is CompiledFunction.wrap_callee:
        return ("wrap_callee",)
    return None


def _saved_entry(entry) -> tuple[bytes, set[str], set[str]]:
    """(pickled entry, modules it names, files capture read) or NotPersistable."""
    loaded = getattr(entry, "warm_saved", None)
    if loaded is not None:
        return loaded
    recipe = entry.recipe
    if recipe is None:
        raise NotPersistable("an entry built outside capture's three kinds")
    saved = entry.guards.saved
    if isinstance(saved, NotPersistable):
        # a new exception each time: raising the stored one would tie this call's frames (and the
        # tensors they hold) to the entry through its traceback
        raise NotPersistable(*saved.args)
    if saved is None:
        raise NotPersistable("its guards were not saved")
    guard_bytes, guard_modules = saved
    payload: dict[str, Any] = {"kind": recipe["kind"], "guards": guard_bytes}
    if recipe["kind"] != "eager":
        payload["restore"] = recipe["restore"]
    if recipe["kind"] == "break":
        payload["code"] = recipe["code"]
        payload["resumes"] = recipe["resumes"]
    data, modules = persist.dumps(payload, _persistent_id)
    return data, modules | guard_modules, set(recipe["files"])


def _saved_entries(function, skipped: list[str]) -> list[tuple[bytes, set[str], set[str]]]:
    saved = []
    for index, entry in enumerate(function.entries):
        try:
            saved.append(_saved_entry(entry))
        except NotPersistable as reason:
            skipped.append(f"entry {index} of {function.fn.__qualname__}: {reason}")
    return saved


def _record(owner, skipped: list[str]) -> dict | None:
    entries = _saved_entries(owner, skipped)
    resumes = [(key, marshal.dumps(resume.fn.__code__), _saved_entries(resume, skipped))
               for key, resume in owner._resume.items()]
    if not entries:
        return None
    files, modules = {owner.fn.__code__.co_filename}, set()
    for _, entry_modules, entry_files in [*entries, *(e for _, _, saved in resumes for e in saved)]:
        files |= entry_files
        modules |= entry_modules
    return {"format": FORMAT, "process": PROCESS, "versions": versions(), "code": code_digest(owner.fn.__code__),
            "fingerprint": _fingerprint(files, modules), "entries": entries, "resumes": resumes,
            "automatic": (owner.dynamic_dims, owner.last_shapes, owner.dynamic_ints, owner.last_ints)}


_saved: "weakref.WeakSet" = weakref.WeakSet()


def save(owner) -> None:
    """Write `owner`'s record (its root function's: a resume function's entries live there)."""
    while owner.origin is not None:
        owner = owner.origin[0]
    if not enabled(owner):
        return
    skipped: list[str] = []
    persist.cache_directory[0] = owner.config.cache_dir
    try:
        record = _record(owner, skipped)
        if record is None:
            logs.emit("cache", f"not saved: {_name(owner)}: {'; '.join(skipped) or 'no entries'}")
            return
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    except NotPersistable as reason:
        logs.emit("cache", f"not saved: {_name(owner)}: {reason}")
        return
    if getattr(owner, "warm_written", None) == data:
        return
    try:
        def write(temp: str) -> None:
            with open(temp, "wb") as handle:
                handle.write(data)
        disk_cache.get_or_build(_key_parts(owner), write, suffix=".entry", cache_dir=owner.config.cache_dir,
                                rebuild=True)
    except (OSError, disk_cache.UntrustedCache) as error:
        logs.emit("cache", f"not saved: {_name(owner)}: {error}")
        return
    owner.warm_written = data
    _saved.add(owner)
    left_out = f" (left out: {'; '.join(skipped)})" if skipped else ""
    logs.emit("cache", f"saved: {_name(owner)}: {len(record['entries'])} entries, "
                       f"{sum(len(s) for _, _, s in record['resumes'])} in resume functions{left_out}")


@atexit.register
def _save_at_exit() -> None:
    """Graphs compiled after the last capture (new sizes of a dynamic graph) are saved too."""
    for owner in list(_saved):
        try:
            save(owner)
        except Exception:  # noqa: BLE001 - exiting: the record written at the last compile stands
            pass


# -- loading --------------------------------------------------------------------------------------
def load(owner) -> bool:
    """Install `owner`'s saved entries (and its resume functions'); False when none fit."""
    if not enabled(owner):
        return False
    try:
        path = _path(owner)
    except disk_cache.UntrustedCache:
        return False
    if not path.exists():
        logs.emit("cache", f"miss: {_name(owner)}: nothing saved for this function, backend and options")
        return False
    try:
        disk_cache.private_directory(path.parent)  # as the kernel libraries: only from private directories
    except disk_cache.UntrustedCache:
        return False
    if not disk_cache.is_valid(path):
        logs.emit("cache", f"miss: {_name(owner)}: the saved entries fail their checksum (corrupt or not the "
                           f"user's own file)")
        return False
    persist.cache_directory[0] = owner.config.cache_dir
    try:
        record = pickle.loads(path.read_bytes())
        if record.get("process") == PROCESS:
            return False  # this process wrote it: its own entries are in memory or were reset on purpose
        reason = _stale(record, owner)
        if reason is None:
            installed = _install(owner, record)
            reason = _changed_sources(record["fingerprint"])  # modules the entries imported as they loaded
            if reason is None and installed:
                owner.warm_written = path.read_bytes()
                return True
            _uninstall(owner)
            reason = reason or "no saved entry could be loaded"
    except Exception as error:  # noqa: BLE001 - a bad record recompiles, never fails the call
        _uninstall(owner)
        reason = f"the saved entries could not be loaded ({type(error).__name__}: {str(error)[:200]})"
    logs.emit("cache", f"miss: {_name(owner)}: {reason}")
    return False


def _install(owner, record: dict) -> int:
    resumes = []
    for key, code, saved in record["resumes"]:
        index, depth, local_names, cell_names = key
        resumes.append((owner.resume_function(index, depth, list(local_names), list(cell_names),
                                              code=marshal.loads(code)), saved))
    count = 0
    for function, saved in [(owner, record["entries"]), *resumes]:
        for item in saved:
            function.entries.append(_load_entry(owner, function, item))
            count += 1
    dims, shapes, ints, last_ints = record["automatic"]
    if not owner.last_shapes:
        owner.dynamic_dims.update(dims)
        owner.last_shapes.update(shapes)
        owner.dynamic_ints.update(ints)
        owner.last_ints.update(last_ints)
    return count


def _uninstall(owner) -> None:
    owner.entries.clear()
    for resume in owner._resume.values():
        resume.entries.clear()


def _load_entry(root, function, saved: tuple):
    from ..capture.convert import rebuilt_entry

    def resolve(pid):
        if pid[0] == "resume":
            index, depth, local_names, cell_names = pid[1]
            return root.resume_function(index, depth, list(local_names), list(cell_names))
        if pid[0] == "wrap_callee":
            return function.wrap_callee
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")
    payload = persist.loads(saved[0], resolve)
    entry = rebuilt_entry(function, payload["kind"], payload["guards"], payload.get("restore"),
                          payload.get("code"), payload.get("resumes", ()))
    entry.warm_saved = saved
    return entry
