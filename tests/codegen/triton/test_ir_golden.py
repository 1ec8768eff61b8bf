"""Golden text: the printed IR and the generated Triton kernel of small graphs.

A change to lowering, fusion or the emitter shows up here as a diff to review;
`EXPECTTEST_ACCEPT=1 python -m pytest tests/codegen/triton/test_ir_golden.py` rewrites
the expected text after a deliberate change. The kernels use no libdevice call, so
their text is the same under Triton's interpreter and on a GPU.
"""

import expecttest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.decomp import decompositions
from tensorjit.codegen.triton import compile as triton_compile


def lower(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return gm, triton_compile.lower(gm, list(inputs))[0]


def kernel_function(source: str) -> str:
    """The @triton.jit function that holds the kernel (not the shared prelude)."""
    return "@triton.jit" + source.split("@triton.jit")[-1]


class TestGolden(expecttest.TestCase):
    def test_softmax_program_and_kernel(self):
        gm, program = lower(lambda x: torch.softmax(x, -1), torch.randn(4, 10))
        self.assertExpectedInline(str(program), """\
in0: input float32[4, 10] strides=[10, 1]
buf1: temp float32[4, 1] strides=[1, 1]
buf2: temp float32[4, 10] strides=[10, 1]
buf3: temp float32[4, 1] strides=[1, 1]
buf4: temp float32[4, 10] strides=[10, 1]
group0_kernel0: for i0 < 4: (row-local: buf1, buf2, buf3)
  kernel0: for i0 < 4: buf1[...] = max(for r0 < 10: load(in0, ((i0 * 10) + r0)))
  kernel1: for i0 < 4, i1 < 10: buf2[...] = exp(sub(load(in0, ((i0 * 10) + i1)), load(buf1, i0)))
  kernel2: for i0 < 4: buf3[...] = sum(for r0 < 10: load(buf2, ((i0 * 10) + r0)))
  kernel3: for i0 < 4, i1 < 10: buf4[...] = truediv(load(buf2, ((i0 * 10) + i1)), load(buf3, i0))
return buf4""")
        compiled = triton_compile.compile_graph(gm, [torch.randn(4, 10)])
        self.assertExpectedInline(kernel_function(compiled.kernel_sources[0]), """\
@triton.jit
def tj_3c91b5632add19e5bdad(buf0_ptr, buf1_ptr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0).to(tl.int32) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < 4
    i0 = xindex
    rbase = tl.arange(0, RBLOCK)[None, :]
    # step1: buf2
    rindex = rbase
    rmask = rindex < 10
    r0 = rindex
    tmp0 = tl.load(buf0_ptr + ((xindex * 10 + rindex)), xmask & rmask)
    tmp1 = tl.where(xmask & rmask, tmp0, -float('inf'))
    tmp2 = tl.reduce(tmp1, 1, _maximum_propagating_nan)[:, None]
    # step2: buf3
    rindex = rbase
    rmask = rindex < 10
    i1 = rindex
    tmp3 = (tmp0) - (tmp2)
    tmp4 = tl.exp(tmp3)
    # step3: buf4
    rindex = rbase
    rmask = rindex < 10
    r0 = rindex
    tmp5 = tl.where(xmask & rmask, tmp4, 0)
    tmp6 = tl.sum(tmp5, 1)[:, None]
    # step4: buf1
    rindex = rbase
    rmask = rindex < 10
    i1 = rindex
    tmp7 = (tmp4) / (tmp6)
    tl.store(buf1_ptr + ((xindex * 10 + rindex)), tmp7, xmask & rmask)
""")

    def test_pointwise_with_broadcast_kernel(self):
        x, y = torch.randn(6, 5), torch.randn(5)
        gm, program = lower(lambda x, y: torch.where(x > y, x * y, x - 1.5), x, y)
        self.assertExpectedInline(str(program), """\
in0: input float32[6, 5] strides=[5, 1]
in1: input float32[5] strides=[1]
buf2: temp float32[6, 5] strides=[5, 1]
kernel0: for i0 < 6, i1 < 5: buf2[...] = where(gt(load(in0, ((i0 * 5) + i1)), load(in1, i1)), mul(load(in0, ((i0 * 5) + i1)), load(in1, i1)), sub(load(in0, ((i0 * 5) + i1)), constant(1.5, float32)))
return buf2""")
        compiled = triton_compile.compile_graph(gm, [x, y])
        self.assertExpectedInline(kernel_function(compiled.kernel_sources[0]), """\
@triton.jit
def tj_b972eacc308d9eeb2efc(buf0_ptr, buf1_ptr, buf2_ptr, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0).to(tl.int32) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 30
    i0 = (xindex // 5)
    i1 = xindex % 5
    tmp0 = tl.load(buf0_ptr + (xindex), xmask)
    tmp1 = tl.load(buf1_ptr + (i1), xmask)
    tmp2 = (tmp0) > (tmp1)
    tmp3 = (tmp0) * (tmp1)
    tmp4 = (tmp0) - (tl.full([1], 1.5, tl.float32))
    tmp5 = tl.where(tmp2, tmp3, tmp4)
    tl.store(buf2_ptr + (xindex), tmp5, xmask)
""")
