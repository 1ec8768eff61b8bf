"""Compiling many generated kernels at once, in worker processes.

`compile_in_parallel(jobs, workers)` takes `CompileJob`s (a kernel's source
file, its name, the dtypes of its pointer arguments, its block sizes and
warps) and returns when every kernel is compiled into Triton's on-disk cache.
The main process's first launch of each kernel then finds it there (tens of
milliseconds) instead of compiling it (a few hundred).

Kernels are shared out as workers become ready (`_share`): a worker busy
importing torch (seconds, when the pool has just started) is given nothing, and
while no worker is free the main process compiles a kernel itself, from the
other end of the queue, instead of waiting idle.

Why processes: most of Triton's compile time is MLIR passes that hold the
GIL, so threads do not overlap it. Workers are started with "spawn" (a forked
child of a process that has initialised CUDA cannot use CUDA) and kept for the
life of the process, since starting one costs about as much as compiling two
kernels. Each worker compiles through `JITFunction.warmup`, the same path and
the same specialisation (16-byte aligned pointers) as a real launch, so the
cache keys agree.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import os
import sys
import threading
from typing import Any

import torch

from ... import progress

MINIMUM_JOBS = 8
"""Fewer distinct kernels than this compile in the main process: starting the
pool (a spawned interpreter importing torch and Triton, about 2 s) would cost
more than it saves (one kernel compiles in 0.1-0.4 s on the H100 machine)."""

_pool: concurrent.futures.ProcessPoolExecutor | None = None
_pool_size = 0
_warm_ups: list[concurrent.futures.Future] = []
"""One `import_compile_stack` per started worker: a done one is a worker ready for kernels."""

QUEUED_PER_WORKER = 2
"""Kernels handed to each ready worker at a time: one compiling and one waiting, so that a
worker finishing while the main process compiles one of its own finds its next kernel."""


@dataclasses.dataclass(frozen=True, slots=True)
class CompileJob:
    source_path: str
    name: str
    arguments: tuple[Any, ...]
    """Per kernel argument: a torch.dtype for a pointer, or an int."""
    constants: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int


def default_workers() -> int:
    """Workers when the configuration leaves it to us: half the usable cores, at most 16.

    More do not finish sooner: on the H100 machine's 16 cores, GPT-2's training backward (164
    kernels) compiled in 7.3 s on 8 workers and 7.9 s on 16, each compile taking twice as long."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, min(usable // 2, 16))


def start_workers(workers: int = 0) -> None:
    """Start the pool's workers now, each importing what compiling needs, without waiting.

    A spawned worker imports torch and Triton (5-6 s when 8 start at once) before its first
    kernel. Called when a large CUDA graph starts its way through autograd and lowering (a
    few seconds of the main process's own work), the imports overlap that work instead of
    following it, and the graph's kernels all go to the workers (`compile_in_parallel`)."""
    workers = workers or default_workers()
    if workers < 2 or not torch.cuda.is_available():
        return
    with _main_module_hidden():
        _get_pool(workers)


def _triton_key() -> None:
    """Triton's cache key of its own installation (hashes of its sources and of its native
    library, 0.35 s on the H100 machine), computed once per process at the first kernel
    launch: computed on a thread when the pool starts, beside capture and autograd (reading
    and hashing release the GIL)."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001 - an older or newer Triton: the first launch computes its own
        pass


def import_compile_stack() -> None:
    """In a worker: import what `compile_job` uses, and Triton's view of the device."""
    from tensorjit.codegen.triton.launcher import load_kernel_file  # noqa: F401 - imported to be ready
    from triton.runtime import driver

    driver.active.get_current_target()


def compile_in_parallel(jobs: list[CompileJob], workers: int = 0) -> int:
    """Compile `jobs` into Triton's cache; returns how many went to workers (0: none).

    Without started workers, fewer than MINIMUM_JOBS kernels compile in the main process
    at their first launch instead (starting the pool would cost more)."""
    unique = list(dict.fromkeys(jobs))
    workers = workers or default_workers()
    started = _pool is not None and _pool_size >= 2
    if not unique or (len(unique) < MINIMUM_JOBS and not started) or workers < 2 or not torch.cuda.is_available():
        return 0
    with _main_module_hidden():  # workers start inside submit()
        pool = _pool if started else _get_pool(min(len(unique), workers))
    _share(pool, unique)
    return len(unique)


def _share(pool: concurrent.futures.Executor, jobs: list[CompileJob]) -> None:
    """Compile `jobs`: QUEUED_PER_WORKER at a time to each ready worker, the rest, from the
    queue's far end, in this process while no worker can take one.

    GPT-2 inference's eight kernels waited 2.4 s for workers still importing torch (started
    with `tensorjit.compile`, seconds before); a submitted job cannot be taken back, so
    jobs go to workers only as they become ready."""
    queue = collections.deque(jobs)
    running: set[concurrent.futures.Future] = set()
    done = 0
    while queue or running:
        while queue and len(running) < QUEUED_PER_WORKER * _ready_workers():
            running.add(pool.submit(compile_job, queue.popleft()))
        if queue:
            compile_job(queue.pop())
            finished = {future for future in running if future.done()}
            done += 1
        else:
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            future.result()
        running -= finished
        done += len(finished)
        progress.kernels(done, len(jobs))


def _ready_workers() -> int:
    return sum(warm_up.done() for warm_up in _warm_ups)


@contextlib.contextmanager
def _main_module_hidden():
    """Start workers without the user's script.

    A spawned child imports the parent's __main__ (by module name or file) before it runs
    anything, so a script without an `if __name__ == "__main__":` guard ran again, whole, in
    every compile worker (a training loop included). The workers need none of it:
    `compile_job` imports what it uses. multiprocessing reads `__spec__` and `__file__` of
    __main__ when a process starts; while they are hidden it skips that import."""
    main = sys.modules.get("__main__")
    saved = {name: main.__dict__[name] for name in ("__spec__", "__file__") if main and name in main.__dict__}
    try:
        if main is not None:
            main.__dict__["__spec__"] = None
            main.__dict__.pop("__file__", None)
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def _get_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size < workers:
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        _pool_size = workers
        _warm_ups[:] = [_pool.submit(import_compile_stack) for _ in range(workers)]
        threading.Thread(target=_triton_key, name="tensorjit-triton-key", daemon=True).start()
        atexit.register(_pool.shutdown, wait=False, cancel_futures=True)  # else a noisy weakref callback at exit
    return _pool


def compile_job(job: CompileJob) -> None:
    """In a worker: compile one kernel through the same path a launch takes, and its launcher."""
    from tensorjit.codegen.triton.launcher import load_kernel_file

    kernel = load_kernel_file(job.source_path, job.name)
    compiled = kernel.warmup(*job.arguments, grid=(1,), **dict(job.constants), num_warps=job.num_warps,
                             num_stages=job.num_stages)
    build_launcher(compiled)


def build_launcher(compiled: Any) -> None:
    """Build the kernel's host launcher into Triton's cache, as its first launch would.

    Triton up to 3.6 compiles a small C extension per kernel signature (one C
    compiler run, about 0.5 s) when a kernel is first loaded, in the main
    process and one at a time: 44 of them were 21 s of densenet121's 127 s
    training compile. Built here, in the workers, the main process finds them in
    the cache. Best effort: a Triton without per-signature launchers, or with
    another constructor, just builds nothing here."""
    try:
        from triton.runtime import driver

        driver.active.launcher_cls(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001 - the first launch builds it instead
        pass
