"""max-autotune's kernel choice: timed once, remembered on disk, read back by a later launcher."""

from __future__ import annotations

import torch

from tensorjit.codegen.triton import launcher as launcher_module
from tensorjit.codegen.triton.launcher import AutotunedLauncher


class FakeCandidate:
    def __init__(self, shape, clock, cost):
        self.shape, self.clock, self.cost, self.calls = shape, clock, cost, 0

    def __call__(self, *arguments):
        self.calls += 1
        self.clock[0] += self.cost


def fake_gpu(monkeypatch, clock):
    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU 80GB")
    monkeypatch.setattr(torch.cuda, "Event", Event)


def test_choice_is_timed_once_then_read_from_disk(monkeypatch, tmp_path):
    clock = [0.0]
    fake_gpu(monkeypatch, clock)
    source = str(tmp_path / "kernel.py")
    costs = (3.0, 1.0, 2.0)
    first = AutotunedLauncher([FakeCandidate(f"shape{i}", clock, c) for i, c in enumerate(costs)], choice_path=source)
    first("x")
    assert first.chosen is first.candidates[1] and first.timings_ms == [3.0, 1.0, 2.0]
    assert list(tmp_path.glob("kernel.py.Fake_GPU_80GB.choice"))

    later = AutotunedLauncher([FakeCandidate(f"shape{i}", clock, c) for i, c in enumerate(costs)], choice_path=source)
    later("x")
    assert later.chosen is later.candidates[1]
    assert [c.calls for c in later.candidates] == [0, 1, 0]  # nothing timed: only the chosen one ran

    other = AutotunedLauncher([FakeCandidate(f"other{i}", clock, c) for i, c in enumerate(costs)], choice_path=source)
    other("x")  # other candidates than recorded: timed again
    runs = 1 + other.REPEATS  # warm-up, then the timed repeats
    assert [c.calls for c in other.candidates] == [runs, runs + 1, runs] and other.timings_ms == [3.0, 1.0, 2.0]


def test_without_a_path_or_gpu_nothing_is_recorded(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine with a GPU
    candidates = [FakeCandidate("a", [0.0], 1.0), FakeCandidate("b", [0.0], 1.0)]
    assert AutotunedLauncher(candidates)._choose(()) is candidates[0]  # no GPU: the first
    assert not list(tmp_path.iterdir())
    assert launcher_module.AutotunedLauncher(candidates, choice_path=None)._record_file() is None


def test_a_kernel_writing_over_what_it_reads_is_timed_on_copies(monkeypatch):
    """A kernel reading and writing one tensor (memory.in_place_pairs) doubles it: timing it
    six times on the real tensor would leave it multiplied by 64 after the first call."""
    clock = [0.0]
    fake_gpu(monkeypatch, clock)

    class Doubling(FakeCandidate):
        def __call__(self, tensor, other):
            super().__call__()
            tensor.mul_(2)

    tensor, other = torch.ones(4), torch.ones(4)
    launcher = AutotunedLauncher([Doubling(f"shape{i}", clock, c) for i, c in enumerate((2.0, 1.0))],
                                 overwritten=(0,))
    launcher(tensor, other)
    assert launcher.chosen is launcher.candidates[1]
    torch.testing.assert_close(tensor, torch.full((4,), 2.0))
