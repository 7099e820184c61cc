"""The CPU plugin's native bfloat16 paths that bf16 graphs run, against PyTorch on random inputs:
max pooling on oneDNN (exact: a maximum needs no rounding), batch norm in bfloat16 with float32
parameters (statistics in double, one rounding per element), and the elementwise loops (relu,
add, casts), on contiguous tensors, non-contiguous views and odd sizes. (The fused bfloat16
batch norm kernels are checked bit for bit against these chains in test_graph_amp.py.)"""

import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_bf16_batch_norm_close, from_torch, seeded_rng, to_torch


# Layouts of an (N, C, H, W) tensor, applied alike to a torch and a plugflow tensor: contiguous,
# channels-last (a permuted dense view) and a strided slice of a larger tensor.
VIEWS = [
    lambda t: t,
    lambda t: t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2),
    lambda t: t.repeat(1, 1, 2, 2)[:, :, ::2, 1::2],
]


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,ceil", [
    ((2, 16, 112, 112), 3, 2, 1, 1, False),   # ResNet's stem pool
    ((1, 7, 33, 29), 3, 2, 1, 1, True),       # odd sizes, ceil mode
    ((3, 5, 20, 17), 2, 2, 0, 1, False),
    ((2, 4, 31, 31), 3, 1, 1, 2, False),      # dilation: the native kernel
])
def test_max_pool2d_bfloat16_matches_torch(shape, kernel, stride, padding, dilation, ceil):
    rng = seeded_rng("PF_BF16_KERNELS_SEED")
    t = torch.from_numpy(rng.standard_normal(shape).astype("float32")).bfloat16()
    for view in VIEWS:
        tv, pv = view(t), view(from_torch(t))
        assert pv.dtype is pf.bfloat16 and pv.stride() == tv.stride()
        out, idx = F.max_pool2d(pv, kernel, stride, padding, dilation, ceil_mode=ceil, return_indices=True)
        eout, eidx = TF.max_pool2d(tv, kernel, stride, padding, dilation, ceil_mode=ceil, return_indices=True)
        assert out.dtype is pf.bfloat16
        assert torch.equal(to_torch(out), eout)
        assert torch.equal(to_torch(idx), eidx)


def test_max_pool2d_bfloat16_nan_and_infinite_windows_match_torch():
    t = torch.randn(1, 2, 64, 64).bfloat16()
    t[0, 0, 5, 7] = float("nan")           # NaN wins its windows (oneDNN would skip it)
    t[0, 1, :4, :4] = float("-inf")        # a window of -inf gives -inf, not the lowest finite value
    t[0, 1, 10, 10] = float("inf")
    for args in [(3, 2, 1), (2, 2, 0)]:
        out, idx = F.max_pool2d(from_torch(t), *args, return_indices=True)
        eout, eidx = TF.max_pool2d(t, *args, return_indices=True)
        assert torch.equal(to_torch(out).isnan(), eout.isnan())
        assert torch.equal(to_torch(out).nan_to_num(), eout.nan_to_num())
        assert torch.equal(to_torch(idx), eidx)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 8, 13, 11), (3, 16, 1, 5), (2, 5, 32, 32)])
def test_batch_norm_bfloat16_input_float32_parameters_matches_torch(training, shape):
    """autocast's mixed batch norm (a bfloat16 convolution output, the module's float32
    parameters), forward and backward, against PyTorch's float64 batch norm of the same values:
    the bfloat16 results within one rounding, the float32 ones (parameter gradients, running
    statistics: sums in double) within float32 rounding."""
    rng = seeded_rng("PF_BF16_KERNELS_SEED")
    c = shape[1]
    x = torch.from_numpy((rng.standard_normal(shape) * 3 + 1).astype("float32")).bfloat16()
    w, b = (torch.from_numpy(rng.standard_normal(c).astype("float32")) for _ in range(2))
    rm, rv = torch.from_numpy(rng.standard_normal(c).astype("float32")), torch.rand(c) + 0.5
    g = torch.from_numpy(rng.standard_normal(shape).astype("float32")).bfloat16()
    for view in [lambda t: t, lambda t: t.transpose(2, 3)]:  # contiguous, and a transposed view
        tx, tw, tb = (v.double().requires_grad_() for v in (x, w, b))
        trm, trv = rm.double(), rv.double()
        ey = TF.batch_norm(view(tx), trm, trv, tw, tb, training=training)
        ey.backward(view(g.double()))
        px, pw, pb = (from_torch(v).requires_grad_() for v in (x, w, b))
        prm, prv = from_torch(rm), from_torch(rv)
        py = F.batch_norm(view(px), prm, prv, pw, pb, training=training)
        py.backward(view(from_torch(g)))
        assert py.dtype is pf.bfloat16 and px.grad.dtype is pf.bfloat16 and pw.grad.dtype is pf.float32
        assert_bf16_batch_norm_close([(py, ey), (px.grad, tx.grad), (pw.grad, tw.grad), (pb.grad, tb.grad),
                                       (prm, trm), (prv, trv)])


@pytest.mark.parametrize("n", [1, 7, 31, 1000, 4099])
def test_bfloat16_elementwise_loops_match_torch(n):
    """relu, add and the float32 <-> bfloat16 casts (the generic elementwise loops, vectorized):
    exact against PyTorch, special values included, on contiguous tensors and strided views."""
    rng = seeded_rng("PF_BF16_KERNELS_SEED")
    a = torch.from_numpy((rng.standard_normal(2 * n) * 100).astype("float32"))
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 3.4e38, -3.4e38, 1e-40, 1.00390625,
                             1.01171875])
    a[: min(len(specials), 2 * n)] = specials[: min(len(specials), 2 * n)]
    b = torch.from_numpy(rng.standard_normal(2 * n).astype("float32")).bfloat16()
    for ta, tb in [(a, b), (a[::2], b[1::2])]:
        pa, pb = from_torch(ta.contiguous()), from_torch(tb.contiguous())
        if not ta.is_contiguous():
            pa, pb = from_torch(a)[::2], from_torch(b)[1::2]
        exact = dict(rtol=0, atol=0, equal_nan=True)
        cast = pa.to(pf.bfloat16)
        torch.testing.assert_close(to_torch(cast), ta.bfloat16(), **exact)
        torch.testing.assert_close(to_torch(cast.float()), ta.bfloat16().float(), **exact)
        torch.testing.assert_close(to_torch(F.relu(cast)), TF.relu(ta.bfloat16()), **exact)
        torch.testing.assert_close(to_torch(cast + pb), ta.bfloat16() + tb, **exact)
