"""Replaying a function's CUDA work through recorded CUDA graphs.

`CudaGraphRunner(function, role=..., settings=...)` takes a function of tensors
(a compiled graph, a GraphModule, any callable returning a tensor or a
tuple/list of tensors) and returns a callable with the same signature that, on
CUDA inputs, replays a `torch.cuda.CUDAGraph` recorded from it instead of
launching its kernels one by one. mode="reduce-overhead" (`Config.triton_cudagraphs`)
wraps every compiled graph in one: the inference graph, and in training the
compiled forward and the compiled backward that the autograd stage split
(`wrap_compiled`, handed to `autograd.aot_compile`), never the
`torch.autograd.Function` around them, whose tape a CUDA graph cannot record.

How a call goes:
  * `ungraphable_reason(inputs)` (checked in the pass that builds the key,
    `recording_key`): inputs on the CPU or on several devices,
    inputs of other types than tensors and numbers, gradients being recorded
    through an input, a capture already under way: run `function` eagerly.
  * Otherwise look up a recording by `recording_key`: the inputs' shapes,
    strides, dtypes, the numbers' values, and, for inputs read in place, their
    addresses. None yet: warm up on a side stream on copies of the inputs (so
    lazy initialisation, cuBLAS workspaces and autotuning happen outside the
    capture, and to see which inputs the function writes), then record. At
    most `max_shapes` shapes and `max_recordings_per_shape` recordings of one
    shape; past that, or when a graph cannot be recorded (outputs on the CPU,
    a parameter written in place, an op that cannot be captured), calls of
    that key run eagerly and one log line (kind "cudagraphs") says why.
  * Copy the other inputs into the recording's static buffers, replay, copy
    back the inputs the function writes in place, hand out the outputs.

Inputs read in place. Parameters, and the saved activations a recorded
forward hands to its backward, keep their address from step to step: the
graph reads them where they are (an optimizer's in-place update is seen by the
next replay) and their address is part of the key. Everything else is copied
into a static buffer, which costs one device copy but never pins the caller's
memory.

Outputs. A replay writes into the same static buffers every time. The
outputs the caller sees of inference and forward graphs are handed out in
place, each replay's own tensors over the static buffers, and the next replay
revokes those the caller still holds: reading one, or a view of it, raises an
error that says to clone it (output_lease.py; torch.compile hands out its
buffers too). Gradients are handed out in place as well, and any still alive
at the next replay of their pool (a parameter's .grad kept across steps) is
first moved to memory of its own (gradient_lease.py); without the native
extension that moves them, they are cloned. Every output is cloned where torch
cannot revoke a storage. The forward's saved
activations are handed out as they are: the backward reads them in place.
Two rules keep that safe and loud:
  * a forward replay while the outputs or saved activations of its previous
    replay still await their backward (the autograd runtime finishes the replay's
    `StepToken` after the backward; dropping the autograd graph drops it) runs
    the forward eagerly instead, unless `mark_step_begin()` was called since,
    which declares the previous step finished;
  * each replay bumps the saved buffers' version counters, so a backward that
    reads activations a later replay overwrote fails with autograd's "modified
    by an inplace operation" error instead of computing a wrong gradient.

Memory pools (`choose_pool`). Inference recordings of one runner share a pool:
each recording holds its static outputs, so a later graph reuses only an
earlier one's intermediates, for its own intermediates or outputs. A replay
writes its intermediates, so it revokes what every recording of the pool
handed out (`_pool_leases`): as under torch.compile, outputs are valid until the
runner's next call, of any shape. Each training forward recording gets a pool of its
own (its saved activations stay live between forward and backward, and another
forward replayed in between must not write over them), and the backward joins
the pool of the forward whose activations it reads: one pool per step.
Warm-up runs in the recording's pool and on its capture stream
(`_pool_place`), so that what warm-up allocated and freed is the memory the
recording then takes; warm-up outside it would leave its activations cached
beside the pool (resnet50 inference: 700 MB reserved against torch.compile's 304).
The static copies of copied inputs are allocated there too. They are live only
from the copy before a replay to the replay's end, so they may take blocks that
another graph of the pool uses as scratch: no other replay of the pool comes in
between. Outside the pool they split the caller's cached blocks and stay
(GPT-2 training's logits gradient, 196 MB, took part of the cached block its
loss's float logits came from, which then needed a new one of 394 MB).
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

from .. import logs
from . import gradient_lease
from .gradient_lease import GradientLease, PoolLeases
from .output_lease import OutputLease, can_revoke, revoke_storage

KINDS = ("inference", "forward", "backward")
NUMBER_TYPES = (int, float, bool, type(None))


@dataclasses.dataclass(frozen=True)
class Settings:
    """The options of `Config` that shape CUDA graph recording."""

    max_shapes: int = 8
    """Distinct input shapes recorded per runner; further shapes run eagerly."""
    max_recordings_per_shape: int = 2
    """Recordings of one shape whose in-place inputs moved; further ones run eagerly."""
    warmup_calls: int = 1
    """Calls before recording, in its pool (Config.cudagraph_warmup_calls)."""

    @classmethod
    def from_config(cls, config: Any) -> "Settings":
        return cls(max_shapes=config.cudagraph_max_shapes,
                   max_recordings_per_shape=config.cudagraph_max_recordings_per_shape,
                   warmup_calls=config.cudagraph_warmup_calls)


# -- steps ---------------------------------------------------------------------

_step = 0


_warm_ups: list[bool] = []
"""One entry per warm-up under way (innermost last): whether it asked for another."""
_WARM_UP_AGAIN = "warm up again"


def mark_warmup_incomplete() -> None:
    """`torch.compiler.cudagraph_mark_warmup_incomplete`: the warm-up under way (called from
    inside it, by an autotuner say) is not enough. Its call then runs eagerly and records
    nothing, and the next call of the same inputs warms up again. Outside a warm-up: nothing."""
    if _warm_ups:
        _warm_ups[-1] = True


def mark_step_begin() -> None:
    """Declare a new step: results of earlier replays are no longer needed.

    A forward replayed after this overwrites the saved activations of its
    previous replay even if they are still held; a backward that later reads
    them fails loudly (version counter) instead of using them. Call it at the
    top of a training loop that keeps graphs alive across steps."""
    global _step
    _step += 1


def current_step() -> int:
    return _step


# -- buffers read in place -------------------------------------------------------

_saved_buffers: dict[int, Any] = {}
"""Address of each saved activation a live forward recording hands out -> that recording's pool."""


def _register_saved(recording: "Recording", outputs: Sequence[Any], indices: Sequence[int]) -> None:
    addresses = [outputs[index].data_ptr() for index in indices]
    for address in addresses:
        _saved_buffers[address] = recording.pool
    weakref.finalize(recording, _forget_saved, addresses)


def _forget_saved(addresses: list[int]) -> None:
    for address in addresses:
        _saved_buffers.pop(address, None)


def module_state_indices(gm: torch.fx.GraphModule) -> frozenset[int]:
    """Inputs the capture read from a module's parameters or buffers: the module owns them, so their
    address stays put from call to call (batch-norm statistics, masks, position tables)."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    return frozenset(index for index, node in enumerate(placeholders)
                     if any(part in str(node.meta.get("source", "")) for part in ("._buffers[", "._parameters[")))


def read_in_place(value: Any) -> bool:
    """Whether an input keeps its address across steps: a parameter or a recorded forward's saved activation."""
    return isinstance(value, torch.nn.Parameter) or (
        isinstance(value, torch.Tensor) and value.data_ptr() in _saved_buffers)


def choose_pool(kind: str, in_place_inputs: Sequence[torch.Tensor], runner_pool: Callable[[], Any],
                new_pool: Callable[[], Any]) -> Any:
    """The memory pool a new recording allocates from; see the module docstring."""
    if kind == "backward":
        for value in in_place_inputs:
            pool = _saved_buffers.get(value.data_ptr())
            if pool is not None:
                return pool
        return new_pool()
    if kind == "forward":
        return new_pool()
    return runner_pool()


# -- keys and refusals -----------------------------------------------------------


def ungraphable_reason(inputs: Sequence[Any], device_type: str = "cuda") -> str | None:
    """Why these inputs cannot be replayed through a graph of `device_type`, or None."""
    devices = set()
    for value in inputs:
        if isinstance(value, torch.Tensor):
            devices.add(value.device)
        elif not isinstance(value, NUMBER_TYPES):
            return f"an input of type {type(value).__name__}"
    if not devices:
        return "no tensor inputs"
    if len(devices) > 1:
        return f"inputs on several devices ({', '.join(sorted(map(str, devices)))})"
    if next(iter(devices)).type != device_type:
        return f"inputs on the {next(iter(devices)).type.upper()}"
    if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs):
        return "gradients are recorded through the inputs (training graphs are recorded after the autograd split)"
    if device_type == "cuda" and torch.cuda.is_current_stream_capturing():
        return "called while another CUDA graph is being captured"
    return None


STRUCTURED = ("structured",)
"""What `recording_key` returns for inputs holding tuples or lists (see `_call_structured`)."""


def recording_key(inputs: Sequence[Any], static_input_indices: frozenset[int] = frozenset(),
                  device_type: str | None = None, saved_input_indices: frozenset[int] = frozenset()) -> tuple | None:
    """What tells one recording's calls apart: (inference mode, the addresses of the module-state
    inputs `static_input_indices` in index order, then per other input: the address of an input read
    in place (an int), or the shape, stride, dtype and device of a copied tensor, or a number's
    type and value). The second item is None where the module-state inputs are keyed among the
    others (`in_place_of` reads either form). None when `ungraphable_reason` has a reason (the
    cheap part of those checks, made in this one pass because it runs on every call);
    `STRUCTURED` when an input is a tuple or list.

    Inputs read in place are keyed by address alone. Their layout cannot change under one
    address without another key: module state (`static_input_indices`) and parameters are graph
    inputs whose layout the capture's guards check, and a saved activation's address lies in the
    pool of the one forward recording that made it, which fixes its layout. Checking only the
    address keeps the key cheap for models with hundreds of parameters and saved activations:
    module state's addresses are read in one pass in C (`map`), not input by input.

    `saved_input_indices` (a backward's runner, which has no module state: `CudaGraphRunner`
    learns them at its first call) are keyed the same way, by address in one pass, where every
    one of them is a saved activation of a recording (else the key takes the general form)."""
    grad = torch.is_grad_enabled()
    head = torch.is_inference_mode_enabled()
    keyed_by_address = static_input_indices or saved_input_indices
    plan = _static_plan(keyed_by_address, len(inputs)) if keyed_by_address else None
    if plan is not None:
        pick, others = plan
        state = pick(inputs)
        try:
            addresses = tuple(map(_data_ptr, state))  # a TypeError where one is not a tensor
        except TypeError:
            plan = None
        else:
            if saved_input_indices and not all(map(_saved_buffers.__contains__, addresses)):
                plan = None
            elif grad and device_type is not None and any(map(_requires_grad, state)):
                return None
    if plan is not None:
        parts = [head, addresses]
        outcome = _add_parts(parts, inputs, others, static_input_indices, grad, device_type)
        if outcome is not _KEYED and outcome is not _NO_TENSOR:
            return outcome
        if device_type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        return tuple(parts)
    parts = [head, None]
    outcome = _add_parts(parts, inputs, range(len(inputs)), static_input_indices, grad, device_type)
    if outcome is not _KEYED:
        return None if outcome is _NO_TENSOR else outcome
    if device_type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    return tuple(parts)


_data_ptr = torch.Tensor.data_ptr
_requires_grad = operator.attrgetter("requires_grad")
_static_plans: dict[tuple[frozenset[int], int], tuple[Callable, tuple[int, ...]] | None] = {}


def _static_plan(static_input_indices: frozenset[int], count: int) -> tuple[Callable, tuple[int, ...]] | None:
    """(a function picking the module-state inputs out of `count` inputs, in index order; the other
    indices), or None where some index is not among the inputs."""
    key = (static_input_indices, count)
    plan = _static_plans.get(key, _MISSING)
    if plan is _MISSING:
        ordered = sorted(static_input_indices)
        if ordered[0] < 0 or ordered[-1] >= count:
            plan = None
        else:
            getter = operator.itemgetter(*ordered)
            pick = getter if len(ordered) > 1 else (lambda values: (getter(values),))
            plan = (pick, tuple(i for i in range(count) if i not in static_input_indices))
        plan = _static_plans[key] = plan
    return plan


def _add_parts(parts: list[Any], inputs: Sequence[Any], indices, static_input_indices: frozenset[int],
               grad: bool, device_type: str | None) -> Any:
    """Append to `parts` the key's part of each input at `indices` (see `recording_key`). Returns
    `_KEYED`, or `_NO_TENSOR` where no input at `indices` is a tensor, or what `recording_key`
    returns instead of a key (None, `STRUCTURED`)."""
    saved = _saved_buffers
    parameter = torch.nn.Parameter
    want_cuda = device_type == "cuda"
    tensors = 0
    for index in indices:
        value = inputs[index]
        if isinstance(value, torch.Tensor):
            tensors += 1
            if grad and value.requires_grad and device_type is not None:
                return None
            address = value.data_ptr()
            # (Parameter's isinstance goes through a Python __instancecheck__: last, and only for subclasses.)
            if (index in static_input_indices or address in saved
                    or type(value) is not torch.Tensor and isinstance(value, parameter)):
                parts.append(address)
                continue
            if device_type is not None and value.is_cuda is not want_cuda:
                return None
            parts.append((value.shape, value.stride(), value.dtype, value.get_device()))
        elif isinstance(value, NUMBER_TYPES):
            parts.append((type(value), value))
        elif type(value) in (tuple, list):
            return STRUCTURED
        else:
            return None
    return _KEYED if tensors else _NO_TENSOR


_KEYED, _NO_TENSOR = object(), object()


def in_place_of(key: tuple, static_input_indices: frozenset[int] = frozenset()) -> list[bool]:
    """Which inputs a key reads in place."""
    addresses, parts = key[1], key[2:]
    if addresses is None:
        return [type(part) is int for part in parts]
    rest = iter(parts)
    return [True if index in static_input_indices else type(next(rest)) is int
            for index in range(len(addresses) + len(parts))]


def shape_of(key: tuple) -> tuple:
    """The key without the addresses of inputs read in place."""
    return tuple(None if type(part) is int else part for part in key[2:])


# -- recordings ------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Recording:
    """One recorded graph and the buffers it reads and writes."""

    graph: Any
    pool: Any
    static_inputs: list[Any]
    copied: list[int]
    """Inputs copied into static buffers before each replay."""
    mutated: list[int]
    """Inputs the function writes in place; copied back after each replay."""
    static_outputs: list[Any]
    rebuild: Callable[[list[Any]], Any]
    """Puts the flat outputs back in the structure the function returned."""
    first_uncloned: int
    """Outputs from this index on are handed out as they are: the runtime consumes them at once
    (new values of mutated inputs) or saves them for the backward."""
    first_saved: int
    """Outputs from this index on are the forward's saved activations."""
    clone_plan: "ClonePlan | None" = None
    """How the outputs before `first_uncloned` that are not leased are copied out after each replay."""
    lease: OutputLease | None = None
    """The outputs before `first_uncloned` handed out in place (see output_lease.py)."""
    gradients: GradientLease | None = None
    """The gradients before `first_uncloned` handed out in place (see gradient_lease.py)."""
    gradients_to_hand_out: list[int] | None = None
    """A backward's gradients that will be handed out in place once the native extension is loaded
    (cloned until then; None once settled)."""
    pool_leases: PoolLeases | None = None
    """The handed-out gradients of the pool's recordings, moved before any replay of the pool."""
    protected: list[int] = dataclasses.field(default_factory=list)
    """Of those, the ones a replay writes (not parameters): their version counters are bumped."""
    versioned: list[torch.Tensor] = dataclasses.field(default_factory=list)
    """The protected static outputs that have a version counter (not inference tensors): each
    replay bumps them all in one call."""
    awaits_backward: bool = False
    """A forward whose replay hands out what its backward, or a later op's, reads: saved activations
    (`protected`) or leased outputs. Each replay issues a `StepToken`."""
    step_token: Callable[[], "StepToken | None"] = lambda: None
    """A weak reference to the token of the last replay (see `StepToken`)."""
    last_step: int = -1


class StepToken:
    """Stands for one forward replay's saved activations until its backward has run.

    The autograd runtime takes it from the forward runner (`take_step_token`),
    keeps it on the autograd node, and calls `finish()` after the backward. The
    runner holds only a weak reference: a token that is finished, or dead
    because its autograd graph was dropped, no longer holds the activations."""

    __slots__ = ("done", "__weakref__")

    def __init__(self):
        self.done = False

    def finish(self) -> None:
        self.done = True


def still_held(recording: Recording) -> bool:
    """Whether the saved activations of the recording's previous replay still await their backward."""
    token = recording.step_token()
    return token is not None and not token.done


class CudaGraphRunner:
    """Calls `function` through CUDA graph replays; see the module docstring.

    The device work is in five methods (`_new_pool`, `_pool_place`, `_run_warm_up_calls`,
    `_capture`, `_launch`); tests replace them to run the bookkeeping on the CPU."""

    device_type = "cuda"
    hands_out = can_revoke()
    """Whether kept outputs of inference and forward graphs are handed out in place (output_lease.py)."""

    def __init__(self, function: Callable[..., Any], *, kind: str = "inference", saved_outputs: int = 0,
                 kept_outputs: int | None = None, static_input_indices: frozenset[int] = frozenset(),
                 settings: Settings | None = None, name: str | None = None, pure: bool = False):
        if kind not in KINDS:
            raise ValueError(f"tensorjit: unknown CUDA graph kind {kind!r}; valid kinds are: {', '.join(KINDS)}")
        self.function = function
        self.kind = kind
        self.saved_outputs = saved_outputs
        self.kept_outputs = kept_outputs
        """Leading outputs the caller keeps (cloned); None: all of them."""
        self.static_input_indices = static_input_indices
        """Inputs known to keep their address (module parameters and buffers), read in place."""
        self.saved_input_indices: frozenset[int] | None = None if kind == "backward" and not static_input_indices \
            else frozenset()
        """A backward's inputs that are saved activations read in place, learned at its first call."""
        self.settings = settings or Settings()
        self.name = name or f"{kind} graph"
        self.pure = pure
        """`function` writes none of its inputs (aot_compile's graphs: the runtime writes mutated inputs
        back from their outputs); its warm-up runs on the inputs themselves, without copies."""
        self.recordings: dict[tuple, Recording | None] = {}
        self.shapes: dict[tuple, int] = {}
        self.eager_calls = 0
        self.replays = 0
        self.reasons: list[str] = []
        self.structured: dict[Any, CudaGraphRunner] = {}
        """Runners of the flattened inputs, by input structure (see `_call_structured`)."""
        self._pool = None
        self._step_token: StepToken | None = None

    # -- calls --

    def take_step_token(self) -> StepToken | None:
        """The token of this call's forward replay (None after an eager call); see `StepToken`."""
        token, self._step_token = self._step_token, None
        return token

    def __call__(self, *inputs: Any) -> Any:
        self._step_token = None
        key = recording_key(inputs, self.static_input_indices, self.device_type, self.saved_input_indices)
        if key is STRUCTURED:
            return self._call_structured(inputs)
        if key is None:
            return self._eager(inputs, ungraphable_reason(inputs, self.device_type)
                               or "inputs on several devices")
        if self.saved_input_indices is None:
            key = self._learn_saved_inputs(inputs, key)
        recording = self.recordings.get(key, _MISSING)
        if recording is _MISSING:
            in_place = in_place_of(key, self.static_input_indices or self.saved_input_indices or frozenset())
            recording = self._new_recording(key, inputs, in_place)
            if recording is _WARM_UP_AGAIN:  # nothing kept: the next call of this key warms up again
                return self._eager(inputs, None)
            self.recordings[key] = recording
        if recording is None:
            return self._eager(inputs, None)
        if recording.lease is not None and recording.mutated and \
                any(lease.aliases(inputs[i]) for lease in self._pool_leases(recording) for i in recording.mutated):
            return self._eager(inputs, "an input written in place is an output of an earlier replay, which this "
                                       "replay would overwrite: this call runs eagerly")
        if recording.awaits_backward and recording.last_step == _step and still_held(recording):
            return self._eager(inputs, "called again while the outputs and saved activations of its previous "
                                       "replay are still held (their backward has not run): this call runs "
                                       "eagerly; call tensorjit.cudagraph_mark_step_begin() when the previous "
                                       "step is done")
        return self._replay(recording, inputs)

    def _learn_saved_inputs(self, inputs: Sequence[Any], key: tuple) -> tuple:
        """At a backward runner's first keyed call (its key in the general form, one part per
        input): the positions of the saved activations it reads in place, keyed from then on by
        address in one pass (`recording_key`); the key of this call in that form, so that the
        first recording is found by the later calls."""
        saved = frozenset(i for i, part in enumerate(key[2:]) if type(part) is int and part in _saved_buffers)
        self.saved_input_indices = saved
        return recording_key(inputs, self.static_input_indices, self.device_type, saved) if saved else key

    def _call_structured(self, inputs: Sequence[Any]) -> Any:
        """Inputs holding tuples of tensors (a saved multi-output op, as graphs run as they are pass them):
        a runner of the flat tensors, one per structure."""
        flattened = flatten_one_level(inputs)
        if flattened is None:
            return self._eager(inputs, "inputs nested deeper than tuples of tensors")
        flat, layout = flattened
        runner = self.structured.get(layout)
        if runner is None:
            function = self.function

            def call_flat(*leaves: Any) -> Any:
                return function(*rebuild_one_level(leaves, layout))

            runner = self.structured[layout] = type(self)(call_flat, kind=self.kind, saved_outputs=self.saved_outputs,
                                                        kept_outputs=self.kept_outputs, settings=self.settings,
                                                        name=self.name, pure=self.pure)
        result = runner(*flat)
        self._step_token = runner.take_step_token()
        return result

    def _eager(self, inputs: Sequence[Any], reason: str | None) -> Any:
        self.eager_calls += 1
        if reason is not None:
            self._log(reason)
        return self.function(*inputs)

    def _log(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)
            logs.emit("cudagraphs", f"{self.name}: not replayed through a CUDA graph: {reason}")

    def refuse(self, reason: str) -> None:
        """Log why a key will not be recorded (its calls run eagerly)."""
        self._log(reason)

    # -- recording --

    def _new_recording(self, key: tuple, inputs: Sequence[Any], in_place: Sequence[bool]) -> Recording | None:
        reason = ungraphable_reason(inputs, self.device_type)  # the key checks copied inputs only
        if reason is not None:
            self.refuse(reason)
            return None
        shape = shape_of(key)
        if shape not in self.shapes and len(self.shapes) >= self.settings.max_shapes:
            self.refuse(f"more than {self.settings.max_shapes} input shapes (dynamic shapes); raise "
                        f"Config.cudagraph_max_shapes to record more")
            return None
        if self.shapes.get(shape, 0) >= self.settings.max_recordings_per_shape:
            self.refuse(f"the addresses of parameters or saved activations read in place changed more than "
                        f"{self.settings.max_recordings_per_shape} times for one input shape")
            return None
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        recording = self._record(inputs, in_place)
        if recording is _WARM_UP_AGAIN:
            self.shapes[shape] -= 1
        return recording

    def _record(self, inputs: Sequence[Any], in_place: Sequence[bool]) -> Recording | None:
        pool = choose_pool(self.kind, [v for v, fixed in zip(inputs, in_place) if fixed],
                           self._runner_pool, self._new_pool)
        mutated, reason = self._warm_up(inputs, in_place, pool)
        if reason is _WARM_UP_AGAIN:
            return _WARM_UP_AGAIN
        if reason is not None:
            self.refuse(reason)
            return None
        copied = [i for i, value in enumerate(inputs) if isinstance(value, torch.Tensor) and not in_place[i]]
        static_inputs = list(inputs)
        # Outside inference mode: usable under any mode (the key tells modes apart, not the buffers).
        with torch.inference_mode(False), self._pool_place(pool):
            for index in copied:
                static_inputs[index] = static_copy(inputs[index])
        try:
            graph, outputs = self._capture(static_inputs, pool)
        except Exception as error:  # noqa: BLE001 - an op that cannot be captured runs eagerly
            first_line = (str(error).splitlines() or [""])[0]
            self.refuse(f"capture failed ({type(error).__name__}: {first_line})")
            return None
        flat_outputs, rebuild = flatten(outputs)
        recording = Recording(graph, pool, static_inputs, copied, mutated, flat_outputs, rebuild,
                              first_uncloned=self._flat_index(outputs, self.kept_outputs, flat_outputs),
                              first_saved=self._flat_index(outputs, self._first_saved(outputs), flat_outputs))
        kept = flat_outputs[:recording.first_uncloned]
        foreign = {v.untyped_storage().data_ptr() for v in static_inputs if isinstance(v, torch.Tensor)}
        recording.pool_leases = gradient_lease.pool_leases(pool)
        if self.hands_out and self.kind != "backward":
            recording.lease = OutputLease.of(kept, foreign, self.name)
            kept = _without(kept, recording.lease.positions)
        elif self.kind == "backward":
            recording.gradients_to_hand_out = GradientLease.positions_of(kept, foreign)
        recording.clone_plan = ClonePlan.of(kept, batched=self.kind == "backward")
        self._protect(recording, static_inputs, in_place)
        leased = recording.lease is not None and bool(recording.lease.groups)
        recording.awaits_backward = bool(recording.protected) or (self.kind == "forward" and leased)
        for index, fixed in enumerate(in_place):
            # Read in place: the key holds their address, and a replay happens only when a caller's
            # tensor is there again, so the recording needs no reference (one would pin the memory
            # and count as a holder of a saved activation).
            if fixed:
                static_inputs[index] = None
        logs.emit("cudagraphs", f"{self.name}: recorded a CUDA graph for inputs "
                                f"{[tuple(v.shape) for v in inputs if isinstance(v, torch.Tensor)][:4]}"
                                f"{'...' if len(inputs) > 4 else ''} ({len(copied)} copied, "
                                f"{sum(in_place)} read in place)")
        return recording

    def _runner_pool(self) -> Any:
        if self._pool is None:
            self._pool = self._new_pool()
        return self._pool

    def _new_pool(self) -> Any:
        # A MemPool, not a bare graph_pool_handle: warm-up allocates from it before any graph
        # holds it, and only an owner's reference keeps an unused pool from being freed.
        return torch.cuda.MemPool()

    def _capture(self, static_inputs: Sequence[Any], pool: Any) -> tuple[Any, Any]:
        """Record one call on the static inputs: the graph and its (static) outputs."""
        graph = torch.cuda.CUDAGraph()
        with _blas_workspaces_released(), torch.cuda.graph(graph, pool=pool.id, stream=_capture_stream()):
            outputs = self.function(*static_inputs)
        return graph, outputs

    @contextlib.contextmanager
    def _pool_place(self, pool: Any):
        """Allocate from `pool` on the capture stream: the blocks warm-up frees are the ones its
        recording's static copies and capture take (the allocator reuses a block on the stream
        that freed it)."""
        stream = _capture_stream()
        stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(stream), torch.cuda.use_mem_pool(pool):
                yield
        finally:  # also when warm-up raises: the copies it read are freed on the caller's stream
            torch.cuda.current_stream().wait_stream(stream)

    @staticmethod
    def hands_out_gradients() -> bool:
        """Whether a backward recorded now hands its gradients out in place (the native extension
        that moves them is loaded)."""
        return gradient_lease.available()

    def _launch(self, recording: Recording, inputs: Sequence[Any]) -> None:
        recording.graph.replay()

    @staticmethod
    def _revoke(storage_pointer: int, message: str) -> None:
        revoke_storage(storage_pointer, message)

    def _run_warm_up_calls(self, copies: Sequence[Any]) -> Any:
        rng_state = torch.cuda.get_rng_state()
        with _blas_workspaces_released():
            for _ in range(max(1, self.settings.warmup_calls)):
                outputs = self.function(*copies)
        torch.cuda.set_rng_state(rng_state)  # warm-up must not shift the random stream eager would see
        return outputs

    def _first_saved(self, outputs: Any) -> int | None:
        if self.kind != "forward" or not self.saved_outputs or type(outputs) not in (tuple, list):
            return None
        return max(0, len(outputs) - self.saved_outputs)

    @staticmethod
    def _flat_index(outputs: Any, index: int | None, flat_outputs: Sequence[Any]) -> int:
        """The flat index of output `index` (outputs may hold tuples of tensors); None: past the end."""
        if index is None or type(outputs) not in (tuple, list):
            return len(flat_outputs)
        return len(flatten(list(outputs[:index]))[0])

    def _protect(self, recording: Recording, static_inputs: Sequence[Any], in_place: Sequence[bool]) -> None:
        """Note the handed-out outputs a replay overwrites; register every handed-out one as read in place."""
        fixed = {static_inputs[i].untyped_storage().data_ptr() for i, f in enumerate(in_place) if f}
        outputs = recording.static_outputs
        recording.protected = [i for i in range(recording.first_saved, len(outputs))
                               if isinstance(outputs[i], torch.Tensor)
                               and outputs[i].untyped_storage().data_ptr() not in fixed]
        recording.versioned = [outputs[i] for i in recording.protected if not outputs[i].is_inference()]
        _register_saved(recording, outputs, [i for i in range(recording.first_saved, len(outputs))
                                             if isinstance(outputs[i], torch.Tensor)])

    def _warm_up(self, inputs: Sequence[Any], in_place: Sequence[bool], pool: Any) -> tuple[list[int], str | None]:
        """Run on the inputs, or copies of them, in the recording's pool on its capture stream;
        return the inputs it wrote and a refusal, if any.

        A pure function (`pure`: a graph compiled by aot_compile, which returns
        the new values of the inputs it mutates) runs on the inputs themselves.
        Any other runs on copies, parameters included, so that warm-up never
        changes what the caller sees; made outside inference mode so that their
        version counters show which ones the function writes. They are made
        outside the pool, on the caller's stream, whose later allocations reuse
        them (in the pool they would stay reserved: a GPT-2 step's pool grew by
        its parameters, 3.3 GB against 2.1); but they stay reserved beside it
        (GPT-2 training: its 500 MB of parameters). What the calls allocate is
        freed before leaving the pool, for the capture to take."""
        if self.pure:
            copies, versions = list(inputs), None
        else:
            with torch.inference_mode(False):
                copies = [static_copy(v) if isinstance(v, torch.Tensor) else v for v in inputs]
            versions = [v._version if isinstance(v, torch.Tensor) else 0 for v in copies]
        with self._pool_place(pool):
            _warm_ups.append(False)
            try:
                outputs = self._run_warm_up_calls(copies)
            finally:
                incomplete = _warm_ups.pop()
            if incomplete:
                return [], _WARM_UP_AGAIN
            mutated = [] if versions is None else \
                [i for i, v in enumerate(copies) if isinstance(v, torch.Tensor) and v._version != versions[i]]
            refusal = warm_up_refusal(in_place, mutated, flatten(outputs)[0], self.device_type)
            del outputs
        return mutated, refusal  # the copies are freed after the caller's stream waited for the calls

    # -- replay --

    def _replay(self, recording: Recording, inputs: Sequence[Any]) -> Any:
        if recording.pool_leases.pending:  # handed-out gradients still alive leave the pool first
            recording.pool_leases.release()
        if recording.gradients is not None and recording.gradients.moved:
            self._clone_gradients(recording)
        elif recording.gradients_to_hand_out is not None and self.hands_out_gradients():
            self._hand_out_gradients(recording)
        static_inputs = recording.static_inputs
        for index in recording.copied:
            if static_inputs[index].data_ptr() != inputs[index].data_ptr():
                static_inputs[index].copy_(inputs[index])
        if recording.lease is not None:  # after the copies: an input may be an earlier output
            for lease in self._pool_leases(recording):
                lease.revoke(self._revoke)
        self._launch(recording, inputs)
        self.replays += 1
        recording.last_step = _step
        # Mutated inputs were written into the static copies; eager would have
        # written the caller's tensors.
        for index in recording.mutated:
            inputs[index].copy_(static_inputs[index])
        static_outputs = recording.static_outputs
        if recording.versioned:  # backwards still holding the previous replay's activations now fail loudly
            torch.autograd.graph.increment_version(recording.versioned)
        outputs = recording.clone_plan.copy(static_outputs[:recording.first_uncloned])
        if recording.lease is not None:
            recording.lease.hand_out(outputs)
        elif recording.gradients is not None:
            recording.gradients.hand_out(outputs)
        outputs += static_outputs[recording.first_uncloned:]
        if recording.awaits_backward:
            token = self._step_token = StepToken()
            recording.step_token = weakref.ref(token)
        return recording.rebuild(outputs)

    def _pool_leases(self, recording: Recording) -> list[OutputLease]:
        """The output leases a replay of `recording` may overwrite: its own, and in an inference
        runner's shared pool every recording's (a later recording's outputs may lie in an earlier
        one's intermediates, which the earlier one's replays write: as under torch.compile, a call
        ends the outputs of every earlier call of the runner)."""
        if self.kind != "inference" or len(self.recordings) == 1:
            return [recording.lease]
        return [other.lease for other in self.recordings.values() if other is not None and other.lease is not None]

    @staticmethod
    def _hand_out_gradients(recording: Recording) -> None:
        """Hand the backward's gradients out in place from now on (the native extension is loaded)."""
        positions, recording.gradients_to_hand_out = recording.gradients_to_hand_out, None
        recording.gradients = GradientLease(positions, recording.static_outputs, recording.pool_leases)
        kept = recording.static_outputs[:recording.first_uncloned]
        recording.clone_plan = ClonePlan.of(_without(kept, set(positions)), batched=True)

    def _clone_gradients(self, recording: Recording) -> None:
        """Gradients of this recording outlived their step (moved out of the pool before a replay):
        clone them from now on, as the move would at every step, in one batch."""
        self._log("gradients outlived their step (accumulated, or kept by zero_grad(set_to_none=False)) and "
                  "were moved out of the CUDA graph's memory pool: they are cloned after each replay from now on")
        kept = recording.static_outputs[:recording.first_uncloned]
        recording.clone_plan = ClonePlan.of(kept, batched=True)
        recording.gradients = None


def _without(values: list[Any], positions: set[int]) -> list[Any]:
    """`values` with None at `positions` (handed out in place: not cloned)."""
    return [None if index in positions else value for index, value in enumerate(values)]


_MISSING = object()
_capture_streams: dict[int, Any] = {}


@contextlib.contextmanager
def _blas_workspaces_released():
    """cuBLAS's workspaces freed before and after: one made on the capture stream inside a pool
    (at warm-up, or at capture, where the graph records its address) would stay allocated there
    for the life of the process, 65 MB (cuBLAS's and cuBLASLt's) that no later allocation of the
    pool could use and that kept the pool from being freed with its model. Freed, the memory is
    scratch of the graphs that recorded it, like their intermediates: another recording of the
    pool may place its own intermediates or outputs there, which the pool's leases cover (as for
    intermediates: handed-out gradients move, outputs are revoked, at the pool's next replay).
    Eager calls find new workspaces at their next product. torch.compile clears them so too."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    try:
        yield
    finally:
        if clear is not None:
            clear()


def _capture_stream() -> Any:
    """The current device's stream for warm-ups and captures (one, so that they share blocks)."""
    device = torch.cuda.current_device()
    if device not in _capture_streams:
        _capture_streams[device] = torch.cuda.Stream()
    return _capture_streams[device]


@dataclasses.dataclass
class ClonePlan:
    """Copies of a replay's outputs that the caller keeps (the next replay overwrites the originals).

    A backward hands out one gradient per parameter: hundreds of small tensors,
    each a clone, an allocation and a kernel launch. Contiguous ones of one dtype
    are copied in one batch instead (one concatenating copy into a fresh buffer,
    handed out as views of it: `torch._utils`' flatten/unflatten, two C++ calls).
    Only gradients are batched: views of one buffer as outputs of an autograd
    Function's forward would refuse in-place changes that a clone allows."""

    batches: list[tuple[list[int], list[torch.Tensor]]]
    """(output positions, static outputs) copied together."""
    single: list[int]
    """Positions cloned one by one (other layouts, small groups)."""

    MIN_BATCH = 8

    @classmethod
    def of(cls, outputs: Sequence[Any], batched: bool) -> "ClonePlan":
        by_dtype: dict[Any, list[int]] = {}
        single = []
        for index, value in enumerate(outputs):
            if not isinstance(value, torch.Tensor):
                continue
            if batched and value.is_contiguous() and value.numel() > 0 and not value.requires_grad:
                by_dtype.setdefault((value.dtype, value.device), []).append(index)
            else:
                single.append(index)
        batches = []
        for positions in by_dtype.values():
            if len(positions) >= cls.MIN_BATCH:
                batches.append((positions, [outputs[i] for i in positions]))
            else:
                single.extend(positions)
        return cls(batches, sorted(single))

    def copy(self, outputs: Sequence[Any]) -> list[Any]:
        copies = list(outputs)
        for positions, tensors in self.batches:
            flat = torch._C._nn.flatten_dense_tensors(tensors)
            for position, view in zip(positions, torch._C._nn.unflatten_dense_tensors(flat, tensors)):
                copies[position] = view
        for position in self.single:
            copies[position] = outputs[position].clone(memory_format=torch.preserve_format)
        return copies


def warm_up_refusal(in_place: Sequence[bool], mutated: Sequence[int], outputs: Sequence[Any],
                    device_type: str = "cuda") -> str | None:
    """Why what warm-up saw forbids recording, or None."""
    written = [i for i in mutated if in_place[i]]
    if written:
        return f"the graph writes in place to input {written[0]}, a parameter or saved activation read in place"
    for value in outputs:
        if isinstance(value, torch.Tensor) and value.device.type != device_type:
            return f"an output on the {value.device.type.upper()} (a graph records device work only)"
        if not isinstance(value, (torch.Tensor, *NUMBER_TYPES)):
            return f"an output of type {type(value).__name__}"
    return None


def flatten(outputs: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """Outputs as a flat list, and the function that rebuilds their structure.

    Compiled graphs return a flat tuple or list (None entries included, which
    pytree would drop); anything else goes through pytree."""
    if isinstance(outputs, torch.Tensor):
        return [outputs], lambda flat: flat[0]
    if type(outputs) in (tuple, list):
        flattened = flatten_one_level(outputs)
        if flattened is not None:
            flat, layout = flattened
            if not any(layout):
                return flat, type(outputs)
            container = type(outputs)
            return flat, lambda values: container(rebuild_one_level(values, layout))
    flat, spec = pytree.tree_flatten(outputs)
    return flat, lambda values: pytree.tree_unflatten(values, spec)


def flatten_one_level(values: Sequence[Any]) -> tuple[list[Any], tuple] | None:
    """Leaves (tensors, numbers) and tuples or lists of leaves, flattened; with the layout that
    `rebuild_one_level` needs (per value: None, or (type, length)). None for deeper structures.

    Graphs run as they are save multi-output ops (batch norm) as tuples: hundreds per call,
    which this handles without pytree's per-node cost."""
    flat: list[Any] = []
    layout: list[Any] = []
    for value in values:
        kind = type(value)
        if kind is tuple or kind is list:
            if not all(isinstance(item, (torch.Tensor, *NUMBER_TYPES)) for item in value):
                return None
            flat.extend(value)
            layout.append((kind, len(value)))
        elif isinstance(value, (torch.Tensor, *NUMBER_TYPES)):
            flat.append(value)
            layout.append(None)
        else:
            return None
    return flat, tuple(layout)


def rebuild_one_level(flat: Sequence[Any], layout: tuple) -> list[Any]:
    values: list[Any] = []
    position = 0
    for entry in layout:
        if entry is None:
            values.append(flat[position])
            position += 1
        else:
            kind, length = entry
            values.append(kind(flat[position:position + length]))
            position += length
    return values


def static_copy(value: torch.Tensor) -> torch.Tensor:
    """A buffer with value's layout and contents (kernels recorded on it see eager's strides)."""
    buffer = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    buffer.copy_(value)
    return buffer


MIN_LAUNCHES = 2
"""Inference graphs of fewer launches than this run directly, unrecorded. A replay has a host
cost of its own (on the H100, `CUDAGraph.replay` 17 us, with the input copy and the output's
hand-over 38) against about 28 us for a compiled call that launches one kernel directly: a
recording of one launch only adds to it (max-autotune on one linear layer: 0.063 ms per call
recorded against 0.021 direct)."""


def too_few_launches(function: Callable[..., Any]) -> str | None:
    """Why recording `function` would cost host time instead of saving it, or None. Only
    generated graphs know their launches (`codegen.pipeline`'s runner: `launches`, its kernels
    and ATen calls other than views)."""
    count = getattr(function, "launches", None)
    if not isinstance(count, int) or count >= MIN_LAUNCHES:
        return None
    return (f"it launches {count} kernel{'s' if count != 1 else ''}; a replay costs more host "
            f"time than that (graphs of {MIN_LAUNCHES} launches or more are recorded)")


def runner_for(function: Callable[..., Any], *, name: str, settings: Settings,
               static_input_indices: frozenset[int] = frozenset(), pure: bool = False) -> Callable[..., Any]:
    """An inference graph's runner: `function` itself where recording would not pay
    (`too_few_launches`, one "cudagraphs" log line), else a `CudaGraphRunner`."""
    reason = too_few_launches(function)
    if reason is not None:
        logs.emit("cudagraphs", f"{name}: runs without a CUDA graph: {reason}")
        return function
    return CudaGraphRunner(function, static_input_indices=static_input_indices, settings=settings, name=name,
                           pure=pure)


def wrap_compiled(settings: Settings, name: str = "graph",
                  static_input_indices: frozenset[int] = frozenset()) -> Callable[..., Callable[..., Any]]:
    """The wrapper `autograd.aot_compile` applies to each compiled graph: a runner of that graph's kind.

    `static_input_indices` index the captured graph's inputs, which are the
    inference and forward graphs' inputs too (not the backward's). The graphs
    are pure: aot_compile returns the new values of mutated inputs as outputs."""

    def wrap(compiled: Callable[..., Any], kind: str, saved_outputs: int = 0,
             kept_outputs: int | None = None) -> Callable[..., Any]:
        static = static_input_indices if kind != "backward" else frozenset()
        if kind == "inference":
            return runner_for(compiled, name=f"{name} ({kind})", settings=settings, static_input_indices=static,
                              pure=True)
        return CudaGraphRunner(compiled, kind=kind, saved_outputs=saved_outputs, kept_outputs=kept_outputs,
                               static_input_indices=static, settings=settings, name=f"{name} ({kind})", pure=True)

    return wrap
