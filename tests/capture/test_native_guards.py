"""The native tensor check (capture/native_guards.py): what it accepts and refuses, and the
Python checks where it cannot be built. Module-level changes are in test_module_guards.py."""

import pytest
import torch

from conformance.harness import CountingBackend
from tensorjit import logs
from tensorjit.capture import native_guards
from tensorjit.capture.guards import TensorSignature
from tensorjit.config import Config, config as default_config


@pytest.fixture
def checks():
    found = native_guards.checker(default_config, wait=True)
    if found is None:
        pytest.skip("no native tensor check on this machine (no C++ compiler)")
    return found


def test_each_property_of_each_tensor_is_checked(checks):
    tensors = [torch.nn.Parameter(torch.randn(3, 4)), torch.randn(4, 3).t(), torch.tensor(2.0),
               torch.zeros(5, dtype=torch.int64), torch.randn(2, 1, 3)]
    spec = checks.spec([TensorSignature.of(t) for t in tensors])
    assert checks.match(spec, tuple(tensors))
    others = {
        "type": torch.randn(3, 4),
        "requires_grad": torch.nn.Parameter(torch.randn(3, 4), requires_grad=False),
        "dtype": torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64)),
        "device": torch.nn.Parameter(torch.randn(3, 4, device="meta")),
        "shape": torch.nn.Parameter(torch.randn(4, 3)),
        "strides": torch.nn.Parameter(torch.randn(4, 3).t()),
        "not a tensor": 3,
        "sparse": torch.nn.Parameter(torch.randn(3, 4).to_sparse()),
    }
    for what, other in others.items():
        assert not checks.match(spec, (other, *tensors[1:])), what
    assert not checks.match(spec, tuple(tensors[:-1])), "one tensor fewer"
    assert not checks.match(spec, (*tensors[:-1], torch.randn(2, 1, 3)[:, :, :2])), "a view of other sizes"


def test_only_plain_tensors_and_parameters_are_eligible():
    class Subclass(torch.Tensor):
        pass
    assert native_guards.eligible(TensorSignature.of(torch.randn(2)))
    assert native_guards.eligible(TensorSignature.of(torch.nn.Parameter(torch.randn(2))))
    assert not native_guards.eligible(TensorSignature.of(torch.randn(2).as_subclass(Subclass)))


def test_without_a_compiler_the_guards_stay_python():
    logs.clear()
    config = Config(cpp_compiler="tensorjit-no-such-compiler")
    assert native_guards.checker(config, wait=True) is None
    assert any("tensor guards stay Python" in line for line in logs.recent("guards"))
    assert native_guards.checker(Config(native_guards=False)) is None


def test_hook_tables_are_tested_empty(checks):
    modules = [torch.nn.Linear(2, 2) for _ in range(3)]
    tables = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    dicts = tuple(m.__dict__ for m in modules)
    assert checks.empty_entries(dicts, tables)
    handle = modules[1].register_forward_pre_hook(lambda module, args: None)
    assert not checks.empty_entries(dicts, tables)
    handle.remove()
    assert checks.empty_entries(dicts, tables)
    del modules[2].__dict__["_backward_hooks"]  # gone from the instance dict: a miss, not an error
    assert not checks.empty_entries(dicts, tables)
    assert not checks.empty_entries((modules[0],), tables)  # not a dict


@pytest.fixture
def slow_build(checks, monkeypatch):
    """A build of the native check that has not finished: `finish()` completes it."""
    monkeypatch.setattr(native_guards, "_jobs", {})
    monkeypatch.setattr(native_guards._Job, "start", lambda self, compiler, cache_dir: None)
    monkeypatch.setattr(native_guards, "MIN_TENSORS", 1)
    monkeypatch.setattr(native_guards, "BUILD_TENSORS", 1)  # capture asks for the build

    def finish():
        (job,) = native_guards._jobs.values()
        job.result = checks
        job.finish()
    return finish


def test_capture_does_not_wait_for_the_build_and_takes_the_check_when_done(slow_build):
    import tensorjit
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    counter = CountingBackend()
    compiled = tensorjit.compile(net, backend=counter)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), net(x))  # captured while the build runs: Python checks
    entry = compiled._compiled_forward.entries[0]
    assert "_tensors_match(" not in entry.guards.source_text
    assert ".requires_grad" in entry.guards.source_text
    slow_build()
    torch.testing.assert_close(compiled(x), net(x))  # the next call takes the native check
    assert "_tensors_match(" in entry.guards.source_text
    assert ".requires_grad" not in entry.guards.source_text
    assert entry.guards.upgrade is None and counter.graph_count == 1
    net[2].weight.requires_grad_(False)  # checked by the native check now, on the rebuilt fast path
    torch.testing.assert_close(compiled(x), net(x))
    assert counter.graph_count == 2


def test_every_entry_and_resume_function_takes_the_check(slow_build):
    import tensorjit
    weights = [torch.randn(4, 4) for _ in range(3)]

    def f(x, flag):
        y = x
        for w in weights:
            y = y @ w
        print("a graph break")  # the rest runs in a resume function, whose calls go through dispatch
        for w in weights:
            y = y @ w
        return y * flag
    counter = CountingBackend()
    compiled = tensorjit.compile(f, backend=counter)
    x = torch.randn(2, 4)
    for flag in (2, 3):  # an int argument: one entry for each value, or a dynamic one
        torch.testing.assert_close(compiled(x, flag), f(x, flag))
    entries = [entry for _, entry in compiled.all_entries()]
    assert len(entries) >= 2 and all(e.guards.upgrade is not None for e in entries)
    slow_build()
    for flag in (2, 3):
        torch.testing.assert_close(compiled(x, flag), f(x, flag))
    assert all(e.guards.upgrade is None and "_tensors_match(" in e.guards.source_text for e in entries)
    graphs = counter.graph_count
    weights[2].t_()  # square: same shape, other strides, seen by the native checks
    for flag in (2, 3):
        torch.testing.assert_close(compiled(x, flag), f(x, flag))
    assert counter.graph_count > graphs


def small_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_a_small_entry_takes_a_check_the_cache_holds(checks, monkeypatch):
    """A process whose cache holds the built check (another process built it): an entry with
    a few tensor guards loads it at capture, and asks for no build."""
    import tensorjit
    monkeypatch.setattr(native_guards, "_jobs", {})  # as in a fresh process
    monkeypatch.setattr(native_guards, "_cached", {})
    built = []
    monkeypatch.setattr(native_guards, "_build", lambda compiler, output: built.append(output))
    net, counter = small_net(), CountingBackend()
    compiled = tensorjit.compile(net, backend=counter)
    x = torch.randn(3, 4)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), net(x))
    text = compiled._compiled_forward.entries[0].guards.source_text
    assert "_tensors_match(" in text and "_empty_entries(" in text and ".requires_grad" not in text
    assert native_guards.requested(default_config) and not built
    net[0].bias.requires_grad_(False)  # five tensors checked natively: a flip still recompiles
    torch.testing.assert_close(compiled(x), net(x))
    assert counter.graph_count == 2


def test_a_small_entry_asks_for_the_build_once_it_is_called_often(checks, monkeypatch):
    """Where the check is neither built nor in the cache, capturing a small entry starts no build
    (a short process never pays for one); its fast path counts calls, and at HOT_CALLS asks for
    the build, stops counting, and takes the check once it is built."""
    import tensorjit
    monkeypatch.setattr(native_guards, "_jobs", {})
    monkeypatch.setattr(native_guards, "_in_cache", lambda place: False)
    monkeypatch.setattr(native_guards._Job, "start", lambda self, compiler, cache_dir: None)  # a slow build
    monkeypatch.setattr(native_guards, "HOT_CALLS", 5)
    net, counter = small_net(), CountingBackend()
    compiled = tensorjit.compile(net, backend=counter)
    function = compiled._compiled_forward
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), net(x))  # captured: Python checks, no build asked for
    entry = function.entries[0]
    assert ".requires_grad" in entry.guards.source_text and not native_guards.requested(default_config)
    assert "_count" in function.fast.__code__.co_names
    for _ in range(native_guards.HOT_CALLS - 1):
        torch.testing.assert_close(compiled(x), net(x))
    assert not native_guards.requested(default_config)
    torch.testing.assert_close(compiled(x), net(x))  # the HOT_CALLS-th call on the fast path
    assert native_guards.requested(default_config)
    assert "_count" not in function.fast.__code__.co_names  # counts no more while the build runs
    (job,) = native_guards._jobs.values()
    job.result = checks
    job.finish()
    torch.testing.assert_close(compiled(x), net(x))
    assert "_tensors_match(" in entry.guards.source_text and counter.graph_count == 1
    net[2].weight.data = torch.randn(4, 2).t()  # same shape, transposed strides: seen natively
    torch.testing.assert_close(compiled(x), net(x))
    assert counter.graph_count == 2


def test_no_check_is_asked_for_where_it_is_off_or_its_build_failed(monkeypatch):
    monkeypatch.setattr(native_guards, "_jobs", {})
    monkeypatch.setattr(native_guards, "_cached", {})
    assert native_guards.for_config(Config(native_guards=False)) is None
    config = Config(cpp_compiler="tensorjit-no-such-compiler")
    assert native_guards.for_config(config)(1) is None  # no compiler: not in the cache, no build
    assert native_guards.checker(config, wait=True) is None
    assert native_guards.for_config(config) is None  # failed: capture emits no upgrade for it


def test_storages_unshared_natively_as_in_python(checks, monkeypatch):
    from tensorjit.capture import guards
    base, other = torch.randn(6), torch.randn(3)
    cases = [
        ((other,), (base, other)),                          # nothing shared
        ((base[:3],), (base[:3], base[3:], other)),          # a written tensor shares with another
        ((other,), (base[:3], base[3:], other)),             # only tensors not written share: fine
        ((torch.empty(0),), (torch.empty(0), torch.empty(0))),  # no memory: nothing to share
        ((torch.randn(2, device="meta"),), (torch.randn(2, device="meta"),) * 2),
    ]
    native = native_guards.storages_unshared
    assert native is not None, "loading the extension hands its storages_unshared to the guards"
    for written, tensors in cases:
        monkeypatch.setattr(native_guards, "storages_unshared", None)
        in_python = guards.storages_unshared(written, tensors)
        assert native(written, tensors) is in_python, (written, tensors)
    assert [native(*case) for case in cases] == [True, False, True, True, True]


def test_each_runtime_part_is_built_in_and_handed_the_module(checks):
    """native_guards.RUNTIME_PARTS: each part's C++ is in the extension's source and every method
    its table names is in the loaded module, which the part was handed (`provide`)."""
    import re

    from tensorjit.runtime import buffers, gradient_lease

    assert set(native_guards.RUNTIME_PARTS) == {buffers, gradient_lease}
    module = gradient_lease._native
    assert module is not None
    for part in native_guards.RUNTIME_PARTS:
        assert part.SOURCE in native_guards.SOURCE and part.METHODS in native_guards.SOURCE
        for name in re.findall(r'\{"(\w+)"', part.METHODS):
            assert hasattr(module, name), (part.__name__, name)
    assert buffers.new is module.new_buffer and buffers.alias is module.alias


def test_a_native_entry_saves_its_guards_without_the_python_check(checks, monkeypatch):
    """An entry checked natively saves its guards without the Python check's text and code:
    a later process with the same cache checks natively too, so that text would never match
    (and its compile() was a quarter of GPT-2's guard building). The guards still come back,
    natively, and hold and fail as the original's do. Without the native check the saved
    Python check is kept."""
    import tensorjit
    from tensorjit.capture.convert import rebuilt_entry
    from tensorjit.runtime.persist import loads

    monkeypatch.setattr(default_config, "warm_start", False)  # captured here, not loaded or borrowed

    def layer(weight, x):
        return torch.nn.functional.linear(x, weight).relu()

    weight, x = torch.randn(4, 4), torch.randn(3, 4)
    compiled = tensorjit.compile(layer, backend="eager")
    torch.testing.assert_close(compiled(weight, x), layer(weight, x))
    entry = compiled.entries[0]
    assert entry.guards.native and "_tensors_match(" in entry.guards.source_text
    records, check = loads(entry.guards.saved[0])
    assert check is None and records
    rebuilt = rebuilt_entry(compiled, "eager", entry.guards.saved[0])
    assert rebuilt.guards.native and rebuilt.guards.check((weight, x)) is entry.guards.check((weight, x)) is True
    assert rebuilt.guards.check((weight, torch.randn(2, 4))) is False

    monkeypatch.setattr(default_config, "native_guards", False)

    def other_layer(weight, x):
        return torch.nn.functional.linear(x, weight).relu()
    python_only = tensorjit.compile(other_layer, backend="eager")
    python_only(weight, x)
    entry = python_only.entries[0]
    assert not entry.guards.native
    records, check = loads(entry.guards.saved[0])
    assert check is not None and check.text.startswith("def check(L")
