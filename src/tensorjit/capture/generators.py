"""Generators run lazily during capture, as Python runs them.

Calling a generator function inside the compiled function makes a `GeneratorValue` holding
the generator's frame, not yet run. Each `next()` (a `for` loop's FOR_ITER, `next(g)`, a
polyfill reading it, `yield from` in another generator) resumes that frame until its next
`yield`, where YIELD_VALUE raises `Suspended` and the frame keeps its place; `send(v)` puts v
where the `yield` expression's value goes. A body therefore runs exactly as far as the program
reads it, and its side effects interleave with the consumer's as in eager Python.

Closing is the one thing capture cannot time: Python closes a generator when its last
reference goes, running the `finally` and `with` exits around the `yield` it is suspended at.
`close()` and `throw()` called by the program run them; a generator left suspended inside
such a block when capture ends is not modelled, and that call runs eagerly
(`unclosed_protected`). A suspended generator's frame exists only in the capture: where the call
had no effect visible outside it (no side effects, tensor writes or random draws) and only
next() resumed it, it is rebuilt by calling its function again and taking as many items (the
body then reaches the same state); otherwise the graph ends earlier, before the step that first
resumed it, where it is unstarted and rebuilt by calling its function again
(convert.capture_entry). A finished one is rebuilt as an exhausted generator.

A graph break inside the body of a generator the compiled function made itself (not one an
inlined call made, nor a polyfill's standing for a C iterator) cannot be resumed: the frame it
breaks in exists only in capture. That call runs eagerly (`breaking_generator`, read by convert),
as Dynamo skips such a frame; a generator made by an inlined call breaks at that call instead.
"""

from __future__ import annotations

import types

from . import cpython
from .breaks import GraphBreak
from .contextmanagers import Suspended
from .output import _is_impure
from .values.base import ConstantValue, Value
from .values.containers import IteratorValue


class GeneratorValue(IteratorValue):
    """A generator made during capture: its suspended frame, resumed by each `next()`."""

    def __init__(self, frame, function: Value, args: list[Value], kwargs: dict[str, Value]) -> None:
        super().__init__([])
        self.frame = frame
        self.function = function  # what was called, with args and kwargs: rebuilds an unstarted one
        self.args = args
        self.kwargs = kwargs
        self.started = False
        self.first_step: int | None = None  # the root frame's step that first resumed it
        self.finished = False
        self.running = False
        self.return_value: Value = ConstantValue(None)
        self.presented_type: type = types.GeneratorType  # a polyfill's generator stands for a C iterator
        self.resumes = 0  # how many times it was resumed with None (next): what a rebuilt one is advanced by
        self.replayable = True  # only next() resumed it (no send of a value, no throw)
        self.made_by_root = False  # called by the compiled function's own code, not by one it inlined
        frame.capture.generators.append(self)

    def python_type(self) -> type:
        return self.presented_type

    @property
    def items(self) -> list[Value]:
        raise GraphBreak("generator", "the items of a generator read all at once by a handler that cannot wait")

    # -- running the frame --------------------------------------------------------------------
    def next(self) -> Value | None:
        """The next yielded value, or None when the generator is finished."""
        return self.send(ConstantValue(None))

    def send(self, value: Value) -> Value | None:
        if self.finished:
            return None
        if not self.started and not (value.is_constant() and value.constant() is None):
            error = TypeError("can't send non-None value to a just-started generator")
            raise GraphBreak("op-error", str(error), exception=error)
        if self.started:
            self.frame.stack[-1] = value  # YIELD_VALUE left a placeholder where the yield's value goes
        if not (value.is_constant() and value.constant() is None):
            self.replayable = False
        self.resumes += 1
        return self._resume()

    def _resume(self) -> Value | None:
        if self.running:
            error = ValueError("generator already executing")
            raise GraphBreak("op-error", str(error), exception=error)
        if not self.started:
            self.first_step = self.frame.capture.steps - 1
        self.started = self.running = True
        try:
            result = self.frame.run()
        except Suspended as suspended:
            return suspended.value
        except GraphBreak as e:
            self.finished = True
            if e.exception is None and e.breaking_generator is None and self.made_by_root \
                    and self.presented_type is types.GeneratorType:
                e.breaking_generator = self.frame.location()  # convert runs this call eagerly
            if isinstance(e.exception, StopIteration):  # PEP 479 (3.11: the C code converts it)
                error = RuntimeError("generator raised StopIteration")
                error.__cause__ = e.exception
                e.exception = error
            raise
        finally:
            self.running = False
        self.finished = True
        self.return_value = result
        return None

    def unpack(self, tx) -> list[Value]:
        items = []
        while (item := self.next()) is not None:
            items.append(item)
        return items

    # -- close and throw ------------------------------------------------------------------------
    def throw(self, exception: BaseException) -> Value | None:
        """Raise `exception` at the suspended `yield`; the next yielded value, or None at the end."""
        if not self.started or self.finished:
            self.started = self.finished = True
            raise GraphBreak("raise", f"{type(exception).__name__} thrown into a generator", exception=exception)
        delegate = self.frame.delegate
        if delegate is not None and not isinstance(delegate, GeneratorValue):
            delegate = None  # a plain iterator has no throw(): Python raises at the outer yield
        if delegate is not None:
            raise GraphBreak("generator", "throw() or close() of a generator delegating with yield from")
        self.replayable = False
        error = GraphBreak("raise", f"{type(exception).__name__} thrown into a generator", exception=exception)
        error.root_step = self.frame.capture.steps - 1
        if not self.frame.enter_handler(self.frame.instructions[self.frame.ip - 1], error):
            self.finished = True
            raise error
        return self._resume()

    def close(self) -> None:
        if not self.started or self.finished:
            self.started = self.finished = True
            return
        if not self.protected():  # GeneratorExit would leave the frame at once: nothing runs
            self.finished = True
            return
        try:
            yielded = self.throw(GeneratorExit())
        except GraphBreak as e:
            if isinstance(e.exception, (GeneratorExit, StopIteration)):
                return
            raise
        if yielded is not None:
            error = RuntimeError("generator ignored GeneratorExit")
            raise GraphBreak("op-error", str(error), exception=error)

    def protected(self) -> bool:
        """Is it suspended inside a `try` or `with` of its own (or of one it delegates to), whose
        handler Python runs when the generator is closed?"""
        if not self.started or self.finished:
            return False
        delegate = self.frame.delegate
        if isinstance(delegate, GeneratorValue) and delegate.protected():
            return True
        return handler_around(self.frame, self.frame.ip - 1)

    # -- the program's view --------------------------------------------------------------------
    def getattr(self, tx, name: str) -> Value:
        if name in ("__next__", "__iter__", "send", "close", "throw"):
            return GeneratorMethodValue(self, name)
        if name == "gi_running":
            return ConstantValue(self.running)
        raise GraphBreak("getattr", f"attribute {name!r} of a generator")

    def reconstruct(self, cg) -> str:
        if self.finished:
            return f"{cg.helper('exhausted_generator')}()"
        if self.started and not self._replayable(cg.output):
            error = GraphBreak("reconstruct", "a generator suspended in its body (its frame exists only in capture)")
            error.root_step = self.first_step  # where the graph can end with the generator unstarted
            raise error
        arguments = [cg.value(a) for a in self.args] + [f"{k}={cg.value(v)}" for k, v in self.kwargs.items()]
        call = f"{cg.value(self.function)}({', '.join(arguments)})"
        if self.started:  # called again and advanced as far: its frame is where capture's was
            return f"{cg.helper('advanced_iterator')}({call}, {self.resumes})"
        return call

    def _replayable(self, output) -> bool:
        """Can a started generator be rebuilt by calling its function again and taking as many items?
        Only when running its body again reaches the same state: nothing the call did is visible
        outside it (no side effects, no writes to tensors, no random draws in the graph), so the
        body reads what it read during capture, and it was only resumed by next()."""
        if not self.replayable or self.presented_type is not types.GeneratorType or self.frame.delegate is not None \
                and not isinstance(self.frame.delegate, GeneratorValue):
            return False
        if output.side_effects or output.writes.written:
            return False
        return not any(_is_impure(node) for node in output.graph.nodes if node.op not in ("placeholder", "output"))


class GeneratorMethodValue(Value):
    """`g.send`, `g.close`, `g.throw`, `g.__next__` of a generator made during capture."""

    def __init__(self, generator: GeneratorValue, name: str) -> None:
        self.generator = generator
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(self, tx, args, kwargs) -> Value:
        generator = self.generator
        if self.name == "__iter__":
            return generator
        if self.name == "close":
            generator.close()
            return ConstantValue(None)
        if self.name == "throw":
            result = generator.throw(_exception_of(args))
        else:
            result = generator.send(args[0] if self.name == "send" else ConstantValue(None))
        if result is None:
            error = StopIteration(generator.return_value.constant()) \
                if generator.return_value.is_constant() else StopIteration()
            raise GraphBreak("stop-iteration", "the generator is finished", exception=error)
        return result

    def reconstruct(self, cg) -> str:
        return f"{cg.value(self.generator)}.{self.name}"


def _exception_of(args: list[Value]) -> BaseException:
    thrown = args[0]
    if thrown.is_constant() and isinstance(thrown.constant(), type) and issubclass(thrown.constant(), BaseException):
        return thrown.constant()()
    obj = getattr(thrown, "obj", None)
    if isinstance(obj, BaseException):
        return obj
    raise GraphBreak("generator", "throw() of something other than an exception class or instance")


def handler_around(frame, index: int) -> bool:
    """Does a handler of the program's own (a `try`, a `with`) cover instruction `index`? The
    handlers the compiler adds to every generator (PEP 479's StopIteration conversion) and to
    `yield from` (CLEANUP_THROW, which passes a throw to the sub-iterator) do not count."""
    offset = frame.instructions[index].offset
    for entry in cpython.exception_table(frame.code):
        if entry.start <= offset < entry.end:
            handler = frame.instructions[frame.index_of[entry.target]]
            return not (handler.opname == "CLEANUP_THROW" or
                        (handler.opname == "CALL_INTRINSIC_1" and handler.arg == 3))
    return False


def unclosed_protected(capture) -> GeneratorValue | None:
    """A generator left suspended inside a try/with block, whose cleanup Python would run when the
    generator is dropped (at a time capture does not know)."""
    for generator in capture.generators:
        if generator.protected():
            return generator
    return None

