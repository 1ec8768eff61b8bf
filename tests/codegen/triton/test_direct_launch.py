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
