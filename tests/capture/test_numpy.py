"""NumPy code in a compiled function: arrays are tensors of the graph, NumPy calls torch operations.

Each test compares the compiled function with eager NumPy and counts the graphs.
"""

import numpy as np
import pytest
import torch

import tensorjit
from tensorjit.capture.polyfills.numpy import table
from tests.conformance.harness import CountingBackend


def _compiled(fn, fullgraph=True, **options):
    backend = CountingBackend()
    return tensorjit.compile(fn, backend=backend, fullgraph=fullgraph, **options), backend


def _same(out, ref):
    assert type(out) is type(ref) or isinstance(ref, np.generic) and isinstance(out, np.ndarray)
    if isinstance(ref, (tuple, list)):
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            _same(o, r)
    elif isinstance(ref, torch.Tensor):
        torch.testing.assert_close(out, ref)
    elif isinstance(ref, (np.ndarray, np.generic)):
        assert np.asarray(out).dtype == np.asarray(ref).dtype
        np.testing.assert_allclose(out, ref, rtol=1e-6)
    else:
        assert out == ref


def test_an_array_passed_in_is_computed_on_in_one_graph_and_an_array_comes_back():
    def fn(a, b):
        c = np.sin(a) * 2 + b.sum(axis=0) - np.mean(a, axis=1, keepdims=True)
        d = c.T.reshape(-1)[::2]
        return np.maximum(d, 0.5), a.shape, a.ndim, a.dtype, a.size, len(a)

    a, b = np.random.randn(3, 4), np.random.randn(2, 4)
    opt, backend = _compiled(fn)
    _same(opt(a, b), fn(a, b))
    assert backend.graph_count == 1


def test_numpy_promotion_rules_not_torchs():
    def fn(a, b):
        return a + 1.5, a / 2, a // 2, b * np.float32(2), np.ones(3), a.astype(np.float32) + b

    a, b = np.arange(6).reshape(2, 3), np.ones((2, 3), dtype=np.float32)
    opt, backend = _compiled(fn)
    _same(opt(a, b), fn(a, b))
    assert backend.graph_count == 1


def test_tensor_numpy_and_from_numpy_are_conversions_not_breaks():
    def fn(x):
        a = x.numpy()
        b = np.multiply(a.real, 2.0)
        return torch.from_numpy(b) + x, b

    x = torch.randn(3)
    opt, backend = _compiled(fn)
    _same(opt(x), fn(x))
    assert backend.graph_count == 1


def test_numpy_of_a_tensor_that_requires_grad_raises_as_eagerly():
    def fn(x):
        return x.numpy()

    with pytest.raises(RuntimeError, match="requires grad"):
        fn(torch.randn(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="requires grad"):
        _compiled(fn, fullgraph=False)[0](torch.randn(2, requires_grad=True))

    def forced(x):
        return x.numpy(force=True)

    x = torch.randn(2, requires_grad=True)
    out = _compiled(forced)[0](x)
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, x.detach().numpy())


def test_arrays_cross_a_graph_break():
    def fn(x, y):
        a = x.numpy()
        b = np.ones_like(y.numpy())
        torch._dynamo.graph_break()
        return np.add(a, b), b

    opt, backend = _compiled(fn, fullgraph=False)
    for _ in range(3):
        x, y = torch.randn(1, 3), torch.randn(1, 3)
        _same(opt(x, y), fn(x, y))
    assert backend.graph_count == 2


def test_writes_to_an_array_passed_in_reach_the_callers_array():
    def fn(a):
        a[0] = 5.0
        a += 1
        return a.sum()

    a, b = np.zeros(3), np.zeros(3)
    opt, _ = _compiled(fn)
    _same(opt(a), fn(b))
    np.testing.assert_array_equal(a, b)


def test_one_array_returned_twice_is_one_object():
    def fn(a):
        b = a * 2
        return b, b

    out = _compiled(fn)[0](np.ones(2))
    assert out[0] is out[1]


def test_numpy_scalars_and_constant_numpy_calls():
    def fn(x, a, b, n):
        return x + (a % b) + np.issubdtype(type(n), np.integer) + np.finfo(np.float32).eps, np.array([b, b])

    args = (torch.randn(4), 4096, np.int64(8), 3)
    opt, backend = _compiled(fn)
    _same(opt(*args), fn(*args))
    assert backend.graph_count == 1


def test_array_of_arrays_and_of_scalars():
    def fn(x, y):
        return np.array([x, y])

    opt, backend = _compiled(fn)
    _same(opt(np.float64(1), np.float64(2)), fn(np.float64(1), np.float64(2)))
    _same(opt(np.arange(2), np.arange(2) + 2), fn(np.arange(2), np.arange(2) + 2))
    assert backend.graph_count == 2


def test_a_changing_array_shape_or_dtype_recompiles_and_a_non_array_is_no_error():
    def fn(a):
        return a * 2

    opt, backend = _compiled(fn)
    for a in (np.ones(2), np.ones(3), np.ones(3, dtype=np.int32), np.ones((3, 2)).T):
        _same(opt(a), fn(a))
    assert backend.graph_count == 4
    torch.testing.assert_close(opt(torch.ones(2)), torch.full((2,), 2.0))


def test_linalg_and_fft():
    def fn(a):
        return np.linalg.norm(a), np.fft.fft(a[0]).real, np.linalg.inv(a @ a.T + np.eye(3))

    a = np.random.randn(3, 4)
    opt, backend = _compiled(fn)
    _same(opt(a), fn(a))
    assert backend.graph_count == 1


def test_numpy_random_breaks_and_keeps_numpys_stream():
    def fn(a):
        return a + np.random.rand(3)

    a = np.zeros(3)
    np.random.seed(0)
    ref = fn(a)
    np.random.seed(0)
    opt, _ = _compiled(fn, fullgraph=False)
    _same(opt(a), ref)
    with pytest.raises(tensorjit.GraphBreakError):
        _compiled(fn)[0](a)


def test_numpy_random_traced_from_torchs_generator_when_asked():
    """config.trace_numpy_random: numpy.random's module functions are graph nodes drawing from
    torch's generator (torch.compile's default), one graph for a loop of draws; seeding and a
    RandomState of the program's own still run eagerly."""
    def fn(t):
        total = t
        for shape in ((2,), (2,)):
            total = total + np.random.randn(*shape).astype(np.float32).sum() + np.random.rand(2)
        return total, np.random.normal(0.0, 1.0, size=(3,))

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend, fullgraph=True, options={"trace_numpy_random": True})
    t = np.zeros(2)
    torch.manual_seed(0)
    first = opt(t)
    torch.manual_seed(0)
    again = opt(t)
    assert backend.graph_count == 1
    assert type(first[1]) is np.ndarray and first[1].dtype == np.float64
    assert (first[0] == again[0]).all() and (first[1] == again[1]).all()  # torch's stream: the same seed draws the same numbers
    assert not (opt(t)[1] == first[1]).all()  # and each call draws anew
    state = np.random.RandomState(0)
    with pytest.raises(tensorjit.GraphBreakError, match="numpy.random"):
        tensorjit.compile(lambda t: t + state.rand(2), backend="eager", fullgraph=True,
                          options={"trace_numpy_random": True})(t)
    with pytest.raises(tensorjit.GraphBreakError, match="numpy.random"):
        tensorjit.compile(lambda t: np.random.seed(0), backend="eager", fullgraph=True,
                          options={"trace_numpy_random": True})(t)


def test_a_numpy_random_function_is_a_numpy_break_not_an_unknown_call():
    with pytest.raises(tensorjit.GraphBreakError, match="numpy.random draws from NumPy's own generator"):
        tensorjit.compile(lambda t: t + np.random.randn(2), backend="eager", fullgraph=True)(torch.zeros(2))


def test_an_operator_mixing_a_tensor_and_an_array_runs_eagerly():
    def fn(x, a):
        return torch.sin(x), x + a

    x, a = torch.ones(3), np.ones(3)
    opt, _ = _compiled(fn, fullgraph=False)
    _same(opt(x, a), fn(x, a))


def test_iterating_an_array_and_data_dependent_reads():
    def fn(a):
        total = 0
        for row in a:
            total = total + row.max()
        return total, float(a[0, 0]) + 1

    a = np.random.randn(3, 2)
    opt, _ = _compiled(fn, fullgraph=False)
    out, ref = opt(a), fn(a)
    np.testing.assert_allclose(out[0], ref[0])
    assert out[1] == ref[1]


def test_the_table_covers_torch_numpy():
    import torch._numpy as tnp
    for module_name in ("", "linalg", "fft"):
        ours = getattr(tnp, module_name) if module_name else tnp
        theirs = getattr(np, module_name) if module_name else np
        for name in dir(ours):
            if name.startswith("_") or name in ("ndarray", "dtype", "DType", "set_default_dtype", "AxisError",
                                                "UFuncTypeError", "from_dlpack"):
                continue
            if callable(getattr(ours, name)) and callable(getattr(theirs, name, None)) and \
                    not isinstance(getattr(ours, name), type(np)):
                assert getattr(theirs, name) in table(), f"{module_name}.{name}"


SAMPLES = [
    ("cumsum", lambda a: np.cumsum(a, axis=1)), ("clip", lambda a: np.clip(a, -0.5, 0.5)),
    ("concatenate", lambda a: np.concatenate([a, a * 2], axis=0)), ("stack", lambda a: np.stack([a, a])),
    ("where", lambda a: np.where(a > 0, a, 0.0)), ("einsum", lambda a: np.einsum("ij,kj->ik", a, a)),
    ("argmax", lambda a: np.argmax(a, axis=1)), ("std", lambda a: a.std(axis=0)), ("exp", lambda a: np.exp(a)),
    ("transpose", lambda a: np.transpose(a)), ("expand_dims", lambda a: np.expand_dims(a, 0)),
    ("tile", lambda a: np.tile(a, (2, 1))), ("dot", lambda a: np.dot(a, a.T)), ("zeros_like", lambda a: np.zeros_like(a)),
    ("linspace", lambda a: np.linspace(0, 1, 5) + a[0, 0]), ("prod", lambda a: a.prod()),
    ("sort", lambda a: np.sort(a, axis=1)), ("round", lambda a: np.round(a, 2)), ("abs", lambda a: abs(a)),
    ("isclose", lambda a: np.isclose(a, a + 1e-9)), ("triu", lambda a: np.triu(a)), ("flip", lambda a: np.flip(a, 0)),
]


@pytest.mark.parametrize("name,fn", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_samples_match_numpy(name, fn):
    a = np.random.RandomState(0).randn(3, 4)
    opt, backend = _compiled(fn)
    _same(opt(a), fn(a))
    assert backend.graph_count == 1


def test_a_read_only_array_passed_in_is_read_without_a_warning():
    def fn(a):
        return a * 2, a

    a = np.broadcast_to(np.arange(3.0), (2, 3))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _compiled(fn)[0](a)
    np.testing.assert_array_equal(out[0], a * 2)
    assert out[1] is a


def test_an_array_numpy_makes_of_a_dtype_torch_lacks_runs_eagerly():
    def fn():
        return np.asarray(["L", "U"])

    opt, backend = _compiled(fn, fullgraph=False)
    np.testing.assert_array_equal(opt(), fn())
    assert backend.graph_count == 0


def test_min_and_max_of_an_array_are_elementwise_as_for_tensors():
    def fn(a):
        return min(a, 3), max(a, a - 1), abs(a - 5)

    a = np.arange(10)
    opt, backend = _compiled(fn)
    out = opt(a)
    _same(out, (np.minimum(a, 3), np.maximum(a, a - 1), np.abs(a - 5)))
    assert backend.graph_count == 1


def test_python_number_types_as_dtypes():
    def fn(x):
        return (x * 5).to(bool).to(float).to(int) + 8, torch.zeros(2, dtype=complex)

    x = torch.randn(5)
    opt, backend = _compiled(fn)
    _same(opt(x), fn(x))
    assert opt(x)[0].dtype == torch.int64


def test_numpy_scalars_promote_as_numpy_scalars():
    def fn(a, b):
        return np.int64(3) + a, a * np.finfo(a.dtype).eps, b * np.float64(2), b + np.float32(1)

    a, b = np.random.randn(3), np.ones(3, dtype=np.float32)
    opt, backend = _compiled(fn)
    _same(opt(a, b), fn(a, b))
    assert backend.graph_count == 1


def test_split_gives_a_list_and_shape_queries_compile_no_graph():
    def split(a):
        return np.split(a, 2, axis=1)

    def queries(a):
        return np.shape(a), np.ndim(a), np.size(a)

    a = np.random.randn(3, 4)
    _same(_compiled(split)[0](a), split(a))
    opt, backend = _compiled(queries)
    assert opt(a) == queries(a)
    assert backend.graph_count == 0


def test_one_array_passed_twice_is_one_array():
    def fn(a, b):
        a += 1
        return b * 2, a is b

    a, ref_a = np.zeros(2), np.zeros(2)
    opt, backend = _compiled(fn)
    _same(opt(a, a), fn(ref_a, ref_a))
    np.testing.assert_array_equal(a, ref_a)
    b = np.zeros(2)
    _same(opt(a, b), fn(ref_a, np.zeros(2)))
    assert backend.graph_count == 2


def test_a_write_to_a_read_only_array_raises_as_numpy_does():
    def fn(a):
        b = a.T
        try:
            b[0, 0] = 5
        except ValueError as e:
            return a * 2, str(e)
        return a, ""

    a = np.broadcast_to(np.arange(3.0), (2, 3))
    opt, backend = _compiled(fn)
    out, ref = opt(a), fn(a)
    _same(out, ref)
    assert out[1] == "assignment destination is read-only"
    np.testing.assert_array_equal(a, np.broadcast_to(np.arange(3.0), (2, 3)))
    frozen = np.arange(6.0).reshape(2, 3)
    frozen.flags.writeable = False
    _same(opt(frozen), fn(frozen))
    writable = np.arange(6.0).reshape(2, 3)  # the same layout, writable: another entry, and the write
    _same(opt(writable), fn(np.arange(6.0).reshape(2, 3)))
    assert writable[0, 0] == 5
    assert backend.graph_count == 3


def test_sizes_of_arrays_with_dynamic_shapes():
    def fn(a):
        return a * a.size, a.shape, a + np.arange(a.shape[1])

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend)
    for n in (2, 3, 4):
        a = np.random.randn(n, 3)
        _same(opt(a), fn(a))


def test_a_list_of_arrays_where_numpy_reads_one_array():
    def fn(t):
        a = t.numpy()
        return (np.mean([a, a * 2], axis=0), np.sum((a, a)), np.where([a > 0, a < 0], 1.0, 0.0),
                np.where(a > 0, 1.0, 0), np.where(a > 0, 1j, 0), np.where(a > 0, 1, 0), np.where(a > 0, a, 0.0))

    t = torch.randn(3)
    opt, backend = _compiled(fn)
    _same(opt(t), fn(t))
    assert backend.graph_count == 1
