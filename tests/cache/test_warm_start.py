"""Warm start (runtime/warm_start.py): a second process runs what the first compiled, with no
capture, autograd or code generation, and any change or damage recompiles, never a wrong answer."""

from __future__ import annotations

import pytest

from .warm import compiled_nothing, run, write_script

MLP = '''
torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
compiled = tensorjit.compile(model)
x = torch.randn(8, 16)
with torch.no_grad():
    inference = same(compiled(x), model(x))
out = compiled(x)
out.square().sum().backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
model(x).square().sum().backward()
report(inference=inference, training=same(out, model(x)),
       grads=all(same(a, p.grad) for a, p in zip(grads, model.parameters())))
'''


def test_second_process_compiles_nothing_and_matches_eager(tmp_path):
    script = write_script(tmp_path, MLP)
    cold = run(script, tmp_path / "cache")
    assert cold["compiled"]["capture"] >= 1 and cold["compiled"]["codegen"] >= 1
    assert any(line.startswith("saved:") for line in cold["cache"])
    warm = run(script, tmp_path / "cache")
    assert compiled_nothing(warm), warm
    assert warm["inference"] and warm["training"] and warm["grads"]
    assert any(line.startswith("hit:") for line in warm["cache"])


def test_parameters_are_read_from_the_live_module(tmp_path):
    """The saved entry names the module's class, never its weights: other weights, same answer as eager."""
    script = write_script(tmp_path, MLP)
    run(script, tmp_path / "cache", "0")
    warm = run(script, tmp_path / "cache", "1")
    assert compiled_nothing(warm)
    assert warm["inference"] and warm["training"] and warm["grads"]


def test_warm_start_off(tmp_path):
    script = write_script(tmp_path, MLP)
    run(script, tmp_path / "cache", env={"TENSORJIT_WARM_START": "0"})
    again = run(script, tmp_path / "cache", env={"TENSORJIT_WARM_START": "0"})
    assert again["compiled"]["capture"] >= 1 and not again["cache"]


def _entry_files(cache):
    return sorted(cache.glob("*/*.entry"))


def test_corrupt_entry_recompiles(tmp_path):
    script = write_script(tmp_path, MLP)
    run(script, tmp_path / "cache")
    (entry,) = _entry_files(tmp_path / "cache")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    warm = run(script, tmp_path / "cache")
    assert warm["compiled"]["capture"] >= 1
    assert warm["inference"] and warm["training"] and warm["grads"]
    assert any("checksum" in line for line in warm["cache"] if line.startswith("miss:"))


def test_bad_pickle_with_valid_checksum_recompiles(tmp_path):
    import hashlib
    script = write_script(tmp_path, MLP)
    run(script, tmp_path / "cache")
    (entry,) = _entry_files(tmp_path / "cache")
    data = entry.read_bytes()[:-40] + b"not a pickle"
    entry.write_bytes(data)
    entry.with_name(entry.name + ".sha256").write_text(f"{len(data)} {hashlib.sha256(data).hexdigest()}\n")
    warm = run(script, tmp_path / "cache")
    assert warm["compiled"]["capture"] >= 1
    assert warm["inference"] and warm["training"] and warm["grads"]
    assert any("could not be loaded" in line for line in warm["cache"])


def test_missing_kernel_library_recompiles(tmp_path):
    script = write_script(tmp_path, MLP)
    run(script, tmp_path / "cache")
    for library in (tmp_path / "cache").glob("*/*.so"):
        library.unlink()
    warm = run(script, tmp_path / "cache")
    assert warm["compiled"]["capture"] >= 1
    assert warm["inference"] and warm["training"] and warm["grads"]
    assert any("could not be loaded" in line for line in warm["cache"])


GLOBAL = '''
import os
SCALE = float(os.environ["SCALE"])

def f(x):
    return torch.sin(x) * SCALE + 1

x = torch.randn(5, 7)
report(ok=same(tensorjit.compile(f)(x), f(x)))
'''


def test_changed_global_recompiles(tmp_path):
    script = write_script(tmp_path, GLOBAL)
    run(script, tmp_path / "cache", env={"SCALE": "2.0"})
    same_global = run(script, tmp_path / "cache", env={"SCALE": "2.0"})
    assert compiled_nothing(same_global) and same_global["ok"]
    changed = run(script, tmp_path / "cache", env={"SCALE": "3.0"})
    assert changed["compiled"]["capture"] == 1 and changed["ok"]
    assert any("SCALE" in line for line in changed["cache"] if line.startswith("miss:"))


CODE = '''
def f(x):
    return torch.cos(x) * 2 + 1

x = torch.randn(5, 7)
report(ok=same(tensorjit.compile(f)(x), f(x)))
'''


def test_changed_code_recompiles(tmp_path):
    script = write_script(tmp_path, CODE)
    run(script, tmp_path / "cache")
    write_script(tmp_path, CODE.replace("* 2 + 1", "* 3 + 1"))
    changed = run(script, tmp_path / "cache")
    assert changed["compiled"]["capture"] == 1 and changed["ok"]
    assert any("code changed" in line for line in changed["cache"])


MODEL_MODULE = '''
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x):
        return activation(self.linear(x))


def activation(x):
    return torch.relu(x)
'''

USES_MODULE = '''
from blocks import Block
torch.manual_seed(0)
block = Block()
x = torch.randn(3, 6)
with torch.no_grad():
    report(ok=same(tensorjit.compile(block)(x), block(x)))
'''


def test_changed_imported_source_recompiles(tmp_path):
    """A function capture inlined lives in another file: editing it recompiles (the compiled
    forward's own code is unchanged)."""
    (tmp_path / "blocks.py").write_text(MODEL_MODULE)
    script = write_script(tmp_path, USES_MODULE)
    run(script, tmp_path / "cache")
    assert compiled_nothing(run(script, tmp_path / "cache"))
    (tmp_path / "blocks.py").write_text(MODEL_MODULE.replace("torch.relu", "torch.tanh"))
    changed = run(script, tmp_path / "cache")
    assert changed["compiled"]["capture"] == 1 and changed["ok"]
    assert any("blocks.py changed" in line for line in changed["cache"])


def test_changed_tensorjit_version_recompiles(tmp_path):
    script = write_script(tmp_path, "import os\ntensorjit.__version__ = os.environ.get('VERSION', tensorjit.__version__)\n"
                          + CODE)
    run(script, tmp_path / "cache")
    changed = run(script, tmp_path / "cache", env={"VERSION": "99.0"})
    assert changed["compiled"]["capture"] == 1 and changed["ok"]
    assert any("tensorjit" in line and "99.0" in line for line in changed["cache"])


BREAKS = '''
def f(x, y):
    a = torch.sin(x) + y
    if a.sum() > 0:          # data-dependent: a graph break, two resume functions
        a = a * 2
    print("", end="")        # another break
    return torch.cos(a) - y

x, y = torch.randn(4, 4), torch.randn(4, 4)
compiled = tensorjit.compile(f)
report(ok=same(compiled(x, y), f(x, y)) and same(compiled(-x, -y - 5), f(-x, -y - 5))
       and same(compiled(x, y + 5), f(x, y + 5)))
'''


def test_graph_breaks_and_resume_functions(tmp_path):
    script = write_script(tmp_path, BREAKS)
    cold = run(script, tmp_path / "cache")
    assert cold["ok"] and cold["compiled"]["capture"] >= 3
    warm = run(script, tmp_path / "cache")
    assert compiled_nothing(warm), warm
    assert warm["ok"]


DYNAMIC = '''
def f(x):
    return torch.softmax(x * 2, dim=-1).sum(0)

compiled = tensorjit.compile(f, dynamic=True)
xs = [torch.randn(n, 8) for n in (3, 5, 3)]
report(ok=all(same(compiled(x), f(x)) for x in xs))
'''


def test_dynamic_shapes(tmp_path):
    script = write_script(tmp_path, DYNAMIC)
    cold = run(script, tmp_path / "cache")
    assert cold["ok"] and cold["compiled"]["capture"] == 1
    warm = run(script, tmp_path / "cache")
    assert compiled_nothing(warm), warm
    assert warm["ok"]


CLOSURE_ARGUMENT = '''
def apply(fn, x):
    return fn(x) + 1

def make(k):
    def inner(x):
        return x * k
    return inner

x = torch.randn(4)
compiled = tensorjit.compile(apply)
report(ok=same(compiled(make(2.0), x), apply(make(2.0), x)) and same(compiled(make(3.0), x), apply(make(3.0), x)))
'''


def test_closures_are_saved_by_their_code(tmp_path):
    """A closure made anew per call is guarded by its code and cells, which another process checks."""
    script = write_script(tmp_path, CLOSURE_ARGUMENT)
    cold = run(script, tmp_path / "cache")
    assert cold["ok"] and cold["compiled"]["capture"] == 2
    warm = run(script, tmp_path / "cache")
    assert warm["ok"] and compiled_nothing(warm), warm


IDENTITY = '''
import operator
FIRST = operator.itemgetter(0)   # compared by identity: a copy in another process is another object

def f(xs):
    return FIRST(xs) * 2

xs = (torch.randn(3), torch.randn(3))
report(ok=same(tensorjit.compile(f)(xs), f(xs)))
'''


def test_unsaveable_entry_is_logged_and_recompiled(tmp_path):
    script = write_script(tmp_path, IDENTITY)
    cold = run(script, tmp_path / "cache")
    assert cold["ok"] and any(line.startswith("not saved:") and "itemgetter" in line for line in cold["cache"])
    warm = run(script, tmp_path / "cache")
    assert warm["ok"] and warm["compiled"]["capture"] == cold["compiled"]["capture"] >= 1


ARTIFACTS = '''
import pathlib
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
x = torch.randn(2, 8)
out = tensorjit.compile(model)(x)
if sys.argv[1] == "save":
    data, info = tensorjit.compiler.save_cache_artifacts()
    pathlib.Path("artifacts.bin").write_bytes(data)
else:
    pass
report(ok=same(out, model(x)))
'''

LOAD_ARTIFACTS = '''
import pathlib
info = tensorjit.compiler.load_cache_artifacts(pathlib.Path("artifacts.bin").read_bytes())
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
x = torch.randn(2, 8)
report(ok=same(tensorjit.compile(model)(x), model(x)), entries=len(info.artifacts["entries"]))
'''


def test_cache_artifacts_carry_warm_entries(tmp_path):
    script = write_script(tmp_path, ARTIFACTS)
    run(script, tmp_path / "first", "save")
    loader = write_script(tmp_path, LOAD_ARTIFACTS, "load.py")
    warm = run(loader, tmp_path / "second")
    assert warm["ok"] and warm["entries"] == 1
    assert compiled_nothing(warm), warm


LAYERS = '''
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(2)])
        self.register_buffer("scale", torch.rand(8))
        self.plain = torch.rand(8)  # a tensor attribute that is neither parameter nor buffer

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x * self.scale + self.plain

torch.manual_seed(int(sys.argv[1]))
net = Net()
x = torch.randn(4, 8)
compiled = tensorjit.compile(net)
out = compiled(x)
out.sum().backward()
grads = [p.grad.clone() for p in net.parameters()]
net.zero_grad()
expected = net(x)
expected.sum().backward()
report(ok=same(out, expected) and all(same(a, p.grad) for a, p in zip(grads, net.parameters())))
'''


def test_module_state_is_never_baked_in(tmp_path):
    """Weights, buffers and tensor attributes of a module (iterated through a ModuleList) come from
    the live module: a process with other values gets its own answer, and its own gradients."""
    script = write_script(tmp_path, LAYERS)
    assert run(script, tmp_path / "cache", "0")["ok"]
    warm = run(script, tmp_path / "cache", "1")
    assert warm["ok"] and compiled_nothing(warm), warm


CONSTANT = '''
def f(x):
    return x * torch.tensor([1.0, 2.0, 3.0]) + torch.zeros(0).sum()

x = torch.randn(2, 3)
report(ok=same(tensorjit.compile(f)(x), f(x)))
'''


def test_constant_tensors_are_saved(tmp_path):
    """Tensors made while capturing are constants of the graph: saved by value (an empty one too)."""
    script = write_script(tmp_path, CONSTANT)
    cold = run(script, tmp_path / "cache")
    assert cold["ok"] and any(line.startswith("saved:") for line in cold["cache"]), cold["cache"]
    warm = run(script, tmp_path / "cache")
    assert warm["ok"] and compiled_nothing(warm), warm


OPTION_CACHE = '''
import os
def f(x):
    return torch.sigmoid(x) * 3

x = torch.randn(6, 5)
compiled = tensorjit.compile(f, options={"cache_dir": os.environ["OWN_CACHE"]})
report(ok=same(compiled(x), f(x)))
'''


def test_cache_dir_option(tmp_path):
    """Kernels are named relative to the compiled function's own cache directory."""
    script = write_script(tmp_path, OPTION_CACHE)
    env = {"OWN_CACHE": str(tmp_path / "own")}
    cold = run(script, tmp_path / "default", env=env)
    assert cold["ok"] and any(line.startswith("saved:") for line in cold["cache"]), cold["cache"]
    warm = run(script, tmp_path / "default", env=env)
    assert warm["ok"] and compiled_nothing(warm), warm
    assert not list((tmp_path / "default").glob("*/*.entry"))


def test_an_edited_compiler_does_not_run_entries_an_older_one_made(tmp_path):
    # one version number, other source files (a checkout being edited): the entries recompile
    import os

    from tensorjit.runtime import warm_start

    (tmp_path / "a.py").write_text("x = 1\n")
    before = warm_start._package_fingerprint(str(tmp_path))
    (tmp_path / "a.py").write_text("x = 22\n")
    assert warm_start._package_fingerprint(str(tmp_path)) != before
    assert "tensorjit files" in warm_start.versions()
