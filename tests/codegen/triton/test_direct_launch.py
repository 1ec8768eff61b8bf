"""The fast launch calls Triton's C launcher itself only where Triton's Python layer would
pass the arguments through unchanged (launcher._direct_launch)."""

from tensorjit.codegen.triton.launcher import _direct_launch


def c_launch(*arguments):
    return arguments


class PassThrough:  # Triton 3.5-3.6: allocates scratch memory when the kernel needs any
    launch = staticmethod(c_launch)
    global_scratch_size = profile_scratch_size = 0

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        return self.launch(gridX, gridY, gridZ, stream, function, True, False, None, None, *args)


class NamedArguments(PassThrough):  # a later Triton: another argument order
    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, enter, exit, *args):
        return self.launch(gridX, gridY, gridZ, stream, function, kernel_metadata, args)


def test_the_pass_through_layer_is_skipped():
    run = PassThrough()
    launch, prefix = _direct_launch(run)
    assert launch is c_launch and prefix == "coop, pdl, None, None, "


def test_scratch_memory_or_another_signature_keeps_tritons_layer():
    needs_scratch = PassThrough()
    needs_scratch.global_scratch_size = 128
    for run in (needs_scratch, NamedArguments()):
        assert _direct_launch(run) == (run, "")


class FakeCompiled:
    """What `kernel[grid](...)` returns after its first compile: the C launcher (`run`) records."""

    function = 7
    packed_metadata = ()

    def __init__(self):
        self.calls = []
        self.run = PassThrough()
        self.run.launch = lambda *arguments: self.calls.append(arguments)


class FakeKernel:
    __name__ = "fake"

    def __init__(self):
        self.compiled = FakeCompiled()
        self.generic_launches = 0

    def __getitem__(self, grid):
        def launch(*arguments, **options):
            self.generic_launches += 1
            return self.compiled
        return launch


def test_the_fast_launch_gives_the_c_launcher_addresses_and_checks_alignment(monkeypatch):
    """Tensors reach Triton's C launcher as their addresses (given a tensor, it looks `data_ptr` up
    by name and asks the driver about the address at every launch); a pointer no longer 16-byte
    aligned where the kernel was specialised for alignment takes the generic path."""
    import pytest
    import torch

    pytest.importorskip("triton")
    from tensorjit.codegen.triton.heuristics import LaunchShape
    from tensorjit.codegen.triton.launcher import KernelLauncher

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    kernel = FakeKernel()
    launcher = KernelLauncher(kernel, LaunchShape(64, None, 4, (3, 1, 1)))
    storage = torch.zeros(64)
    aligned, other = storage[:16], storage[1:17]  # other: 4 bytes past an aligned address
    launcher(aligned, other, 16)
    assert kernel.generic_launches == 1 and launcher.tensors == [0, 1] and launcher.aligned == [0]
    launcher.launch(aligned, other, 16)
    assert kernel.generic_launches == 1 and launcher.fast_launches == 1
    grid_and_tensors = kernel.compiled.calls[-1]
    assert grid_and_tensors[:3] == (3, 1, 1)
    assert grid_and_tensors[-4:] == (aligned.data_ptr(), other.data_ptr(), 16, 64)  # XBLOCK last
    launcher.launch(other, other, 16)  # position 0 was specialised as aligned
    assert kernel.generic_launches == 2 and launcher.fast_launches == 1
