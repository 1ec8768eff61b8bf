"""The disk cache is used only when private: refusals, permissions of what it writes, and the fallbacks.

Each refusal must leave compiled results right (ATen kernels instead of cached ones)
and warn once, naming the directory. Owner mismatches are simulated through
`disk_cache.current_uid`, since the tests may run as root.
"""

import errno
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import compile_aten_graph
from tensorjit.codegen.decomp import decompositions
from tensorjit.config import Config
from tensorjit.runtime import disk_cache
from tensorjit.runtime.disk_cache import UntrustedCache


def write_artifact(path):
    with open(path, "w") as handle:
        handle.write("artifact")


def mode_of(path):
    return oct(os.stat(path).st_mode & 0o7777)


def compile_exp(cache_dir):
    x = torch.randn(16)
    gm = make_fx(lambda x: x.exp() * 2 + 1, decomposition_table=decompositions())(x)
    compiled = compile_aten_graph(gm, [x], config=Config(cache_dir=str(cache_dir)))
    result = compiled(x)
    torch.testing.assert_close(result[0] if isinstance(result, (list, tuple)) else result, x.exp() * 2 + 1)
    return compiled


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o702])
def test_writable_by_others_is_refused(tmp_path, mode):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, mode)
    built = []
    with pytest.warns(RuntimeWarning, match=f"{cache} .the cache directory. cannot be trusted: it is writable by"):
        with pytest.raises(UntrustedCache):
            disk_cache.get_or_build(["k"], built.append, suffix=".txt", cache_dir=str(cache))
    assert built == []


def test_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    disk_cache.get_or_build(["k"], write_artifact, suffix=".txt", cache_dir=str(cache))
    monkeypatch.setattr(disk_cache, "current_uid", lambda: os.geteuid() + 1)
    with pytest.warns(RuntimeWarning, match="not by the current user"):
        with pytest.raises(UntrustedCache):
            disk_cache.get_or_build(["k"], write_artifact, suffix=".txt", cache_dir=str(cache))


def test_parent_writable_by_others_is_refused_unless_sticky(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)  # another user could rename our cache away and put theirs in its place
    with pytest.warns(RuntimeWarning, match="a parent of the cache directory .* without the sticky bit"):
        with pytest.raises(UntrustedCache):
            disk_cache.cache_root(str(parent / "cache"))
    os.chmod(parent, 0o1777)  # as /tmp: others cannot rename or delete what is ours
    assert disk_cache.cache_root(str(parent / "cache")) == parent / "cache"


def test_parent_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "theirs"
    parent.mkdir()
    os.chmod(parent, 0o755)
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if str(path) == str(parent):
            fields = list(info)
            fields[4] = os.geteuid() + 1  # st_uid
            return os.stat_result(fields)
        return info
    monkeypatch.setattr(disk_cache.os, "stat", stat)
    with pytest.warns(RuntimeWarning, match="neither the current user .* nor root"):
        with pytest.raises(UntrustedCache):
            disk_cache.cache_root(str(parent / "cache"))


def test_warns_once_per_directory(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in ("a", "b", "c"):
            with pytest.raises(UntrustedCache):
                disk_cache.get_or_build([key], write_artifact, suffix=".txt", cache_dir=str(cache))
    assert len([w for w in caught if "cannot be trusted" in str(w.message)]) == 1


def test_created_directories_and_files_are_private(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "umask", os.umask)  # restored below whatever happens
    old = os.umask(0o000)  # the most permissive umask: modes must not come from it
    try:
        cache = tmp_path / "a" / "b" / "cache"
        library = disk_cache.get_or_build(["lib"], write_artifact, suffix=".so", cache_dir=str(cache))
        text = disk_cache.get_or_build(["txt"], write_artifact, suffix=".txt", cache_dir=str(cache))
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", cache, os.path.dirname(library)):
        assert mode_of(directory) == oct(0o700), directory
    assert mode_of(library) == oct(0o700)
    assert mode_of(text) == oct(0o600)
    assert mode_of(library + ".sha256") == oct(0o600)
    lock = [name for name in os.listdir(os.path.dirname(library)) if name.endswith(".lock")]
    assert lock and all(mode_of(os.path.join(os.path.dirname(library), name)) == oct(0o600) for name in lock)


def test_artifact_writable_by_others_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    path = disk_cache.get_or_build(["k"], write_artifact, suffix=".txt", cache_dir=str(cache))
    os.chmod(path, 0o666)  # left from before the directory was private: its content is not ours to trust
    built = []

    def build(out):
        built.append(out)
        write_artifact(out)
    assert disk_cache.get_or_build(["k"], build, suffix=".txt", cache_dir=str(cache)) == path
    assert len(built) == 1 and mode_of(path) == oct(0o600)


def test_symlinked_artifact_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    path = disk_cache.get_or_build(["k"], write_artifact, suffix=".txt", cache_dir=str(cache))
    elsewhere = tmp_path / "elsewhere.txt"
    shutil.copy(path, elsewhere)
    os.unlink(path)
    os.symlink(elsewhere, path)
    built = []
    disk_cache.get_or_build(["k"], lambda out: (built.append(out), write_artifact(out)), suffix=".txt",
                            cache_dir=str(cache))
    assert len(built) == 1 and not os.path.islink(path)


def test_sidecar_still_catches_corruption(tmp_path):
    cache = tmp_path / "cache"
    built = []

    def build(out):
        built.append(out)
        write_artifact(out)
    path = disk_cache.get_or_build(["k"], build, suffix=".txt", cache_dir=str(cache))
    with open(path, "r+") as handle:
        handle.write("ARTI")  # same size, other content
    disk_cache.get_or_build(["k"], build, suffix=".txt", cache_dir=str(cache))
    assert len(built) == 2 and open(path).read() == "artifact"


PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *marker = fopen("%s", "w");
    if (marker) { fputs("ran", marker); fclose(marker); }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_planted_library_in_world_writable_cache_is_not_loaded(tmp_path):
    private = tmp_path / "private"
    compile_exp(private)
    [library] = [os.path.join(root, name) for root, _, names in os.walk(private) for name in names
                 if name.endswith(".so")]
    shared = tmp_path / "shared"
    shutil.copytree(private, shared)
    planted = str(shared / os.path.relpath(library, private))
    marker = tmp_path / "constructor_ran"
    subprocess.run(["g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", planted],
                   input=PLANTED % marker, text=True, check=True)
    data = open(planted, "rb").read()
    with open(planted + ".sha256", "w") as handle:  # a matching sidecar: the checksum alone cannot tell
        handle.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}\n")
    os.chmod(shared, 0o777)
    with pytest.warns(RuntimeWarning, match="cannot be trusted"):
        compiled = compile_exp(shared)  # right answer, through ATen
    assert not marker.exists()
    assert getattr(compiled, "program", None) is None  # the graph's own forward, not a generated runner


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_unwritable_cache_falls_back_to_aten(tmp_path, monkeypatch, error):
    # Full disk, read-only file system, no permission: as root chmod cannot make these, so the
    # temp file the build writes to fails the way the system would.
    def fail(*args, **kwargs):
        raise OSError(error, os.strerror(error))
    monkeypatch.setattr(disk_cache.tempfile, "mkstemp", fail)
    compiled = compile_exp(tmp_path / "cache")
    assert getattr(compiled, "program", None) is None


def test_read_only_cache_with_valid_entry_is_used(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    compile_exp(cache)

    def fail(*args, **kwargs):
        raise AssertionError("a valid entry needs no write")
    monkeypatch.setattr(disk_cache.tempfile, "mkstemp", fail)
    for root, directories, names in os.walk(cache):
        for name in directories:
            os.chmod(os.path.join(root, name), 0o500)
    try:
        assert getattr(compile_exp(cache), "program", None) is not None
    finally:
        for root, directories, names in os.walk(cache):
            for name in directories:
                os.chmod(os.path.join(root, name), 0o700)


def test_triton_source_directory_is_checked(tmp_path):
    launcher = pytest.importorskip("tensorjit.codegen.triton.launcher")
    cache = tmp_path / "cache"
    path = launcher.source_path("X = 1\n", str(cache))
    assert mode_of(os.path.dirname(path)) == oct(0o700) and mode_of(path) == oct(0o600)
    os.chmod(os.path.join(os.path.dirname(path), "__pycache__"), 0o777)  # a planted .pyc would be imported
    with pytest.warns(RuntimeWarning, match="__pycache__ .the cache directory. cannot be trusted"):
        with pytest.raises(UntrustedCache):
            launcher.source_path("X = 1\n", str(cache))
    os.chmod(os.path.join(os.path.dirname(path), "__pycache__"), 0o700)
    os.chmod(cache, 0o777)
    with pytest.warns(RuntimeWarning, match="cannot be trusted"):
        with pytest.raises(UntrustedCache):
            launcher.source_path("X = 2\n", str(cache))


def test_triton_own_cache_is_checked(tmp_path, monkeypatch):
    launcher = pytest.importorskip("tensorjit.codegen.triton.launcher")
    shared = tmp_path / "triton"
    shared.mkdir()
    os.chmod(shared, 0o777)  # Triton loads the launcher libraries it finds here
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    with pytest.warns(RuntimeWarning, match="cannot be trusted"):
        with pytest.raises(UntrustedCache):
            launcher.check_triton_cache()
    os.chmod(shared, 0o700)
    launcher.check_triton_cache()


def test_compile_with_untrusted_cache_matches_eager_forward_and_backward(tmp_path):
    import tensorjit

    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    compiled = tensorjit.compile(model, options={"cache_dir": str(cache)})
    with pytest.warns(RuntimeWarning, match="cannot be trusted"):
        out = compiled(x)
    torch.testing.assert_close(out, model(x))
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for got, expected in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, expected)
    assert not any(name.endswith(".so") for _, _, names in os.walk(cache) for name in names)
