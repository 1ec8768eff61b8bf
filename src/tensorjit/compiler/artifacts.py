"""save_cache_artifacts / load_cache_artifacts: the disk cache as portable bytes.

`save_cache_artifacts()` takes every verified entry of the disk cache
(`runtime/disk_cache.py`: compiled C++ libraries, GPU binaries, and the warm-start
records of `runtime/warm_start.py`: guards, generated code, compiled graphs) and returns
(bytes, CacheInfo); `load_cache_artifacts(bytes)` writes them into this machine's
cache, so a fresh process (another host with the same versions and CPU) runs the
compiled functions without capturing, tracing or compiling again. Each artifact
travels with its SHA-256, checked before it is installed; a warm-start record is
then checked as any other (versions, source files) before it is used.

The bytes: b"TJCACHE1\\n", an 8-byte little-endian header length, a JSON header
(one {"path", "size", "sha256"} per artifact), then the artifacts' contents in order.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from ..config import config
from ..runtime import disk_cache

MAGIC = b"TJCACHE1\n"


@dataclass
class CacheInfo:
    """What was saved or loaded: the cache-relative path of each kernel artifact and warm-start record."""

    kernel_artifacts: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    """Warm-start records (`<2 hex>/<key>.entry`): compiled entries of one function each."""

    @property
    def artifacts(self) -> dict[str, list[str]]:
        return {"kernel_artifacts": list(self.kernel_artifacts), "entries": list(self.entries)}

    def __len__(self) -> int:
        return len(self.kernel_artifacts) + len(self.entries)

    @staticmethod
    def of(paths: list[str]) -> "CacheInfo":
        return CacheInfo([p for p in paths if not p.endswith(".entry")], [p for p in paths if p.endswith(".entry")])


def save_cache_artifacts() -> tuple[bytes, CacheInfo] | None:
    """The disk cache's entries as bytes, with what they hold; None when the cache is empty."""
    entries = disk_cache.verified_entries(config.cache_dir)
    if not entries:
        return None
    header, blobs = [], []
    for relative, path in entries:
        data = path.read_bytes()
        header.append({"path": relative, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        blobs.append(data)
    text = json.dumps(header).encode()
    payload = MAGIC + len(text).to_bytes(8, "little") + text + b"".join(blobs)
    return payload, CacheInfo.of([h["path"] for h in header])


def load_cache_artifacts(serialized_artifacts: bytes) -> CacheInfo | None:
    """Install saved artifacts into the disk cache; returns what the bytes held (None if nothing)."""
    data = bytes(serialized_artifacts)
    if not data.startswith(MAGIC):
        raise ValueError("tensorjit: not cache artifacts from tensorjit.compiler.save_cache_artifacts")
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC):start], "little")
    header = json.loads(data[start:start + size])
    offset = start + size
    for item in header:
        blob = data[offset:offset + item["size"]]
        offset += item["size"]
        if len(blob) != item["size"] or hashlib.sha256(blob).hexdigest() != item["sha256"]:
            raise ValueError(f"tensorjit: cache artifact {item['path']} is corrupt (checksum mismatch)")
        disk_cache.install(item["path"], blob, config.cache_dir)
    return CacheInfo.of([item["path"] for item in header]) if header else None
