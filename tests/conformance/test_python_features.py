"""Python language features inside compiled code, each eager against compiled.

Every program here is one a capture engine should trace into a single graph
(graphs=1), so besides the results matching, a graph count is expected.
"""

import collections
import dataclasses
import enum
import math

import pytest
import torch

from .harness import check, compile, xfail_on_reference

SCALE = 3.0
OFFSETS = (1, 2, 3)
TABLE = {"a": 1.5, "b": -2.0}


def t(*shape):
    return torch.randn(*shape) if shape else torch.randn(4)


# ---------------------------------------------------------------- constants


def test_int_float_bool_arithmetic():
    def fn(x, n, f, flag):
        y = x * n + f
        if flag:
            y = y - n // 2 + n % 3 + 2 ** n
        return y, n * 2, f / 2, not flag

    check(fn, t(), 3, 0.5, True, graphs=1)


def test_math_module_constants_and_functions():
    def fn(x):
        return x * math.pi + math.sqrt(2.0) + math.floor(2.7) + math.log(math.e)

    check(fn, t(), graphs=1)


def test_none_checks():
    def fn(x, bias=None, scale=None):
        if bias is not None:
            x = x + bias
        if scale is None:
            scale = 2
        return x * scale

    check(fn, t(), None, graphs=1)
    check(fn, t(), t(), 3, graphs=1)


def test_string_ops_and_comparisons():
    def fn(x, mode):
        if mode == "double":
            x = x * 2
        name = mode.upper() + "_" + str(3)
        if name.startswith("DOUBLE") and "_" in name:
            x = x + len(name)
        return x, name

    check(fn, t(), "double", graphs=1)


def test_fstring():
    def fn(x, n):
        label = f"layer{n}:{x.shape[0]}:{SCALE:.1f}"
        return x * len(label), label

    check(fn, t(), 7, graphs=1)


def test_global_constants():
    def fn(x):
        return x * SCALE + sum(OFFSETS) + TABLE["b"]

    check(fn, t(), graphs=1)


# ---------------------------------------------------------------- containers


def test_tuple_unpacking_and_star():
    def fn(x):
        a, b, *rest = x.split(1)
        first, (second, third) = a, (b, rest[0])
        return first + second * third, len(rest)

    check(fn, t(4), graphs=1)


def test_list_building_and_methods():
    def fn(x):
        items = [x, x + 1]
        items.append(x * 2)
        items.extend([x - 1])
        items.insert(0, -x)
        last = items.pop()
        items.reverse()
        return torch.stack(items).sum(0) + last, len(items)

    check(fn, t(), graphs=1)


def test_dict_building_and_methods():
    def fn(x):
        d = {"a": x, "b": x * 2}
        d["c"] = x + 1
        d.update(e=x - 1)
        total = sum(d[k] for k in sorted(d) if k != "b")
        keys = list(d.keys())
        popped = d.pop("a")
        return total + popped, keys, "a" in d, d.get("z", 3)

    check(fn, t(), graphs=1)


def test_set_operations():
    def fn(x, names):
        s = set(names)
        s.add("z")
        both = s & {"a", "z"}
        return x * len(both) + len(s | {"q"}), "a" in s

    check(fn, t(), ["a", "b", "a"], graphs=1)


def test_slices_and_indexing():
    def fn(x, items):
        return x[1:3], x[::2], x[-1], x[..., None], items[1:], items[::-1], x[:, 1:][0]

    check(fn, t(4, 5), [1, 2, 3], graphs=1)


def test_tensor_setitem_on_local():
    def fn(x):
        y = x.clone()
        y[0] = 0.0
        y[1:3] = y[1:3] * 2
        return y

    check(fn, t(5), graphs=1)


def test_range_and_reversed():
    def fn(x):
        acc = x
        for i in range(1, 4):
            acc = acc * i
        for i in reversed(range(3)):
            acc = acc - i
        return acc, list(range(0, 10, 3)), len(range(5))

    check(fn, t(), graphs=1)


def test_enumerate_and_zip():
    def fn(xs, weights):
        total = 0
        for index, (x, w) in enumerate(zip(xs, weights)):
            total = total + x * w + index
        return total

    check(fn, [t(), t(), t()], [0.5, 1.0, 2.0], graphs=1)


Point = collections.namedtuple("Point", ["x", "y"])


def test_namedtuple_input_and_output():
    def fn(p):
        q = Point(p.x + 1, y=p.y * 2)
        return q, q[0] + p.y, q.x * len(q)

    check(fn, Point(t(), t()), graphs=1)


@xfail_on_reference("torch 2.11 asserts inside Dynamo on namedtuple._replace")
def test_namedtuple_replace():
    def fn(p):
        return p._replace(x=p.y * 2)

    check(fn, Point(t(), t()), graphs=1)


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor
    weight: float = 2.0


def test_dataclass_input_and_output():
    def fn(pair):
        out = Pair(pair.left * pair.weight, pair.right + 1)
        return out.left + out.right, out

    check(fn, Pair(t(), t()), graphs=1)


def test_list_comprehension():
    def fn(xs):
        return [x * i for i, x in enumerate(xs) if i != 1]

    check(fn, [t(), t(), t()], graphs=1)


def test_dict_and_set_comprehension():
    def fn(x):
        d = {f"k{i}": x + i for i in range(3)}
        s = {i % 2 for i in range(5)}
        return d, s

    check(fn, t(), graphs=1)


def test_generator_into_sum_and_any():
    def fn(xs):
        total = sum(x.sum() for x in xs)
        return total, any(isinstance(x, torch.Tensor) for x in xs), all(x.dim() == 1 for x in xs)

    check(fn, [t(), t()], graphs=1)


def test_nested_containers_output():
    def fn(x):
        return {"a": [x, (x + 1, {"b": x * 2})], "c": None, "d": (1, "s")}

    check(fn, t(), graphs=1)


def test_min_max_abs_round_on_python_numbers():
    def fn(x, a, b):
        return x * max(a, b) + min(a, b) + abs(-a) + round(2.6) + divmod(7, 3)[0]

    check(fn, t(), 2, 5, graphs=1)


# ---------------------------------------------------------------- calls


def test_args_kwargs_and_defaults():
    def inner(x, *args, scale=1.0, **kwargs):
        out = x * scale
        for a in args:
            out = out + a
        for key in sorted(kwargs):
            out = out - kwargs[key]
        return out

    def fn(x, y):
        return inner(x, y, 1, scale=2.0, b=y, a=3)

    check(fn, t(), t(), graphs=1)


def test_call_with_star_unpacking():
    def inner(a, b, c=0, d=0):
        return a * b + c - d

    def fn(x, rest, options):
        return inner(x, *rest, **options)

    check(fn, t(), [t()], {"c": 2.0, "d": t()}, graphs=1)


def test_keyword_arguments_at_top_level():
    def fn(x, y=None, *, alpha=1.0):
        return x + (0 if y is None else y) * alpha

    check(fn, t(), y=t(), alpha=0.5, graphs=1)


def test_isinstance_len_getattr_hasattr():
    class Holder:
        factor = 3

    def fn(x, obj, items):
        if isinstance(x, torch.Tensor) and isinstance(items, (list, tuple)):
            x = x * len(items)
        if hasattr(obj, "factor"):
            x = x + getattr(obj, "factor")
        if not hasattr(obj, "missing"):
            x = x + getattr(obj, "missing", 10)
        return x, type(items).__name__, callable(fn)

    check(fn, t(), Holder(), [1, 2], graphs=1)


def test_closure_variables():
    scale = 4.0
    bias = torch.ones(4)

    def fn(x):
        return x * scale + bias

    check(fn, t(), graphs=1)


def test_nested_function_defined_inside():
    def fn(x):
        k = 2

        def helper(y):
            return y * k + 1

        return helper(helper(x))

    check(fn, t(), graphs=1)


def test_lambda_and_map():
    def fn(xs):
        square = lambda v: v * v  # noqa: E731
        return list(map(square, xs)), sorted([3, 1, 2], key=lambda v: -v)

    check(fn, [t(), t()], graphs=1)


def test_recursive_python_helper():
    def power(x, n):
        return x if n == 1 else x * power(x, n - 1)

    def fn(x):
        return power(x, 4)

    check(fn, t(), graphs=1)


def test_functools_partial():
    import functools

    def scaled(x, factor, shift=0):
        return x * factor + shift

    def fn(x):
        double = functools.partial(scaled, factor=2)
        return double(x, shift=1)

    check(fn, t(), graphs=1)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def test_enum_argument():
    def fn(x, color):
        if color is Color.RED:
            return x + 1
        return x - color.value

    check(fn, t(), Color.RED, graphs=1)
    check(fn, t(), Color.BLUE, graphs=1)


# ---------------------------------------------------------------- torch.Size


def test_size_arithmetic():
    def fn(x):
        n = x.shape[0] * 2
        last = x.size(-1)
        dims = tuple(x.shape)
        return x.reshape(n // 2, last).sum(), dims, x.numel(), x.dim(), x.ndim, x.shape[1:]

    check(fn, t(3, 4), graphs=1)


def test_view_with_computed_shape():
    def fn(x):
        b, c = x.shape
        return x.view(b * c), x.new_zeros(x.shape[-1], 2), torch.zeros(x.size(0), 1)

    check(fn, t(2, 6), graphs=1)


def test_tensor_attributes_dtype_device_requires_grad():
    def fn(x):
        y = torch.ones(2, dtype=x.dtype, device=x.device)
        flag = x.requires_grad
        return y * x.sum(), x.dtype == torch.float32, str(x.device), flag, x.is_floating_point()

    check(fn, t(), graphs=1)


# ---------------------------------------------------------------- tensor methods and ops


def test_tensor_methods_and_inplace_on_locals():
    def fn(x):
        y = x.view(2, 2).t().contiguous().view(-1)
        z = y.clone()
        z.add_(1).mul_(2)
        return z.sum(0), z.mean(), x.float().to(torch.float64), x.type_as(z).abs()

    check(fn, t(4), graphs=1)


def test_operator_overloads():
    def fn(a, b):
        return a + b, a - b, a * b, a / b, a ** 2, -a, a @ b.t(), a > b, (a > 0) & (b > 0), a // 1, a % 1.5

    check(fn, t(2, 2), t(2, 2).abs() + 0.5, graphs=1)


def test_functional_calls():
    def fn(x, w):
        F = torch.nn.functional
        return F.softmax(F.linear(x, w), dim=-1), F.gelu(x), F.layer_norm(x, (x.shape[-1],)), F.dropout(x, p=0.0)

    check(fn, t(3, 4), t(5, 4), graphs=1)


def test_torch_creation_ops():
    def fn(x):
        a = torch.arange(4, dtype=x.dtype)
        b = torch.full((4,), 2.0)
        c = torch.eye(4)[0]
        d = torch.tensor([1.0, 2.0, 3.0, 4.0])
        return x + a + b + c + d, torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64)

    check(fn, t(4), graphs=1)


def test_integer_and_bool_tensors():
    def fn(i, m):
        return i * 2 + 1, i // 3, i.sum(), m.logical_not(), m.any(), torch.where(m, i, -i)

    check(fn, torch.arange(6), torch.tensor([True, False, True, True, False, False]), graphs=1)


# ---------------------------------------------------------------- modules


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


class Derived(Base):
    def forward(self, x):
        return torch.relu(super().forward(x)) + 1


def test_super_in_module():
    torch.manual_seed(0)
    check(Derived(), t(2, 4), grad=True, graphs=1)


class Containers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 2), "b": torch.nn.Linear(4, 3)})
        self.register_buffer("shift", torch.ones(4))
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        x = self.seq(x) + self.shift
        for index, layer in enumerate(self.layers):
            x = layer(x) * self.scale + index
        x = self.layers[-1](x)
        return {name: head(x) for name, head in self.heads.items()}


def test_sequential_modulelist_moduledict_buffers_parameters():
    torch.manual_seed(0)
    check(Containers(), t(2, 4), grad=True, graphs=1)


class WithHelperMethod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.eps = 1e-3

    def normalize(self, x):
        return x / (x.norm(dim=-1, keepdim=True) + self.eps)

    @staticmethod
    def activation(x):
        return torch.nn.functional.silu(x)

    @property
    def width(self):
        return self.lin.out_features

    def forward(self, x):
        return self.activation(self.normalize(self.lin(x))) * self.width


def test_module_methods_staticmethod_property():
    torch.manual_seed(0)
    check(WithHelperMethod(), t(3, 4), grad=True, graphs=1)


def test_bound_method_compiled():
    torch.manual_seed(0)
    module = WithHelperMethod()
    check(module.normalize, t(3, 4), graphs=1)


def test_module_children_iteration_and_parameters_sum():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

    def fn(x):
        penalty = sum(p.pow(2).sum() for p in model.parameters())
        for child in model.children():
            x = child(x)
        return x, penalty

    check(fn, t(2, 4), graphs=1)


# ---------------------------------------------------------------- context managers


def test_no_grad_block_inside():
    def fn(x):
        with torch.no_grad():
            y = x * 2
        z = x * 3
        return y, z, y.requires_grad, z.requires_grad

    check(fn, t().requires_grad_(), grad=True, graphs=1)


def test_enable_grad_inside_no_grad_call():
    def fn(x):
        with torch.enable_grad():
            y = x * 2
        return y, x * 3

    x = t().requires_grad_()
    with torch.no_grad():
        check(fn, x, graphs=1)


def test_set_grad_enabled_false_block():
    def fn(x):
        with torch.set_grad_enabled(False):
            y = x.exp()
        return y + x

    check(fn, t().requires_grad_(), grad=True, graphs=1)


def test_inference_mode_block_inside():
    def fn(x):
        with torch.inference_mode():
            y = x.sin()
        return y.clone(), torch.is_inference_mode_enabled()

    check(fn, t(), calls=1)


def test_autocast_block_bfloat16():
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = a @ b
        return c, c.dtype

    check(fn, t(4, 4), t(4, 4), graphs=1)


def test_grad_mode_query_inside():
    def fn(x):
        if torch.is_grad_enabled():
            return x + 1
        return x - 1

    check(fn, t(), graphs=1)
    with torch.no_grad():
        check(fn, t(), graphs=1)


# ---------------------------------------------------------------- misc


def test_while_loop_with_python_counter():
    def fn(x):
        n = 0
        while n < 5:
            x = x * 1.5
            n += 2
        return x, n

    check(fn, t(), graphs=1)


def test_early_return_and_ternary():
    def fn(x, k):
        y = x * 2 if k > 1 else x / 2
        if k > 3:
            return y
        return y + k

    check(fn, t(), 2, graphs=1)
    check(fn, t(), 5, graphs=1)


def test_try_except_without_break():
    def fn(x, d):
        try:
            value = d["missing"]
        except KeyError:
            value = 2.0
        finally:
            x = x + 1
        return x * value

    check(fn, t(), {"present": 1}, graphs=1)


def test_assert_on_python_value():
    def fn(x, n):
        assert n > 0, "n must be positive"
        assert x.dim() == 1
        return x * n

    check(fn, t(), 3, graphs=1)


def test_int_float_conversions_of_python_values():
    def fn(x, n):
        return x * float(n) + int(2.9) + bool(n), str(n), int("12")

    check(fn, t(), 3, graphs=1)


def test_random_ops_match_under_same_seed():
    def fn(x):
        return x + torch.rand_like(x), torch.randn(3)

    torch.manual_seed(7)
    expected = fn(torch.zeros(4))
    from .harness import compile
    compiled = compile(fn, backend="eager")
    torch.manual_seed(7)
    actual = compiled(torch.zeros(4))
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bfloat16])
def test_dtypes_pass_through(dtype):
    def fn(x):
        return x * 2 + 1, (x * 2).dtype

    check(fn, torch.arange(6).to(dtype), graphs=1)


def test_empty_and_scalar_tensors():
    def fn(x, s):
        return x.sum() + s, x * s, s.item() if False else s + 1

    check(fn, torch.zeros(0, 3), torch.tensor(2.0), graphs=1)


# ---------------------------------------------------------------- less common syntax


def test_walrus_and_chained_comparison():
    def fn(x, n):
        if 0 < (m := n * 2) <= 10:
            x = x + m
        return x, m

    check(fn, t(), 3, graphs=1)


def test_match_statement():
    def fn(x, command):
        match command:
            case ("scale", factor):
                return x * factor
            case {"shift": amount}:
                return x + amount
            case _:
                return x

    check(fn, t(), ("scale", 3), graphs=1)
    check(fn, t(), {"shift": 2.0}, graphs=1)


def test_iterate_over_tensor_and_unpack():
    def fn(x):
        a, b = x
        rows = [row * i for i, row in enumerate(x)]
        return a - b, torch.stack(rows), len(x)

    check(fn, t(2, 3), graphs=1)


def test_augmented_assignment_on_subscript_and_attribute():
    class Box:
        def __init__(self):
            self.value = torch.zeros(2)
            self.n = 1

    def fn(x, box, d):
        box.value += x
        box.n *= 3
        d["k"] += x
        d["n"] -= 1
        items = [1]
        items += [2, 3]
        return box.value * box.n, items

    check(fn, t(2), Box(), {"k": torch.ones(2), "n": 5}, graphs=1)


def test_percent_and_format_strings():
    def fn(x, n):
        label = "%s-%03d" % ("layer", n) + "{:>4}".format(n) + str(x.dtype)
        return x * len(label), label

    check(fn, t(), 7, graphs=1)


def test_class_defined_inside_compiled_function():
    def fn(x):
        class Local:
            factor = 3

            def apply(self, v):
                return v * self.factor

        return Local().apply(x)

    check(fn, t())


def test_del_local_and_reassign():
    def fn(x):
        y = x * 2
        z = y + 1
        del y
        y = z * 3
        return y

    check(fn, t(), graphs=1)


def test_nonlocal_inside_compiled_function():
    def fn(x):
        total = 0

        def bump(v):
            nonlocal total
            total += v
            return total

        bump(2)
        bump(3)
        return x * total

    check(fn, t(), graphs=1)


def test_returning_a_closure_over_a_tensor():
    def fn(x):
        y = x * 2

        def later(z):
            return y + z

        return later

    x = t()
    eager_later = fn(x.clone())
    compiled_later = compile(fn, backend="eager")(x.clone())
    torch.testing.assert_close(compiled_later(torch.ones(4)), eager_later(torch.ones(4)))


def test_no_grad_decorated_helper():
    @torch.no_grad()
    def helper(v):
        return v * 2

    def fn(x):
        return helper(x), x * 3

    check(fn, t().requires_grad_(), grad=True)


def test_sorted_dict_zip_reversed_builtins():
    def fn(x, names):
        mapping = dict(zip(names, range(len(names))))
        order = sorted(mapping, key=mapping.get, reverse=True)
        pairs = list(reversed(list(enumerate(order, start=1))))
        return x * pairs[0][0], order, pairs

    check(fn, t(), ["b", "a", "c"], graphs=1)


def test_tensor_shape_comparisons():
    def fn(x):
        if x.shape == (2, 3) and x.shape[-1] == 3 and x.size() == torch.Size([2, 3]):
            return x.sum(-1)
        return x

    check(fn, t(2, 3), graphs=1)


def test_tensor_identity_and_is_checks():
    def fn(x, y):
        z = x if y is None else y
        same = z is x
        return z * 2, same

    check(fn, t(), None, graphs=1)
    check(fn, t(), t(), graphs=1)


def test_module_training_branch():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            if self.training:
                return x * 0.5
            return x + 0.5

    check(Noisy(), t(), graphs=1)
    check(Noisy().eval(), t(), graphs=1)


def test_submodule_forward_hooks_run():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    model[0].register_forward_hook(lambda module, args, out: out * 10)
    check(model, t(2, 3), grad=True)


def test_parameter_data_and_grad_access():
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 2)

    def fn(x):
        has_grad = lin.weight.grad is not None
        return x @ lin.weight.data, has_grad, lin.weight.requires_grad

    check(fn, t(1, 2))


class UserSequence:
    """A user container with the sequence protocol."""

    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def __contains__(self, value):
        return value in self.items


class Dynamic:
    def __getattr__(self, name):
        if name.startswith("scale_"):
            return float(name.split("_")[1])
        raise AttributeError(name)


def test_user_sequence_protocol():
    def fn(x, seq):
        total = x
        for i in range(len(seq)):
            total = total + seq[i]
        return total, 2 in seq, len(seq)

    check(fn, t(), UserSequence([1, 2, 3]))


def test_user_getattr_hook():
    def fn(x, obj):
        return x * obj.scale_3 + obj.scale_2

    check(fn, t(), Dynamic())


def test_unbound_tensor_methods_and_getattr_on_torch():
    import operator

    def fn(x, y):
        a = torch.Tensor.add(x, y)
        b = getattr(torch, "relu")(x)
        c = operator.itemgetter(1)([x, y])
        d = operator.mul(x, 2)
        return a, b, c, d, x.T, x.mT

    check(fn, t(2, 3), t(2, 3), graphs=1)


def test_advanced_indexing():
    def fn(x, index, mask):
        return x[index], x[:, index], x[None, :, None], x[mask], x[index, index]

    check(fn, t(3, 3), torch.tensor([2, 0]), torch.tensor([True, False, True]))


def test_tensor_methods_with_keyword_arguments():
    def fn(x):
        return (x.sum(dim=1, keepdim=True), x.max(dim=0).values, torch.topk(x, k=2, dim=-1).indices,
                x.to(dtype=torch.float64), x.new_full((2,), fill_value=3.0), x.clamp(min=-0.1, max=0.1))

    check(fn, t(3, 4), graphs=1)


def test_mutable_default_argument_persists():
    def make():
        def fn(x, cache=[]):  # noqa: B006 (the point of the test)
            cache.append(len(cache))
            return x * len(cache), list(cache)
        return fn

    eager_fn, compiled_source = make(), make()
    compiled_fn = compile(compiled_source, backend="eager")
    for _ in range(3):
        expected = eager_fn(torch.ones(2))
        actual = compiled_fn(torch.ones(2))
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1] == expected[1]


def test_compile_generator_function():
    def gen(x, n):
        for i in range(n):
            yield x * i

    compiled = compile(gen, backend="eager")
    expected = list(gen(torch.ones(2), 3))
    actual = list(compiled(torch.ones(2), 3))
    torch.testing.assert_close(actual, expected)


def test_module_forward_with_star_inputs():
    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a * b

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Two()

        def forward(self, *inputs, **options):
            return self.inner(*inputs, **options)

    check(Outer(), t(), t(), graphs=1)
    check(Outer(), t(), b=t(), graphs=1)


def test_dict_items_iteration_of_tensors():
    def fn(d):
        out = {}
        for key, value in d.items():
            out[key.upper()] = value * 2
        for key in d:
            out[key] = d[key] + 1
        return out, list(d.values())[0]

    check(fn, {"a": t(), "b": t()}, graphs=1)


def test_python_float_and_int_results_from_tensors_metadata():
    def fn(x):
        return x.numel() * 1.5, x.element_size(), x.shape.numel(), x.stride(0), x.storage_offset()

    check(fn, t(3, 4)[1:])


def test_yield_from_inside_an_inlined_generator_stays_in_one_graph():
    def inner(xs):
        for x in xs:
            yield x * 2

    def outer(xs):
        yield xs[0]
        yield from inner(xs[1:])
        yield from (x + 1 for x in xs)
        result = yield from []
        yield xs[0] * 0 if result is None else xs[0]

    def fn(a, b, c):
        return sum(outer([a, b, c]))

    check(fn, t(3), t(3), t(3), graphs=1, compile_kwargs={"fullgraph": True})


def test_named_modules_yield_from_keeps_transformer_layer_in_one_graph():
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0).eval()

    def fn(x):
        with torch.no_grad():
            return layer(x)

    check(fn, t(2, 5, 16), graphs=1)


SEEN = []


def _counting_generator(x):
    for i in range(3):
        SEEN.append(i)
        yield x * i


def _writing_generator(x, buffer):
    for i in range(3):
        buffer.add_(1)
        yield x * i


@pytest.mark.parametrize("read", ["first", "next", "all"])
def test_generator_with_side_effects_read_in_part_makes_eager_s_effects(read):
    def fn(x):
        SEEN.clear()
        if read == "first":
            for value in _counting_generator(x):
                break
        elif read == "next":
            value = next(iter(_counting_generator(x)))
        else:
            value = sum(_counting_generator(x))
        return value + len(SEEN)

    check(fn, t(2), side_effects=None)
    SEEN.clear()
    compile(fn, backend="eager")(torch.ones(2))
    assert len(SEEN) == (3 if read == "all" else 1)


def test_generator_writing_an_input_read_in_part():
    def fn(x, buffer):
        for value in _writing_generator(x, buffer):
            break
        return value

    check(fn, t(2), torch.zeros(2))


def test_generator_without_side_effects_read_in_part_stays_in_one_graph():
    def fn(x):
        def squares(x):
            for i in range(4):
                yield x * i
        for value in squares(x):
            break
        return value + 1

    check(fn, t(3), graphs=1)


def test_generator_appending_to_a_list_made_before_it_read_in_part():
    def fn(x):
        made = []

        def fill(x):
            for i in range(3):
                made.append(i)
                yield x * i
        for value in fill(x):
            break
        return value + len(made)

    check(fn, t(2))


def test_generator_keeping_its_own_memo_stays_in_one_graph():
    def fn(x):
        def unique(xs):
            memo = set()
            for item in xs:
                if item not in memo:
                    memo.add(item)
                    yield item
        return x * sum(unique([1, 2, 2, 3]))

    check(fn, t(2), graphs=1)


def test_generator_adding_to_a_set_made_before_it_read_in_part():
    def fn(x):
        seen = set()

        def mark(x):
            for i in range(3):
                seen.add(i)
                yield x * i
        for value in mark(x):
            break
        return value + len(seen)

    check(fn, t(2))
