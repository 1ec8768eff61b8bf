"""On-disk cache of compiled artifacts (shared libraries, cubins, kernel sources).

Takes key parts (source text, toolchain versions, flags) and a build function;
`get_or_build` returns the path of a verified artifact, building it at most once
across concurrent processes (file lock + temp file + os.replace). Each artifact
has a sidecar "<file>.sha256" holding "size checksum"; an entry whose sidecar is
missing or disagrees (partial write, corruption) is rebuilt.

A checksum only catches accidents: anyone who can write to the cache can plant a
library with a matching sidecar, and loading a library runs its constructors. So
every directory the cache uses must be private (`private_directory`): the cache
directory and those below it owned by the current user and writable by no one
else, its ancestors owned by the user or root and writable by no one else unless
sticky (as /tmp). Directories the cache creates are 0700, artifacts 0600 (0700
for shared libraries). An untrusted directory raises `UntrustedCache`, after one
warning naming it; callers then run without the cache (ATen kernels).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Iterable


class UntrustedCache(RuntimeError):
    """A cache directory other users could write to (or that another user owns): not used."""


def current_uid() -> int:
    """The user that must own the cache (a function, so tests can pretend to be someone else)."""
    return os.geteuid()


def default_root() -> Path:
    return Path.home() / ".cache" / "tensorjit"


def cache_root(cache_dir: str | None = None) -> Path:
    """The cache directory (created 0700 with any missing parents), checked private."""
    return private_directory(Path(cache_dir) if cache_dir else default_root())


def private_directory(directory: Path | str) -> Path:
    """`directory`, created 0700 if missing; raises UntrustedCache unless it is private.

    The directory itself must be owned by the current user and not group- or
    world-writable; each ancestor of its real path must be owned by the user or
    root, and not writable by others unless sticky (another user could otherwise
    rename the cache away and put their own in its place)."""
    directory = Path(os.path.abspath(directory))
    _make_directories(directory)
    real = Path(os.path.realpath(directory))
    _check(real, _owned_and_private(real))
    for ancestor in real.parents:
        _check(ancestor, _safe_ancestor(ancestor), directory)
    return directory


def _make_directories(directory: Path) -> None:
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile: checked like any other
            pass


def _owned_and_private(path: Path) -> str | None:
    """Why `path` (a cache directory) cannot be trusted, or None."""
    info = os.stat(path)
    if info.st_uid != current_uid():
        return f"it is owned by uid {info.st_uid}, not by the current user (uid {current_uid()})"
    if info.st_mode & 0o022:
        return f"it is writable by {_who_writes(info.st_mode)} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _safe_ancestor(path: Path) -> str | None:
    """Why `path` (a parent of the cache) cannot be trusted, or None."""
    info = os.stat(path)
    if info.st_uid not in (current_uid(), 0):
        return f"it is owned by uid {info.st_uid}, neither the current user (uid {current_uid()}) nor root"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return (f"it is writable by {_who_writes(info.st_mode)} without the sticky bit "
                f"(mode {stat.S_IMODE(info.st_mode):04o})")
    return None


def _who_writes(mode: int) -> str:
    return " and ".join(who for who, bit in (("its group", 0o020), ("all users", 0o002)) if mode & bit)


_warned: set[str] = set()


def _check(path: Path, problem: str | None, cache: Path | None = None) -> None:
    if problem is None:
        return
    role = f"a parent of the cache directory {cache}" if cache else "the cache directory"
    message = (f"tensorjit: not using the compiled-kernel cache: {path} ({role}) cannot be trusted: {problem}. "
               f"Another user could plant code there that tensorjit would load. Compiled functions still run, "
               f"with ATen kernels instead of generated ones. Fix the permissions (chmod go-w, chown) or choose "
               f"another directory with TENSORJIT_CACHE_DIR or options={{'cache_dir': ...}}.")
    if str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    raise UntrustedCache(message)


def cache_key(key_parts: Iterable) -> str:
    digest = hashlib.sha256()
    for part in key_parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_owned_file(path: Path) -> bool:
    """A regular file (not a link) of the current user that only the user may write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == current_uid() and not info.st_mode & 0o022


def is_valid(path: Path) -> bool:
    """The artifact and its sidecar are the user's own files and agree (else it is rebuilt)."""
    sidecar = path.with_name(path.name + ".sha256")
    if not (is_owned_file(path) and is_owned_file(sidecar)):
        return False
    try:
        size, checksum = sidecar.read_text().split()
        return path.stat().st_size == int(size) and _file_digest(path) == checksum
    except (OSError, ValueError):
        return False


def get_or_build(key_parts: Iterable, build_fn: Callable[[str], None], *, suffix: str = ".so",
                 cache_dir: str | None = None, rebuild: bool = False) -> str:
    """Path of the artifact for `key_parts`; `build_fn(temp_path)` writes it when absent or invalid.

    rebuild=True discards an entry that verified but failed to load. Raises
    UntrustedCache when a directory on the way is not private."""
    key = cache_key(key_parts)
    directory = private_directory(cache_root(cache_dir) / key[:2])
    path = directory / f"{key}{suffix}"
    if not rebuild and is_valid(path):
        return str(path)
    lock_descriptor = os.open(directory / f"{key}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(lock_descriptor, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key; the others wait, then reuse
        try:
            if not rebuild and is_valid(path):
                return str(path)
            _build(directory, key, suffix, build_fn, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(path)


def _build(directory: Path, key: str, suffix: str, build_fn: Callable[[str], None], path: Path) -> None:
    descriptor, temp = tempfile.mkstemp(suffix=suffix, dir=directory)
    os.close(descriptor)
    try:
        build_fn(temp)
        # A compiler writes its output with the umask's mode (often 0755): readable by all.
        os.chmod(temp, 0o700 if suffix == ".so" else 0o600)
        temp_path = Path(temp)
        sidecar_text = f"{temp_path.stat().st_size} {_file_digest(temp_path)}\n"
        os.replace(temp, path)
        sidecar_temp = directory / f"{key}.{os.getpid()}.sidecar"
        with open(os.open(sidecar_temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.write(sidecar_text)
        os.replace(sidecar_temp, path.with_name(path.name + ".sha256"))
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def verified_entries(cache_dir: str | None = None) -> list[tuple[str, Path]]:
    """Every artifact that verifies against its sidecar, as (path relative to the root, path)."""
    root = cache_root(cache_dir)
    found = []
    for sidecar in sorted(root.glob("*/*.sha256")):
        path = sidecar.with_name(sidecar.name[:-len(".sha256")])
        if is_valid(path):
            found.append((str(path.relative_to(root)), path))
    return found


def install(relative: str, data: bytes, cache_dir: str | None = None) -> bool:
    """Write an artifact (and its sidecar) brought from elsewhere; False if a valid one is already there.

    `relative` is "<2 hex>/<key><suffix>", as `verified_entries` names them; the file is written
    as `get_or_build` writes its own (private directory, lock, temp file, os.replace)."""
    directory_name, _, file_name = relative.partition("/")
    key, dot, rest = file_name.partition(".")
    if len(directory_name) != 2 or not key.isalnum() or key[:2] != directory_name or "/" in file_name:
        raise ValueError(f"tensorjit: cache artifact path {relative!r} is outside the cache layout")
    directory = private_directory(cache_root(cache_dir) / directory_name)
    path = directory / file_name
    if is_valid(path):
        return False

    def write(temp: str) -> None:
        with open(temp, "wb") as out:
            out.write(data)
    lock_descriptor = os.open(directory / f"{key}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(lock_descriptor, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _build(directory, key, dot + rest, write, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return True
