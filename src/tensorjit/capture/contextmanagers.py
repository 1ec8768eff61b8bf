"""`@contextlib.contextmanager` functions used in `with` inside the compiled function.

Calling such a function makes a `GeneratorContextValue` instead of contextlib's object. Its
`__enter__` runs the generator's frame symbolically up to its `yield` and keeps the frame
suspended there, as generators.py does for every generator; `__exit__` resumes it to its end. Setup and teardown therefore land in the
graph exactly where Python runs them, around the body of the `with`.

An exception leaving the `with` body is thrown into the generator at its `yield` (`_throw`), as
contextlib does: the generator's handlers run, and what comes out decides whether it is swallowed.
Not modelled, each a graph break: a generator that yields twice, and a graph break inside the body
while the generator is suspended (the suspended frame cannot be rebuilt, so that call runs eagerly).
"""

from __future__ import annotations

import contextlib

from .breaks import GraphBreak
from .values.base import ConstantValue, Value
from .values.functions import FunctionValue


@contextlib.contextmanager
def _probe():
    yield


HELPER_CODE = _probe.__code__  # contextlib's `helper`, shared by every decorated function
"""The code of the function `@contextmanager` returns: calling one is recognized by it."""


class Suspended(Exception):
    """Raised by YIELD_VALUE: the generator's frame stops there and keeps its place."""

    def __init__(self, value: Value) -> None:
        self.value = value


def generator_function(helper) -> Value:
    """The decorated generator function a contextlib helper closes over (`func`)."""
    fn = getattr(helper, "fn", None)
    if fn is None or "func" not in fn.__code__.co_freevars:
        raise GraphBreak("contextmanager", "a contextmanager function made inside the compiled function")
    cell = fn.__closure__[fn.__code__.co_freevars.index("func")]
    return FunctionValue(cell.cell_contents)


class ContextManagerFactoryValue(Value):
    """`contextlib.contextmanager(f)` evaluated inside the compiled function (a decorator on a nested function)."""

    def __init__(self, function: Value) -> None:
        self.function = function

    def call(self, tx, args, kwargs) -> Value:
        return GeneratorContextValue(self, list(args), dict(kwargs), self.function)

    def reconstruct(self, cg) -> str:
        return f"{cg.constant(contextlib.contextmanager)}({cg.value(self.function)})"


class GeneratorContextValue(Value):
    def __init__(self, helper, args: list[Value], kwargs: dict[str, Value], function: Value | None = None) -> None:
        self.helper = helper  # what the program called (contextlib's helper), to rebuild an unentered one
        self.function = function if function is not None else generator_function(helper)
        self.args = args
        self.kwargs = kwargs
        self.frame = None

    def python_type(self) -> type:
        return contextlib._GeneratorContextManager

    def getattr(self, tx, name: str) -> Value:
        if name in ("__enter__", "__exit__"):
            return GeneratorContextMethod(self, name)
        raise GraphBreak("getattr", f"attribute {name!r} of a contextmanager object")

    def enter(self, tx) -> Value:
        if self.frame is not None:
            raise GraphBreak("contextmanager", "a contextmanager object entered twice")
        frame = self.frame = tx.child_frame(self.function, self.args, self.kwargs)
        frame.is_generator = True
        try:
            frame.run()
        except Suspended as suspended:
            return suspended.value
        error = RuntimeError("generator didn't yield")
        raise GraphBreak("op-error", str(error), exception=error)

    def exit(self, tx, exception: Value) -> Value:
        if not (exception.is_constant() and exception.constant() is None):
            return self._throw(exception)
        try:
            self.frame.run()
        except Suspended:
            error = RuntimeError("generator didn't stop")
            raise GraphBreak("op-error", str(error), exception=error) from None
        return ConstantValue(False)

    def _throw(self, exception: Value) -> Value:
        """__exit__ with an exception leaving the body: it is raised at the suspended `yield`, as
        contextlib throws it into the generator. The generator ending swallows it (True); the same
        exception coming out lets it go on (False); another exception replaces it."""
        value = getattr(exception, "obj", None)
        if not isinstance(value, BaseException):
            raise GraphBreak("contextmanager", "an exception capture does not know leaving a contextmanager's body")
        frame = self.frame
        error = GraphBreak("raise", f"{type(value).__name__} thrown into a contextmanager", exception=value)
        error.root_step = frame.capture.steps - 1
        if not frame.enter_handler(frame.instructions[frame.ip - 1], error):
            return ConstantValue(False)
        try:
            frame.run()
        except Suspended:
            error = RuntimeError("generator didn't stop after throw()")
            raise GraphBreak("op-error", str(error), exception=error) from None
        except GraphBreak as e:
            if e.exception is value:
                return ConstantValue(False)
            if isinstance(value, StopIteration) and isinstance(e.exception, RuntimeError) and \
                    e.exception.__cause__ is value:
                return ConstantValue(False)
            raise
        return ConstantValue(True)

    def reconstruct(self, cg) -> str:
        if self.frame is not None:
            raise GraphBreak("reconstruct", "a contextmanager suspended inside its with block")
        arguments = [cg.value(a) for a in self.args] + [f"{k}={cg.value(v)}" for k, v in self.kwargs.items()]
        return f"{cg.value(self.helper)}({', '.join(arguments)})"


class GeneratorContextMethod(Value):
    def __init__(self, context: GeneratorContextValue, name: str) -> None:
        self.context = context
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        if self.name == "__enter__":
            return self.context.enter(tx)
        return self.context.exit(tx, args[1] if len(args) > 1 else ConstantValue(None))

    def reconstruct(self, cg) -> str:
        raise GraphBreak("reconstruct", f"{self.name} of a contextmanager inside its with block")
