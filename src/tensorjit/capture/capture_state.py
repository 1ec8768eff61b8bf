"""What the frames of one capture share, and how an opcode handler signals the frame loop.

`Capture` holds one capture's state (config, output graph, step count, the exception being
handled); `Return` is raised by the return handlers (opcodes.py) and caught by the frame loop
(interpreter.py), `StopCapture` by the loop at the step where the graph must end and caught
by the converter (convert.py). It sits below opcodes.py and interpreter.py, so that opcodes.py
imports nothing of the interpreter, which imports opcodes.py (at the first capture: it defers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import Config
from .output import OutputGraph
from .values.base import ConstantValue, Value
from .values.objects import ObjectValue

if TYPE_CHECKING:
    from .interpreter import Frame


class Return(Exception):
    def __init__(self, value: Value) -> None:
        self.value = value


class StopCapture(Exception):
    """The root frame reached the step where the graph must end."""


class _OuterException(ConstantValue):
    """The exception the caller may be handling when the compiled function starts: unknown to capture.
    It stands where PUSH_EXC_INFO saves the previous exception, and is None when rebuilt there."""

    def __init__(self) -> None:
        super().__init__(None)


OUTER_EXCEPTION = _OuterException()


def handled_exception(capture: "Capture") -> BaseException | None:
    """The exception being handled now, when capture knows it (one raised during capture)."""
    handled = capture.handled
    if isinstance(handled, ObjectValue) and isinstance(handled.obj, BaseException):
        return handled.obj
    return None


def chain_context(capture: "Capture", exception: BaseException | None) -> None:
    """An exception raised while another is handled gets it as its __context__, as CPython does."""
    handled = handled_exception(capture)
    if exception is None or handled is None or handled is exception or exception.__context__ is not None:
        return
    context = handled
    while context is not None:  # no cycle: CPython cuts the chain where it meets the new exception
        if context.__context__ is exception:
            context.__context__ = None
            break
        context = context.__context__
    exception.__context__ = handled


class Capture:
    """State shared by all frames of one capture."""

    def __init__(self, config: Config, output: OutputGraph, break_at: int | None) -> None:
        self.config = config
        self.output = output
        self.break_at = break_at
        self.steps = 0
        self.generators: list = []  # every GeneratorValue made, checked for unclosed cleanup at the end
        self.open_contexts: list = []  # autocast/inference_mode blocks entered for real and not yet left
        self.handled = OUTER_EXCEPTION  # the exception being handled (sys.exc_info()), set by PUSH_EXC_INFO
        self.frames: list["Frame"] = []  # every frame run, emptied by `release`

    def release(self) -> None:
        """Drop what the finished capture holds of the program's objects. Its frames, values and
        graph form reference cycles, which only the cycle collector frees: till it runs they would
        keep the call's tensors (optimizer state, activations) alive after the program let go."""
        for frame in self.frames:
            frame.locals, frame.stack, frame.cells, frame.delegate = {}, [], {}, None
        self.frames.clear()
        self.generators.clear()
        self.handled = OUTER_EXCEPTION
        self.output.release()
