"""On-disk cache of compiled artifacts (shared libraries, cubins...).

Takes key parts (source text, toolchain versions, flags) and a build function;
`get_or_build` returns the path of a verified artifact, building it at most once
across concurrent processes (file lock + temp file + os.replace). Each artifact
has a sidecar "<file>.sha256" holding "size checksum"; an entry whose sidecar is
missing or disagrees (partial write, corruption) is rebuilt.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable


def cache_root(cache_dir: str | None = None) -> Path:
    root = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "tensorjit"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def cache_key(key_parts: Iterable) -> str:
    digest = hashlib.sha256()
    for part in key_parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_valid(path: Path) -> bool:
    sidecar = path.with_name(path.name + ".sha256")
    try:
        size, checksum = sidecar.read_text().split()
        return path.stat().st_size == int(size) and _file_digest(path) == checksum
    except (OSError, ValueError):
        return False


def get_or_build(key_parts: Iterable, build_fn: Callable[[str], None], *, suffix: str = ".so",
                 cache_dir: str | None = None, rebuild: bool = False) -> str:
    """Path of the artifact for `key_parts`; `build_fn(temp_path)` writes it when absent or invalid.

    rebuild=True discards an entry that verified but failed to load."""
    key = cache_key(key_parts)
    directory = cache_root(cache_dir) / key[:2]
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{key}{suffix}"
    if not rebuild and is_valid(path):
        return str(path)
    with open(directory / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key; the others wait, then reuse
        try:
            if not rebuild and is_valid(path):
                return str(path)
            descriptor, temp = tempfile.mkstemp(suffix=suffix, dir=directory)
            os.close(descriptor)
            try:
                build_fn(temp)
                temp_path = Path(temp)
                sidecar_text = f"{temp_path.stat().st_size} {_file_digest(temp_path)}\n"
                os.replace(temp, path)
                sidecar_temp = directory / f"{key}.{os.getpid()}.sidecar"
                sidecar_temp.write_text(sidecar_text)
                os.replace(sidecar_temp, path.with_name(path.name + ".sha256"))
            finally:
                if os.path.exists(temp):
                    os.unlink(temp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(path)


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
    """Write an artifact (and its sidecar) brought from elsewhere; False if a valid one is already there."""
    root = cache_root(cache_dir)
    path = (root / relative).resolve()
    if root.resolve() not in path.parents or len(path.relative_to(root.resolve()).parts) != 2:
        raise ValueError(f"tensorjit: cache artifact path {relative!r} is outside the cache layout")
    if is_valid(path):
        return False
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(path.parent / f"{path.name.split('.')[0]}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            descriptor, temp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
            os.replace(temp, path)
            sidecar_temp = path.parent / f"{path.name}.{os.getpid()}.sidecar"
            sidecar_temp.write_text(f"{len(data)} {hashlib.sha256(data).hexdigest()}\n")
            os.replace(sidecar_temp, path.with_name(path.name + ".sha256"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return True
