"""Graph breaks: every cause, and resuming correctly from every kind of block.

Causes: a tensor-valued branch, `.item()` and `.tolist()` feeding Python,
print, logging, numpy, an untraceable C function. Resume paths: for and while
loops, with-blocks (grad mode must be right after the break), try/except/
finally, a break inside an inlined callee, a break inside a comprehension.
Side effects before and after each break must happen exactly once, in order.
Where the split is unambiguous (straight-line code) the graph count is checked.
"""

import contextlib
import io
import logging
import sys
import zlib

import numpy as np
import pytest
import torch

from .harness import CountingBackend, SideEffects, check, compile, xfail_on_reference

EVENTS = []
EVENTS_SEEN = SideEffects(reset=EVENTS.clear, observe=lambda: list(EVENTS))


def untraceable(n):
    """A C function no capture engine can look into."""
    return zlib.adler32(str(n).encode()) % 7


# ---------------------------------------------------------------- causes


def branch_on_tensor(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


@pytest.mark.parametrize("sign", [1, -1])
def test_tensor_value_branch(sign):
    check(branch_on_tensor, sign * (torch.rand(4) + 0.1), graphs=2)


def test_tensor_value_branch_both_ways_three_graphs():
    counter = CountingBackend()
    compiled = compile(branch_on_tensor, backend=counter)
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(compiled(x), branch_on_tensor(x))
    assert counter.graph_count == 3


def test_tensor_bool_in_while_condition():
    def fn(x):
        steps = 0
        while x.abs().max() > 1:
            x = x / 2
            steps += 1
        return x, steps

    check(fn, torch.tensor([5.0, -9.0, 0.5]))


def test_item_feeding_python():
    def fn(x):
        scale = x.max().item()
        EVENTS.append(("scale", round(scale, 4)))
        return x / scale, scale > 0

    check(fn, torch.rand(5) + 0.5, side_effects=EVENTS_SEEN, graphs=2)


def test_item_into_range():
    def fn(x, n):
        count = int(n.item())
        for _ in range(count):
            x = x + 1
        return x

    check(fn, torch.zeros(3), torch.tensor(3))
    check(fn, torch.zeros(3), torch.tensor(1))


def test_tolist():
    def fn(x):
        values = (x * 2).tolist()
        total = sum(values)
        return x + total, values

    check(fn, torch.tensor([1.0, 2.0, 3.0]))


def _printed(fn, *args):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        out = fn(*args)
    return out, buffer.getvalue()


def test_print_in_the_middle():
    def fn(x):
        y = x + 1
        print("middle", y.shape)
        return y * 2

    counter = CountingBackend()
    compiled = compile(fn, backend=counter)
    x = torch.randn(3)
    expected, expected_text = _printed(fn, x)
    for _ in range(2):
        actual, text = _printed(compiled, x)
        torch.testing.assert_close(actual, expected)
        assert text == expected_text
    assert counter.graph_count in (1, 2)


def test_print_tensor_value():
    def fn(x):
        y = x * 3
        print("value", y)
        return y - 1

    x = torch.tensor([1.0, 2.0])
    expected, expected_text = _printed(fn, x)
    actual, text = _printed(compile(fn, backend="eager"), x)
    torch.testing.assert_close(actual, expected)
    assert text == expected_text


LOGGER = logging.getLogger("tensorjit_conformance_user")


def test_logging_call():
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)

    def fn(x):
        y = x.exp()
        LOGGER.info("sum is %.3f", float(y.sum()))
        return y + 1

    try:
        check(fn, torch.zeros(3), side_effects=SideEffects(records.clear, lambda: list(records)))
    finally:
        LOGGER.removeHandler(handler)


def test_numpy_call():
    def fn(x):
        y = x * 2
        z = np.cumsum(y.numpy()) + np.float32(1.0)
        return torch.from_numpy(z) * 3, float(np.max(z))

    check(fn, torch.arange(4.0))


def test_untraceable_c_function():
    def fn(x, n):
        EVENTS.append("before")
        y = x * 2
        k = untraceable(n)
        EVENTS.append(("after", k))
        return y + k

    check(fn, torch.randn(3), 12, side_effects=EVENTS_SEEN, graphs=2)


def test_two_breaks_three_graphs():
    def fn(x):
        y = x.sin()
        k = untraceable(1)
        EVENTS.append(k)
        z = y.cos()
        k = untraceable(2)
        EVENTS.append(k)
        return z + 1

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN, graphs=3, calls=3)


@xfail_on_reference("recompiles resume functions each call when a bound method held on the stack dies")
def test_break_with_bound_method_on_stack_no_recompile():
    def fn(x):
        y = x.sin()
        EVENTS.append(untraceable(1))
        z = y.cos()
        EVENTS.append(untraceable(2))
        return z + 1

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN, graphs=3, calls=3)


def test_break_keeps_all_live_locals():
    def fn(x, a, items):
        t1 = x + 1
        t2 = x * 2
        name = "n" + str(a)
        k = untraceable(a)
        return t1 + t2 * k, name, items + [k], a

    check(fn, torch.randn(3), 5, [1, 2], graphs=2)


def test_break_with_unchanged_tensor_returned():
    def fn(x, y):
        untraceable(0)
        return x, y, x is y

    check(fn, torch.randn(2), torch.randn(2))


# ---------------------------------------------------------------- resume paths


def test_break_inside_for_loop():
    def fn(x):
        for i in range(3):
            x = x * 2
            EVENTS.append(("loop", i))
            if x.sum() > 10:
                x = x - 5
        return x

    check(fn, torch.ones(3), side_effects=EVENTS_SEEN)


def test_break_inside_for_loop_over_list_of_tensors():
    def fn(xs):
        total = torch.zeros(2)
        for index, x in enumerate(xs):
            total = total + x
            if untraceable(index) > 3:
                total = total * 0.5
        return total

    check(fn, [torch.randn(2) for _ in range(4)])


def test_break_inside_while_loop():
    def fn(x):
        n = 0
        while n < 4:
            x = x + 1
            EVENTS.append(untraceable(n))
            n += 1
        return x, n

    check(fn, torch.zeros(2), side_effects=EVENTS_SEEN)


def test_break_in_loop_with_python_break_and_continue():
    def fn(x):
        for i in range(6):
            if i == 1:
                continue
            x = x + i
            if x.sum() > 20:
                break
        return x, i

    check(fn, torch.ones(2))


def test_break_inside_no_grad_block_restores_grad_mode():
    def fn(x):
        with torch.no_grad():
            y = x * 2
            EVENTS.append(untraceable(3))
            z = y * x
            inside = torch.is_grad_enabled()
        w = x * 3
        outside = torch.is_grad_enabled()
        return z, w, inside, outside

    check(fn, torch.randn(3, requires_grad=True), side_effects=EVENTS_SEEN, grad=True)


def test_print_inside_no_grad_block():
    def fn(x):
        with torch.no_grad():
            y = x + 1
            print("inside no_grad")
            z = y * x
        return z, x * 2

    x = torch.randn(3, requires_grad=True)
    expected, expected_text = _printed(fn, x)
    actual, text = _printed(compile(fn, backend="eager"), x)
    assert text == expected_text
    assert [t.requires_grad for t in actual] == [t.requires_grad for t in expected] == [False, True]
    torch.testing.assert_close(actual, expected)


def test_break_inside_enable_grad_within_no_grad_call():
    def fn(x):
        with torch.enable_grad():
            y = x * 2
            EVENTS.append(untraceable(4))
            z = y * 3
        return z, x + 1

    with torch.no_grad():
        check(fn, torch.randn(3, requires_grad=True), side_effects=EVENTS_SEEN)


def test_break_inside_nested_with_blocks():
    def fn(x):
        with torch.no_grad():
            with torch.enable_grad():
                y = x * 2
                EVENTS.append(untraceable(5))
                a = y + 1
            b = y * 2
        return a, b, x * 4

    check(fn, torch.randn(3, requires_grad=True), side_effects=EVENTS_SEEN, grad=True)


def test_break_inside_try_block():
    def fn(x):
        try:
            y = x * 2
            EVENTS.append(untraceable(6))
            y = y + 1
        finally:
            EVENTS.append("finally")
        return y

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN)


def test_break_inside_try_with_exception_caught():
    def fn(x, d):
        try:
            y = x + 1
            EVENTS.append(untraceable(7))
            y = y * d["missing"]
        except KeyError as error:
            EVENTS.append(("caught", str(error)))
            y = x - 1
        else:
            EVENTS.append("else")
        finally:
            EVENTS.append("finally")
        return y

    check(fn, torch.randn(3), {}, side_effects=EVENTS_SEEN)
    check(fn, torch.randn(3), {"missing": 2.0}, side_effects=EVENTS_SEEN)


def test_break_inside_except_block():
    def fn(x):
        try:
            raise ValueError("boom")
        except ValueError:
            y = x * 2
            EVENTS.append(untraceable(8))
            y = y + 1
        return y

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN)


def test_exception_raised_after_break_propagates():
    def fn(x):
        y = x + 1
        EVENTS.append(untraceable(9))
        if y.shape[0] == 3:
            raise ValueError("three")
        return y

    compiled = compile(fn, backend="eager")
    EVENTS.clear()
    with pytest.raises(ValueError, match="three"):
        compiled(torch.randn(3))
    assert EVENTS == [untraceable(9)]
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))


def inner_with_break(x):
    y = x.cos()
    EVENTS.append(("inner", untraceable(10)))
    return y * 2


def middle(x):
    EVENTS.append("middle before")
    z = inner_with_break(x + 1)
    EVENTS.append("middle after")
    return z - 1


def test_break_inside_inlined_callee():
    def fn(x):
        a = x.sin()
        b = middle(a)
        return a + b

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN)


def test_break_inside_callee_tensor_branch():
    def clamp_positive(x):
        if x.sum() < 0:
            return -x
        return x

    def fn(x, y):
        return clamp_positive(x * y) + clamp_positive(x - y)

    check(fn, torch.randn(4), torch.randn(4))
    check(fn, torch.ones(4), -torch.ones(4))


def test_break_inside_module_forward():
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            x = self.lin(x)
            if x.mean() > 0:
                x = x.relu()
            return x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(), Layer()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x.sum(-1)

    torch.manual_seed(0)
    check(Net(), torch.randn(2, 3), grad=True)


def test_break_inside_list_comprehension():
    def fn(xs):
        ys = [x * untraceable(i) for i, x in enumerate(xs)]
        return torch.stack(ys).sum(0)

    check(fn, [torch.randn(2) for _ in range(3)])


def test_tensor_branch_inside_comprehension():
    def fn(xs):
        return [x + 1 if x.sum() > 0 else x - 1 for x in xs]

    check(fn, [torch.ones(2), -torch.ones(2), torch.ones(2)])


def test_break_inside_generator_expression():
    def fn(xs):
        return sum(x * untraceable(i) for i, x in enumerate(xs))

    check(fn, [torch.randn(2) for _ in range(3)])


def test_side_effects_around_break_exactly_once_in_order():
    def fn(x):
        EVENTS.append(1)
        y = x + 1
        EVENTS.append(2)
        if y.sum() > 0:
            EVENTS.append(3)
            y = y * 2
        EVENTS.append(4)
        return y

    check(fn, torch.ones(3), side_effects=EVENTS_SEEN, calls=3)
    check(fn, -torch.ones(3) * 5, side_effects=EVENTS_SEEN, calls=3)


def test_mutation_of_input_across_break():
    def fn(x, state):
        x.add_(1)
        state["count"] = state.get("count", 0) + 1
        EVENTS.append(untraceable(11))
        x.mul_(2)
        state["last"] = x.sum()
        return x.clone()

    check(fn, torch.ones(3), {}, side_effects=EVENTS_SEEN)


def test_break_in_compiled_function_called_from_compiled_function():
    def leaf(x):
        EVENTS.append(untraceable(12))
        return x * 2

    compiled_leaf = compile(leaf, backend="eager")

    def fn(x):
        return compiled_leaf(x + 1) - 1

    check(fn, torch.randn(3), side_effects=EVENTS_SEEN)


def test_generator_function_called_inside():
    def produce(x, n):
        for i in range(n):
            yield x * i

    def fn(x):
        return sum(produce(x, 4))

    check(fn, torch.randn(3))


def test_data_dependent_output_shape():
    def fn(x):
        y = x[x > 0]
        return y * 2, y.shape[0]

    check(fn, torch.tensor([1.0, -1.0, 2.0, -3.0]))
    check(fn, torch.tensor([1.0, 1.0, 2.0, -3.0]))


def test_nonzero_and_unique():
    def fn(x):
        return torch.nonzero(x), torch.unique(x)

    check(fn, torch.tensor([0, 1, 0, 3, 3]))


# ---------------------------------------------------------------- breaks with live stack values


def keyword_untraceable(n, *, offset=0, scale=1):
    return (zlib.adler32(str(n).encode()) % 7 + offset) * scale


def test_break_at_call_with_keyword_arguments():
    def fn(x):
        y = x.sin()
        k = keyword_untraceable(3, offset=2, scale=3)
        return y * k

    check(fn, torch.randn(3), graphs=2)


def test_break_at_torch_call_with_keyword_arguments():
    def fn(x):
        y = x * 2
        values = torch.sort(y.detach(), descending=True, stable=True).values.tolist()
        return y + values[0]

    check(fn, torch.tensor([3.0, 1.0, 2.0]))


def test_break_in_the_middle_of_an_expression():
    def fn(x, y):
        return x.sin() + untraceable(4) * y.cos() - (x * y).sum()

    check(fn, torch.randn(3), torch.randn(3), graphs=2)


def test_break_while_building_a_list_argument():
    def fn(x):
        return torch.cat([x, x * 2, x + untraceable(5), x - 1])

    check(fn, torch.randn(2))


def test_break_while_building_a_dict_and_call_args():
    def fn(x, y):
        d = {"a": x, "b": untraceable(6), "c": y * 2}
        return torch.add(x * d["b"], d["c"], alpha=untraceable(7))

    check(fn, torch.randn(2), torch.randn(2))


def test_break_inside_method_on_self():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.seen = []

        def log(self, value):
            self.seen.append(untraceable(value))

        def forward(self, x, *extra, scale=1.0, **options):
            h = self.lin(x)
            self.log(h.shape[0])
            for e in extra:
                h = h + e
            return h * scale + options.get("shift", 0)

    torch.manual_seed(0)
    check(Model(), torch.randn(2, 3), torch.ones(3), scale=2.0, shift=1.0, grad=True)


def test_break_with_cell_variables_alive():
    def fn(x):
        factor = x.shape[0]

        def scaled(t):
            return t * factor

        before = scaled(x)
        k = untraceable(8)
        factor = factor + k
        return before, scaled(x)

    check(fn, torch.randn(3))


def test_break_inside_lambda():
    def fn(xs):
        transform = lambda t: t * untraceable(9) + 1  # noqa: E731
        return [transform(x) for x in xs]

    check(fn, [torch.randn(2), torch.randn(2)])


def test_break_three_levels_deep_with_side_effects():
    def level3(x):
        EVENTS.append("3a")
        k = untraceable(10)
        EVENTS.append("3b")
        return x * k

    def level2(x):
        EVENTS.append("2a")
        y = level3(x + 1)
        EVENTS.append("2b")
        return y - 1

    def level1(x):
        EVENTS.append("1a")
        y = level2(x * 2)
        EVENTS.append("1b")
        return y / 2

    check(level1, torch.randn(3), side_effects=EVENTS_SEEN)


def test_break_with_keyword_only_and_star_arguments_in_frame():
    def fn(x, *rest, key, **options):
        y = x + sum(rest)
        EVENTS.append(untraceable(11))
        return y * key + options["extra"]

    check(fn, torch.randn(2), torch.ones(2), torch.ones(2), key=3.0, extra=torch.ones(2),
          side_effects=EVENTS_SEEN)


def test_break_in_for_loop_with_else_clause():
    def fn(x, limit):
        for i in range(4):
            x = x + untraceable(i)
            if i == limit:
                break
        else:
            x = x * 100
        return x

    check(fn, torch.zeros(2), 2)
    check(fn, torch.zeros(2), 9)


def test_break_inside_with_inside_for():
    def fn(x):
        outs = []
        for i in range(3):
            with torch.no_grad():
                y = x * i
                EVENTS.append(untraceable(i))
                outs.append(y + 1)
            outs.append(x * i)
        return outs

    check(fn, torch.randn(2, requires_grad=True), side_effects=EVENTS_SEEN, grad=True)


def test_break_with_live_module_list_and_dict_locals():
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(2)])

    def fn(x):
        cache = {"inputs": [x]}
        for layer in layers:
            x = layer(x)
            cache["inputs"].append(x)
            EVENTS.append(untraceable(len(cache["inputs"])))
        return x, cache

    check(fn, torch.randn(1, 2), side_effects=EVENTS_SEEN)


def test_break_returns_python_objects():
    def fn(x):
        y = x.sum()
        k = untraceable(12)
        return {"k": k, "y": y, "shape": tuple(x.shape), "name": f"n{k}"}, [k] * 2

    check(fn, torch.randn(2, 3), graphs=1)


def test_break_then_tensor_branch_then_break():
    def fn(x):
        EVENTS.append(untraceable(13))
        if x.mean() > 0:
            x = x * 2
            EVENTS.append(untraceable(14))
        else:
            x = x / 2
        EVENTS.append(untraceable(15))
        return x + 1

    check(fn, torch.ones(3), side_effects=EVENTS_SEEN, calls=3)
    check(fn, -torch.ones(3), side_effects=EVENTS_SEEN, calls=3)


def test_break_inside_user_context_manager():
    class Recording:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            EVENTS.append(("enter", self.name))
            return self

        def __exit__(self, *exc):
            EVENTS.append(("exit", self.name))
            return False

    def fn(x):
        with Recording("outer") as outer:
            y = x * 2
            EVENTS.append(untraceable(16))
            y = y + len(outer.name)
        return y

    check(fn, torch.randn(2), side_effects=EVENTS_SEEN)


def test_exception_inside_compiled_code_runs_finally_once():
    def fn(x, fail):
        try:
            EVENTS.append("try")
            if fail:
                raise RuntimeError("requested")
            return x + 1
        finally:
            EVENTS.append("finally")

    compiled = compile(fn, backend="eager")
    EVENTS.clear()
    with pytest.raises(RuntimeError, match="requested"):
        compiled(torch.ones(2), True)
    assert EVENTS == ["try", "finally"]
    EVENTS.clear()
    torch.testing.assert_close(compiled(torch.ones(2), False), torch.full((2,), 2.0))
    assert EVENTS == ["try", "finally"]


def test_handled_exception_leaves_no_trace_in_sys_exc_info():
    """A raise inside a try block of compiled code: once the caller has handled it, it must be
    gone from sys.exc_info() and from the __context__ of later exceptions. (On 3.12 the entry
    code once had wrong exception-handler stack depths and skipped POP_EXCEPT.)"""
    def fn(x, fail):
        try:
            if fail:
                raise RuntimeError("requested")
            return x + 1
        finally:
            EVENTS.append("finally")

    def handler_depth_one(x, items):
        total = x
        for item in items:  # the iterator is on the stack inside the try: handler depth 1
            try:
                if item < 0:
                    raise ValueError(item)
                total = total + item
            except ValueError:
                total = total - 1
        return total

    compiled = compile(fn, backend="eager")
    try:
        compiled(torch.ones(2), True)
    except RuntimeError:
        pass
    assert sys.exc_info() == (None, None, None)
    try:
        raise KeyError("later")
    except KeyError as later:
        assert later.__context__ is None
    check(handler_depth_one, torch.zeros(2), [1, -2, 3, -4])
    assert sys.exc_info() == (None, None, None)


def test_recursive_compiled_function():
    def fn(x, depth):
        if depth == 0:
            return x
        return compiled_recursive(x * 2, depth - 1) + 1

    compiled_recursive = compile(fn, backend="eager")
    torch.testing.assert_close(compiled_recursive(torch.ones(2), 3), fn(torch.ones(2), 3))


class Untraceable:
    """An object whose method no capture engine can look into."""

    def compute(self, n, *, offset=0):
        return zlib.crc32(str(n).encode()) % 5 + offset


def test_break_at_method_call_with_keyword_arguments():
    helper = Untraceable()

    def fn(x):
        y = x.cos()
        return y * helper.compute(3, offset=1)

    check(fn, torch.randn(3))


def test_break_at_call_with_star_star_kwargs():
    def fn(x, options):
        y = x.sin()
        return y * keyword_untraceable(4, **options)

    check(fn, torch.randn(3), {"offset": 1, "scale": 2})


def test_break_at_call_with_star_args():
    def fn(x, args):
        y = x.sin()
        return y * untraceable(*args)

    check(fn, torch.randn(3), (5,))


def test_print_with_keyword_arguments():
    def fn(x):
        y = x + 1
        print("value", 1, sep="-", end="|")
        return y * 2

    x = torch.randn(2)
    expected, expected_text = _printed(fn, x)
    actual, text = _printed(compile(fn, backend="eager"), x)
    torch.testing.assert_close(actual, expected)
    assert text == expected_text


COUNT_AFTER_BREAK = 0


def test_global_write_after_break():
    def fn(x):
        global COUNT_AFTER_BREAK
        y = x * 2
        EVENTS.append(untraceable(17))
        COUNT_AFTER_BREAK += 1
        return y + COUNT_AFTER_BREAK

    def reset():
        global COUNT_AFTER_BREAK
        COUNT_AFTER_BREAK = 0
        EVENTS.clear()

    check(fn, torch.zeros(2), side_effects=SideEffects(reset, lambda: (COUNT_AFTER_BREAK, list(EVENTS))))


def test_tensor_while_condition_with_nested_for():
    def fn(x):
        rounds = 0
        while x.sum() < 20:
            for i in range(2):
                x = x + i + 1
            rounds += 1
        return x, rounds

    check(fn, torch.zeros(3))


def test_inplace_mask_assignment_on_input():
    def fn(x):
        x[x > 0] = 0.0
        return x.sum()

    check(fn, torch.tensor([1.0, -2.0, 3.0, -4.0]))
