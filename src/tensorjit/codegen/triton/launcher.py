"""Loading generated Triton source and launching its kernels cheaply.

`load_kernel(source, name, cache_dir)` takes the text of a module holding one
@triton.jit function and returns that function (the text is written to a file
named by its hash, because Triton reads a kernel's source through `inspect`).
`KernelLauncher(kernel, shape)` takes the function and a `LaunchShape` and
returns a callable `launcher(*arguments)`: positional pointer/integer arguments
in the kernel's declared order, block sizes supplied from the shape.

Why not just `kernel[grid](...)` every call: Triton's generic path binds the
arguments, recomputes the specialisation key and looks the compiled kernel up
on every launch (tens of microseconds of Python). After the first launch we
hold the `CompiledKernel` and call its C launcher (`run`) directly with a
precomputed grid, keeping only the checks that make reuse safe: no launch hook
is installed (profilers), and every pointer that was 16-byte aligned when the
kernel was specialised still is (Triton vectorises on that promise). When a
check fails, or under the interpreter (TRITON_INTERPRET=1, no CompiledKernel),
the generic path runs. Tensors reach the C launcher as their addresses: given
a tensor, it looks `data_ptr` up by name and asks the driver whether the
address is device memory (`cuPointerGetAttribute`), at every launch, for every
tensor; the wrapper has checked the inputs' device, and allocates the rest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from tensorjit.codegen.triton.heuristics import LaunchShape
from tensorjit.runtime.disk_cache import cache_root, default_root, is_owned_file, private_directory


def load_kernel(source: str, name: str, cache_dir: str | None = None) -> Any:
    """The @triton.jit function `name` defined by `source`."""
    return load_kernel_file(source_path(source, cache_dir), name)


def source_path(source: str, cache_dir: str | None = None) -> str:
    """The file holding `source`, written if it is not there yet."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return _write_source(source, f"tensorjit_triton_{digest}.py", cache_dir)


def load_kernel_file(path: str, name: str) -> Any:
    """The @triton.jit function `name` in the module at `path` (imported once per process)."""
    module_name = os.path.splitext(os.path.basename(path))[0]
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _write_source(source: str, file_name: str, cache_dir: str | None) -> str:
    directory = str(private_directory(cache_root(cache_dir or _default_cache_dir()) / "triton_source"))
    # Importing the file may write, and later read, a .pyc beside it: that directory is ours too.
    private_directory(os.path.join(directory, "__pycache__"))
    path = os.path.join(directory, file_name)
    if is_owned_file(path):
        with open(path) as handle:
            if handle.read() == source:
                return path
    # temp file + rename: a reader never sees half a kernel, even across processes.
    descriptor, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(descriptor, "w") as handle:
        handle.write(source)
    os.replace(temporary, path)
    return path


def _default_cache_dir() -> str:
    from tensorjit.config import config

    return config.cache_dir or str(default_root())


def check_triton_cache() -> None:
    """Triton's own cache holds compiled kernels and the launcher libraries it loads into this
    process: it must be as private as ours (raises UntrustedCache, after a warning, if not)."""
    try:
        from triton import knobs

        directory = knobs.cache.dir
    except (ImportError, AttributeError):  # an older Triton: its documented default
        directory = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    if directory:
        private_directory(directory)


class KernelLauncher:
    """Launches one kernel with one precomputed launch shape; see the module docstring."""

    def __init__(self, kernel: Any, shape: LaunchShape):
        self.kernel = kernel
        self.shape = shape
        self.constants = shape.constants()
        self.options = {"num_warps": shape.num_warps, "num_stages": shape.num_stages}
        self.compiled: Any = None
        self.tensors: list[int] = []
        """Positions of the tensor arguments (passed to the C launcher as addresses)."""
        self.aligned: list[int] = []
        self.fast_launches = 0
        self.slow_launches = 0
        self.launch = self._launch_slow
        """The launch itself: the generic path until the first launch, then the generated fast one.
        Generated wrappers call it directly (`TritonLaunch.statement`), a Python call fewer a launch
        than `launcher(...)`, which matters with hundreds of launches a step."""

    def __call__(self, *arguments: Any) -> None:
        self.launch(*arguments)

    def _launch_slow(self, *arguments: Any) -> None:
        self.slow_launches += 1
        compiled = self.kernel[self.shape.grid](*arguments, **self.constants, **self.options)
        if self.compiled is None and _is_compiled_kernel(compiled):
            getattr(compiled, "_init_handles", lambda: None)()  # loads the binary: `function` is set after
            self.compiled = compiled
            self.tensors = [index for index, value in enumerate(arguments) if isinstance(value, torch.Tensor)]
            self.aligned = [index for index in self.tensors if arguments[index].data_ptr() % 16 == 0]
            device = arguments[self.aligned[0]].device.index if self.aligned else torch.cuda.current_device()
            self.launch = self._fast_launch_function(len(arguments), device)

    def _fast_launch_function(self, arity: int, device: int):
        """Generated `launch(a0, a1, ...)`: the checks, then the C launcher given each tensor's
        address (`self.tensors`), with everything that does not change between calls bound as a
        constant (about 2 us a launch)."""
        names = [f"a{index}" for index in range(arity)]
        passed = [f"p{index}" if index in self.tensors else name for index, name in enumerate(names)]
        addresses = "".join(f"    p{index} = a{index}.data_ptr()\n" for index in self.tensors)
        checks = " or ".join([_hooks_check_text()] + [f"p{index} % 16" for index in self.aligned])
        constants = ", ".join(f"c{index}" for index in range(len(self.constants)))
        grid = self.shape.grid
        launch, prefix = _direct_launch(self.compiled.run)
        source = (
            f"def launch({', '.join(names)}):\n"
            f"{addresses}"
            f"    if {checks}:\n"
            f"        return slow({', '.join(names)})\n"
            f"    run({grid[0]}, {grid[1]}, {grid[2]}, stream({device}), function, {prefix}metadata, None, None, None, "
            f"{', '.join(passed + ([constants] if constants else []))})\n"
            f"    counter[0] += 1\n"
        )
        namespace = {
            "hooks_installed": _launch_hooks_installed, "runtime": _runtime_knobs(), "slow": self._launch_slow,
            "run": launch, "coop": getattr(self.compiled.run, "launch_cooperative_grid", None),
            "pdl": getattr(self.compiled.run, "launch_pdl", None),
            "stream": torch._C._cuda_getCurrentRawStream, "function": self.compiled.function,
            "metadata": self.compiled.packed_metadata, "counter": self._fast_counter,
            **{f"c{index}": value for index, value in enumerate(self.constants.values())},
        }
        exec(compile(source, f"<tensorjit launch {getattr(self.kernel, '__name__', 'kernel')}>", "exec"), namespace)
        return namespace["launch"]

    @property
    def fast_launches(self) -> int:
        return self._fast_counter[0]

    @fast_launches.setter
    def fast_launches(self, value: int) -> None:
        self._fast_counter = [value]


_RUNTIME_KNOBS: list[Any] = []


def _runtime_knobs() -> Any:
    if not _RUNTIME_KNOBS:
        from triton import knobs

        _RUNTIME_KNOBS.append(knobs.runtime)
    return _RUNTIME_KNOBS[0]


def _launch_hooks_installed() -> bool:
    """Whether a profiler asked to hear of launches (then the generic path serves it).

    Triton 3.2-3.3 keep a hook or None; 3.4 and later a HookChain that is
    empty when nobody listens."""
    runtime = _runtime_knobs()
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def _hooks_check_text() -> str:
    """`_launch_hooks_installed()` as inline text where the hooks are HookChains (two attribute
    reads a launch instead of a call)."""
    runtime = _runtime_knobs()
    if all(hasattr(hook, "calls") for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook)):
        return "runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls"
    return "hooks_installed()"


def _direct_launch(run: Any) -> tuple[Any, str]:
    """(callable, text before the kernel metadata): the C launcher itself where Triton's Python
    `CudaLauncher.__call__` would only pass our arguments through (no scratch memory to
    allocate; the 3.5-3.6 argument order), else `run` with nothing added. The Python layer
    costs about 2 us a launch, GPT-2's training step has 390 of them."""
    launch = getattr(run, "launch", None)
    call = getattr(type(run), "__call__", None)
    if launch is None or call is None or getattr(run, "gsan_enabled", False) \
            or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return run, ""
    parameters = list(inspect.signature(call).parameters.values())
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if positional != ["self", "gridX", "gridY", "gridZ", "stream", "function"] or \
            parameters[-1].kind is not inspect.Parameter.VAR_POSITIONAL:
        return run, ""
    return launch, "coop, pdl, None, None, "


def _is_compiled_kernel(value: Any) -> bool:
    return value is not None and hasattr(value, "run") and hasattr(value, "packed_metadata")


class AutotunedLauncher:
    """Times each candidate launcher on the first call's real arguments and keeps the fastest.

    For kernels whose best block shape is not predictable from sizes alone
    (reductions over rows too long for registers). Every candidate runs several
    times on the first call's arguments: those a kernel reads and writes over
    (`overwritten`, positions: memory.in_place_pairs) are copies while it times,
    so the chosen kernel then runs once on the real ones. Under the interpreter
    (no GPU timing) the first candidate is kept.

    The choice is remembered on disk beside the kernel's source (`choice_path`,
    one file per device name: a kernel's source fixes its sizes, so the same
    source on the same device chooses the same way), and a later process reads
    it instead of timing again."""

    REPEATS = 5

    def __init__(self, candidates: list[KernelLauncher], choice_path: str | None = None,
                 overwritten: tuple[int, ...] = ()):
        self.candidates = candidates
        self.choice_path = choice_path
        self.overwritten = overwritten
        self.chosen: KernelLauncher | None = None
        self.timings_ms: list[float] = []

    def __call__(self, *arguments: Any) -> None:
        if self.chosen is None:
            self.chosen = self._choose(arguments)
        self.chosen(*arguments)

    def _choose(self, arguments: tuple) -> KernelLauncher:
        if len(self.candidates) == 1 or not torch.cuda.is_available():
            return self.candidates[0]
        remembered = self._remembered()
        if remembered is not None:
            return self.candidates[remembered]
        arguments = tuple(a.clone() if i in self.overwritten else a for i, a in enumerate(arguments))
        for candidate in self.candidates:
            candidate(*arguments)  # compile and warm up outside the timing
        for candidate in self.candidates:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.REPEATS):
                candidate(*arguments)
            end.record()
            end.synchronize()
            self.timings_ms.append(start.elapsed_time(end) / self.REPEATS)
        best = self.timings_ms.index(min(self.timings_ms))
        self._remember(best)
        return self.candidates[best]

    def _record_file(self) -> str | None:
        if self.choice_path is None:
            return None
        device = "".join(c if c.isalnum() else "_" for c in torch.cuda.get_device_name())
        return f"{self.choice_path}.{device}.choice"

    def _shapes_text(self) -> str:
        return ";".join(repr(candidate.shape) for candidate in self.candidates)

    def _remembered(self) -> int | None:
        """The index chosen before for these candidates on this device, if recorded."""
        path = self._record_file()
        if path is None or not is_owned_file(Path(path)):
            return None
        try:
            with open(path) as handle:
                record = json.load(handle)
            index = record["choice"]
            if record["candidates"] != self._shapes_text() or not 0 <= index < len(self.candidates):
                return None
            self.timings_ms = list(record["timings_ms"])
            return index
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _remember(self, index: int) -> None:
        path = self._record_file()
        if path is None:
            return
        record = {"choice": index, "timings_ms": self.timings_ms, "candidates": self._shapes_text()}
        try:
            directory = os.path.dirname(path)
            with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as handle:
                json.dump(record, handle)
            os.replace(handle.name, path)
        except OSError:  # an unwritable cache: time again next process
            pass
