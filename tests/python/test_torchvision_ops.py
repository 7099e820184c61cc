"""torchvision's C++ operators on plugflow's kernels (torch.ops.torchvision.nms, roi_align,
roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d, reached through torch.ops.load_library on
torchvision's own library) and torch.linalg.lstsq, against PyTorch 1.13 and torchvision 0.14's C++
kernels on random inputs."""

import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision  # noqa: F401  (registers torch.ops.torchvision in PyTorch)
from torchvision.extension import _get_extension_path

import plugflow as pf
from helpers import from_torch, seeded_rng, tensor_pair, to_torch

pf.ops.load_library(_get_extension_path("_C"))
TV = pf.ops.torchvision


def random_boxes(rng, n, size=20.0, dtype="float32", degenerate=0.0):
    """(n, 4) boxes (x1, y1, x2, y2) in a size x size image; a fraction `degenerate` have zero or
    negative width or height."""
    xy = rng.uniform(0, size, (n, 2))
    wh = rng.uniform(0.5, size / 2, (n, 2))
    flip = rng.random(n) < degenerate
    wh[flip] *= rng.choice([0.0, -1.0], (int(flip.sum()), 1))
    return np.concatenate([xy, xy + wh], axis=1).astype(dtype)


# ---- nms -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 7, 60, 300])
def test_nms_matches_torchvision(dtype, n):
    rng = seeded_rng()
    for threshold in (0.0, 0.3, 0.5, 0.7, 1.0):
        boxes = random_boxes(rng, n, dtype=dtype, degenerate=0.1)
        # scores with ties (a few distinct values) and exact duplicate boxes
        scores = rng.integers(0, 5, n).astype(dtype) if n % 2 else rng.random(n).astype(dtype)
        if n > 3:
            boxes[1] = boxes[0]
            scores[1] = scores[0]
        b_p, b_t = tensor_pair(boxes)
        s_p, s_t = tensor_pair(scores)
        want = torch.ops.torchvision.nms(b_t, s_t, threshold)
        got = TV.nms(b_p, s_p, threshold)
        assert got.dtype is pf.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_nms_non_contiguous_and_batched_nms():
    rng = seeded_rng()
    boxes = random_boxes(rng, 80, dtype="float64")
    b_p, b_t = tensor_pair(boxes, layout="transposed")
    s_p, s_t = tensor_pair(rng.random(80), layout="strided")
    np.testing.assert_array_equal(TV.nms(b_p, s_p, 0.4).numpy(), torch.ops.torchvision.nms(b_t, s_t, 0.4).numpy())
    # batched_nms through torchvision's Python code on each framework (coordinate trick)
    idxs = rng.integers(0, 4, 80)
    want = torchvision.ops.batched_nms(b_t, s_t, torch.from_numpy(idxs), 0.5)
    # plugflow's run of the same Python: offsets per class, then nms
    offsets = pf.from_numpy(idxs).to(b_p.dtype) * (b_p.max() + 1)
    got = TV.nms(b_p + offsets[:, None], s_p, 0.5)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_nms_bad_input_raises():
    b = pf.zeros(3, 4)
    with pytest.raises(RuntimeError, match="boxes should be a 2d tensor"):
        TV.nms(pf.zeros(3), pf.zeros(3), 0.5)
    with pytest.raises(RuntimeError, match="boxes should have 4 elements in dimension 1"):
        TV.nms(pf.zeros(3, 5), pf.zeros(3), 0.5)
    with pytest.raises(RuntimeError, match="boxes and scores should have same number of elements"):
        TV.nms(b, pf.zeros(4), 0.5)
    with pytest.raises(RuntimeError, match="dets should have the same type as scores"):
        TV.nms(b, pf.zeros(3, dtype=pf.float64), 0.5)


# ---- roi_align / roi_pool ----------------------------------------------------------------------------

def random_rois(rng, k, batch, height, width, scale, dtype):
    """(k, 5) rois (batch index, x1, y1, x2, y2) in input coordinates (feature map / scale),
    some reaching outside the image and some empty or inverted."""
    boxes = random_boxes(rng, k, size=max(height, width) / scale, dtype="float64", degenerate=0.15)
    boxes += rng.uniform(-3, 3, (k, 1)) / scale  # some outside the image
    index = rng.integers(0, batch, (k, 1)).astype("float64")
    return np.concatenate([index, boxes], axis=1).astype(dtype)


def roi_case(rng, dtype, layout):
    batch, channels = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    height, width = int(rng.integers(1, 14)), int(rng.integers(1, 14))  # odd sizes included
    scale = float(rng.choice([1.0, 0.5, 0.25, 1 / 16]))
    x_p, x_t = tensor_pair(rng.standard_normal((batch, channels, height, width)).astype(dtype), layout, grad=True)
    rois = random_rois(rng, int(rng.integers(0, 9)), batch, height, width, scale, dtype)
    r_p, r_t = tensor_pair(rois, layout="transposed" if layout != "contiguous" else "contiguous")
    pooled = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    return x_p, x_t, r_p, r_t, scale, pooled


def compare_with_grads(out_p, out_t, x_p, x_t, rng, rtol, atol):
    np.testing.assert_allclose(out_p.detach().numpy(), out_t.detach().numpy(), rtol=rtol, atol=atol)
    g = rng.standard_normal(tuple(out_t.shape)).astype(str(out_t.dtype).split(".")[-1])
    g_p, g_t = tensor_pair(g, layout="strided")  # a non-contiguous upstream gradient
    out_t.backward(g_t)
    out_p.backward(g_p)
    np.testing.assert_allclose(x_p.grad.numpy(), x_t.grad.numpy(), rtol=rtol, atol=atol)


TOL = {"float32": (1e-6, 1e-6), "float64": (1e-13, 1e-13)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_matches_torchvision(dtype, layout, aligned):
    rng = seeded_rng()
    for case in range(12):
        x_p, x_t, r_p, r_t, scale, pooled = roi_case(rng, dtype, layout)
        sampling_ratio = int(rng.choice([-1, 0, 1, 2, 3]))
        out_t = torch.ops.torchvision.roi_align(x_t, r_t, scale, *pooled, sampling_ratio, aligned)
        out_p = TV.roi_align(x_p, r_p, scale, *pooled, sampling_ratio, aligned)
        compare_with_grads(out_p, out_t, x_p, x_t, rng, *TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_roi_pool_matches_torchvision(dtype, layout):
    rng = seeded_rng()
    for case in range(16):
        x_p, x_t, r_p, r_t, scale, pooled = roi_case(rng, dtype, layout)
        out_t, argmax_t = torch.ops.torchvision.roi_pool(x_t, r_t, scale, *pooled)
        out_p, argmax_p = TV.roi_pool(x_p, r_p, scale, *pooled)
        assert argmax_p.dtype is pf.int32
        np.testing.assert_array_equal(argmax_p.numpy(), argmax_t.numpy())
        compare_with_grads(out_p, out_t, x_p, x_t, rng, *TOL[dtype])


def test_roi_ops_through_torchvision_python_wrappers_match():
    """torchvision.ops.roi_align / RoIPool take a list of per-image boxes too."""
    rng = seeded_rng()
    x_p, x_t = tensor_pair(rng.standard_normal((2, 3, 9, 11)).astype("float32"))
    boxes = [random_boxes(rng, 4, size=9.0), random_boxes(rng, 2, size=9.0)]
    rois = np.concatenate([np.concatenate([np.full((len(b), 1), i, "float32"), b], 1) for i, b in enumerate(boxes)])
    want = torchvision.ops.roi_align(x_t, [torch.from_numpy(b) for b in boxes], (3, 2), 0.5, 2, True)
    got = TV.roi_align(x_p, pf.from_numpy(rois), 0.5, 3, 2, 2, True)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_roi_ops_bad_input_raises():
    x = pf.zeros(2, 3, 5, 5)
    with pytest.raises(IndexError, match=r"rois\[1, 0\] = 2 is not a batch index of an input with 2 images"):
        TV.roi_align(x, pf.tensor([[0, 0, 0, 1, 1], [2, 0, 0, 1, 1.]]), 1.0, 2, 2, -1, False)
    with pytest.raises(IndexError, match="is not a batch index"):
        TV.roi_pool(x, pf.tensor([[-1, 0, 0, 1, 1.]]), 1.0, 2, 2)
    with pytest.raises(IndexError, match="is not a batch index"):
        TV.roi_align(x, pf.tensor([[float("nan"), 0, 0, 1, 1.]]), 1.0, 2, 2, -1, False)
    with pytest.raises(RuntimeError, match="is not a finite coordinate"):
        TV.roi_align(x, pf.tensor([[0, 0, float("inf"), 1, 1.]]), 1.0, 2, 2, -1, True)
    with pytest.raises(RuntimeError, match=r"rois must have shape as Tensor\[K, 5\]"):
        TV.roi_align(x, pf.zeros(3, 4), 1.0, 2, 2, -1, False)
    with pytest.raises(RuntimeError, match="to have the same type as tensor for argument #2 'rois'"):
        TV.roi_pool(x, pf.zeros(1, 5, dtype=pf.float64), 1.0, 2, 2)
    with pytest.raises(RuntimeError, match="too large"):
        TV.roi_align(x, pf.tensor([[0, 0, 0, 1e30, 1e30]]), 1.0, 2, 2, 0, False)
    with pytest.raises(RuntimeError, match="spatial_scale must be finite"):
        TV.roi_pool(x, pf.tensor([[0, 0, 0, 1, 1.]]), float("inf"), 2, 2)
    # a roi whose extent overflows float32 to infinity samples nothing (no out-of-bounds read)
    out = TV.roi_align(x, pf.tensor([[0, -3e38, -3e38, 3e38, 3e38]]), 10.0, 2, 2, 2, False)
    assert out.shape == (1, 3, 2, 2)
    # an image of no pixels reads as zeros (torchvision reads out of bounds)
    for shape in ((1, 2, 0, 5), (1, 2, 0, 0)):
        out = TV.roi_align(pf.zeros(shape), pf.tensor([[0, 0, 0, 3, 3.]]), 1.0, 2, 2, 2, False)
        np.testing.assert_array_equal(out.numpy(), np.zeros((1, 2, 2, 2)))
    # backward through a roi op cannot be differentiated again (torchvision's error)
    x = pf.ones(1, 1, 4, 4, requires_grad=True)
    out = TV.roi_align(x, pf.tensor([[0, 0, 0, 3, 3.]]), 1.0, 2, 2, 2, False)
    v = pf.ones(out.shape, requires_grad=True)
    (g,) = pf.autograd.grad(out, x, v, create_graph=True)
    with pytest.raises(RuntimeError, match="double backwards on roi_align not supported"):
        g.sum().backward()


def test_unknown_torchvision_ops_and_libraries_raise():
    with pytest.raises(AttributeError, match="torchvision::_roi_align_backward"):
        TV._roi_align_backward
    with pytest.raises(OSError, match=r"cannot load PyTorch C\+\+ extensions"):
        pf.ops.load_library(_get_extension_path("image"))


def directional_derivative_matches(f, inputs, grads, rng, eps=1e-6, rtol=1e-6, atol=1e-8):
    """gradcheck along a random direction (float64): <grads, v> against the central difference
    of sum(f(inputs) * w) for a random w (the same w gave grads by backward)."""
    v = [rng.standard_normal(tuple(x.shape)) for x in inputs]

    def at(sign):
        moved = [pf.from_numpy(x.detach().numpy() + sign * eps * d) for x, d in zip(inputs, v)]
        return f(*moved).numpy()

    numeric = (at(1) - at(-1)) / (2 * eps)
    analytic = sum(float((g.numpy() * d).sum()) for g, d in zip(grads, v))
    return numeric, analytic


# ---- ps_roi_align / ps_roi_pool ------------------------------------------------------------------------

def ps_roi_case(rng, dtype, layout):
    """As roi_case, with input channels a multiple of the output's bins."""
    batch = int(rng.integers(1, 4))
    pooled = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    channels = int(rng.integers(1, 4)) * pooled[0] * pooled[1]
    height, width = int(rng.integers(1, 14)), int(rng.integers(1, 14))
    scale = float(rng.choice([1.0, 0.5, 0.25, 1 / 16]))
    x_p, x_t = tensor_pair(rng.standard_normal((batch, channels, height, width)).astype(dtype), layout, grad=True)
    rois = random_rois(rng, int(rng.integers(0, 9)), batch, height, width, scale, dtype)
    r_p, r_t = tensor_pair(rois, layout="transposed" if layout != "contiguous" else "contiguous")
    return x_p, x_t, r_p, r_t, scale, pooled


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_ps_roi_align_matches_torchvision(dtype, layout):
    rng = seeded_rng()
    for case in range(12):
        x_p, x_t, r_p, r_t, scale, pooled = ps_roi_case(rng, dtype, layout)
        sampling_ratio = int(rng.choice([-1, 0, 1, 2, 3]))
        out_t, mapping_t = torch.ops.torchvision.ps_roi_align(x_t, r_t, scale, *pooled, sampling_ratio)
        out_p, mapping_p = TV.ps_roi_align(x_p, r_p, scale, *pooled, sampling_ratio)
        assert mapping_p.dtype is pf.int32
        np.testing.assert_array_equal(mapping_p.numpy(), mapping_t.numpy())
        # an empty roi with an adaptive grid averages no samples: NaN, in both
        compare_with_grads(out_p, out_t, x_p, x_t, rng, *TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_ps_roi_pool_matches_torchvision(dtype, layout):
    rng = seeded_rng()
    for case in range(16):
        x_p, x_t, r_p, r_t, scale, pooled = ps_roi_case(rng, dtype, layout)
        out_t, mapping_t = torch.ops.torchvision.ps_roi_pool(x_t, r_t, scale, *pooled)
        out_p, mapping_p = TV.ps_roi_pool(x_p, r_p, scale, *pooled)
        assert mapping_p.dtype is pf.int32
        np.testing.assert_array_equal(mapping_p.numpy(), mapping_t.numpy())
        compare_with_grads(out_p, out_t, x_p, x_t, rng, *TOL[dtype])


@pytest.mark.parametrize("op", ["ps_roi_align", "ps_roi_pool"])
def test_ps_roi_gradient_is_the_derivative(op):
    """float64 finite differences of the forward agree with the backward op. For ps_roi_pool the
    rois stay clear of the last row and column, which torchvision's forward never pools and its
    backward does (docs/kernels.md)."""
    rng = seeded_rng()
    for extra in ((2,), (0,)) if op == "ps_roi_align" else ((),):
        x = pf.from_numpy(rng.standard_normal((2, 8, 9, 9))).requires_grad_()
        boxes = random_boxes(rng, 5, size=4.0, dtype="float64")  # x2, y2 < 6 < 9 - 1
        rois = pf.from_numpy(np.concatenate([rng.integers(0, 2, (5, 1)).astype("float64"), boxes], axis=1))
        out, _ = getattr(TV, op)(x, rois, 1.0, 2, 2, *extra)
        w = rng.standard_normal(tuple(out.shape))
        out.backward(pf.from_numpy(w))
        numeric, analytic = directional_derivative_matches(
            lambda x: getattr(TV, op)(x, rois, 1.0, 2, 2, *extra)[0] * pf.from_numpy(w), [x], [x.grad], rng)
        np.testing.assert_allclose(numeric.sum(), analytic, rtol=1e-7, atol=1e-9)


def test_ps_roi_ops_through_torchvision_python_wrappers_match():
    rng = seeded_rng()
    x_p, x_t = tensor_pair(rng.standard_normal((2, 12, 9, 11)).astype("float32"))
    boxes = [random_boxes(rng, 4, size=9.0), random_boxes(rng, 2, size=9.0)]
    rois = np.concatenate([np.concatenate([np.full((len(b), 1), i, "float32"), b], 1) for i, b in enumerate(boxes)])
    want = torchvision.ops.ps_roi_align(x_t, [torch.from_numpy(b) for b in boxes], (3, 2), 0.5, 2)
    got, _ = TV.ps_roi_align(x_p, pf.from_numpy(rois), 0.5, 3, 2, 2)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    want = torchvision.ops.PSRoIPool(2, 0.5)(x_t[:, :8], [torch.from_numpy(b) for b in boxes])
    got, _ = TV.ps_roi_pool(x_p[:, :8], pf.from_numpy(rois), 0.5, 2, 2)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_ps_roi_ops_bad_input_raises():
    x = pf.zeros(2, 8, 5, 5)
    for op, extra in ((TV.ps_roi_align, (-1,)), (TV.ps_roi_pool, ())):
        with pytest.raises(IndexError, match=r"rois\[1, 0\] = 2 is not a batch index of an input with 2 images"):
            op(x, pf.tensor([[0, 0, 0, 1, 1], [2, 0, 0, 1, 1.]]), 1.0, 2, 2, *extra)
        with pytest.raises(IndexError, match="is not a batch index"):
            op(x, pf.tensor([[-1, 0, 0, 1, 1.]]), 1.0, 2, 2, *extra)
        with pytest.raises(RuntimeError, match="is not a finite coordinate"):
            op(x, pf.tensor([[0, 0, float("nan"), 1, 1.]]), 1.0, 2, 2, *extra)
        with pytest.raises(RuntimeError, match="input channels must be a multiple of pooling height \\* pooling width"):
            op(x, pf.tensor([[0, 0, 0, 1, 1.]]), 1.0, 3, 1, *extra)
        with pytest.raises(RuntimeError, match="output size must be positive"):
            op(x, pf.tensor([[0, 0, 0, 1, 1.]]), 1.0, 0, 2, *extra)
        with pytest.raises(RuntimeError, match=r"rois must have shape as Tensor\[K, 5\]"):
            op(x, pf.zeros(3, 4), 1.0, 2, 2, *extra)
        with pytest.raises(RuntimeError, match="to have the same type as tensor for argument #2 'rois'"):
            op(x, pf.zeros(1, 5, dtype=pf.float64), 1.0, 2, 2, *extra)
        with pytest.raises(RuntimeError, match="spatial_scale must be finite"):
            op(x, pf.tensor([[0, 0, 0, 1, 1.]]), float("nan"), 2, 2, *extra)
        # nothing to pool: an empty output, an image of no pixels
        out, mapping = op(x, pf.zeros(0, 5), 1.0, 2, 2, *extra)
        assert out.shape == mapping.shape == (0, 2, 2, 2)
        out, mapping = op(pf.zeros(1, 4, 0, 3), pf.tensor([[0, 0, 0, 1, 1.]]), 1.0, 2, 2, *extra)
        assert out.shape == (1, 1, 2, 2) and mapping.flatten().tolist() == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="is too large a coordinate"):
        TV.ps_roi_pool(x, pf.tensor([[0, 0, 0, 1e30, 1.]]), 1.0, 2, 2)
    with pytest.raises(RuntimeError, match="too large"):
        TV.ps_roi_align(x, pf.tensor([[0, 0, 0, 1e30, 1e30]]), 1.0, 2, 2, 0)
    x = pf.ones(1, 4, 4, 4, requires_grad=True)
    out, _ = TV.ps_roi_pool(x, pf.tensor([[0, 0, 0, 3, 3.]]), 1.0, 2, 2)
    (g,) = pf.autograd.grad(out, x, pf.ones(out.shape, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError, match="double backwards on ps_roi_pool not supported"):
        g.sum().backward()


# ---- deform_conv2d -----------------------------------------------------------------------------------

def deform_case(rng, dtype, batch=None):
    """Random operands of a deform_conv2d: (input, weight, offset, mask or None, bias or None) as
    numpy arrays and the conv's stride, padding, dilation."""
    groups, offset_groups = int(rng.choice([1, 2])), int(rng.choice([1, 2, 3]))
    channels = groups * offset_groups * int(rng.integers(1, 3))
    out_channels = groups * int(rng.integers(1, 4))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    padding = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    height = int(rng.integers(max(1, dilation[0] * (kh - 1) + 1 - 2 * padding[0]), 12))
    width = int(rng.integers(max(1, dilation[1] * (kw - 1) + 1 - 2 * padding[1]), 12))
    out_h = (height + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    n = int(rng.integers(1, 4)) if batch is None else batch
    x = rng.standard_normal((n, channels, height, width))
    weight = rng.standard_normal((out_channels, channels // groups, kh, kw))
    # displacements of a few pixels (reaching outside the image); sometimes all zero, the usual
    # initialization, which puts samples exactly on pixels and on the padding's -1 edge
    offset = rng.standard_normal((n, 2 * offset_groups * kh * kw, out_h, out_w)) * 2 * (rng.random() > 0.2)
    mask = rng.random((n, offset_groups * kh * kw, out_h, out_w)) if rng.random() < 0.6 else None
    bias = rng.standard_normal(out_channels) if rng.random() < 0.6 else None
    arrays = [a if a is None else a.astype(dtype) for a in (x, weight, offset, mask, bias)]
    return arrays, stride, padding, dilation


def run_deform_both(arrays, stride, padding, dilation, layout="contiguous"):
    """deform_conv2d on plugflow (torch.ops.torchvision's signature) and torchvision, with the
    operands as leaves requiring grad: (out_p, out_t, plugflow leaves, torch leaves)."""
    leaves_p, leaves_t = [], []
    for i, a in enumerate(arrays):
        if a is None:
            leaves_p.append(None)
            leaves_t.append(None)
            continue
        p, t = tensor_pair(a, layout if i == 0 else "contiguous", grad=True)
        leaves_p.append(p)
        leaves_t.append(t)
    x_p, w_p, o_p, m_p, b_p = leaves_p
    x_t, w_t, o_t, m_t, b_t = leaves_t
    out_t = torchvision.ops.deform_conv2d(x_t, o_t, w_t, b_t, stride, padding, dilation, m_t)
    kh, kw = arrays[1].shape[2:]
    groups = arrays[0].shape[1] // arrays[1].shape[1]
    offset_groups = arrays[2].shape[1] // (2 * kh * kw)
    zeros_bias = pf.zeros(arrays[1].shape[0], dtype=x_p.dtype)
    out_p = TV.deform_conv2d(x_p, w_p, o_p, m_p if m_p is not None else pf.zeros(x_p.shape[0], 0, dtype=x_p.dtype),
                             b_p if b_p is not None else zeros_bias, *stride, *padding, *dilation, groups,
                             offset_groups, m_p is not None)
    return out_p, out_t, leaves_p, leaves_t


DEFORM_TOL = {"float32": (2e-5, 2e-5), "float64": (1e-11, 1e-11)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_deform_conv2d_matches_torchvision(dtype):
    rng = seeded_rng()
    rtol, atol = DEFORM_TOL[dtype]
    for case in range(16):
        arrays, stride, padding, dilation = deform_case(rng, dtype)
        layout = str(rng.choice(["contiguous", "channels_last", "strided"]))
        out_p, out_t, leaves_p, leaves_t = run_deform_both(arrays, stride, padding, dilation, layout)
        config = f"case {case}: {[None if a is None else a.shape for a in arrays]} {stride} {padding} {dilation}"
        np.testing.assert_allclose(out_p.detach().numpy(), out_t.detach().numpy(), rtol=rtol, atol=atol, err_msg=config)
        g = rng.standard_normal(tuple(out_t.shape)).astype(dtype)
        out_t.backward(torch.from_numpy(g))
        out_p.backward(pf.from_numpy(g))
        for name, p, t in zip(("input", "weight", "offset", "mask", "bias"), leaves_p, leaves_t):
            if t is None:
                continue
            # gradients sum more products (a GEMM, then over channels and taps)
            np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol * 10,
                                       err_msg=f"{name} gradient, {config}")


def test_deform_conv2d_gradients_are_the_derivative():
    """float64 finite differences along random directions in every operand (offsets away from
    the pixel grid, where the bilinear samples are smooth)."""
    rng = seeded_rng()
    for case in range(4):
        arrays, stride, padding, dilation = deform_case(rng, "float64")
        # Samples sit at integer grid positions plus the offsets: offsets whose fractional parts
        # lie in [0.2, 0.8] keep every sample (and its central differences) off the integer
        # coordinates where bilinear interpolation has kinks (+0.3 alone did not: seed
        # 279410204100811436294703975428945411276 crossed one, 0.5% off).
        offsets = arrays[2]
        arrays[2] = np.floor(offsets) + rng.uniform(0.2, 0.8, offsets.shape).astype(offsets.dtype)
        out_p, _, leaves_p, _ = run_deform_both(arrays, stride, padding, dilation)
        w = rng.standard_normal(tuple(out_p.shape))
        out_p.backward(pf.from_numpy(w))
        present = [i for i, leaf in enumerate(leaves_p) if leaf is not None]

        def f(*operands):
            full = list(arrays)
            for i, t in zip(present, operands):
                full[i] = t.numpy()
            return run_deform_both(full, stride, padding, dilation)[0].detach() * pf.from_numpy(w)

        numeric, analytic = directional_derivative_matches(
            f, [leaves_p[i] for i in present], [leaves_p[i].grad for i in present], rng)
        np.testing.assert_allclose(numeric.sum(), analytic, rtol=1e-6, atol=1e-8)


def test_deform_conv2d_empty_batch_and_channels():
    rng = seeded_rng()
    arrays, stride, padding, dilation = deform_case(rng, "float64", batch=0)
    out_p, out_t, leaves_p, leaves_t = run_deform_both(arrays, stride, padding, dilation)
    assert tuple(out_p.shape) == tuple(out_t.shape)
    out_p.sum().backward()
    out_t.sum().backward()
    for p, t in zip(leaves_p, leaves_t):
        if t is not None:
            assert tuple(p.grad.shape) == tuple(t.grad.shape)
            np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
    # an image of no pixels, padded: every sample reads 0, the output is the bias
    x = pf.zeros(2, 3, 0, 0)
    out = TV.deform_conv2d(x, pf.ones(4, 3, 1, 1), pf.zeros(2, 2, 2, 2), pf.zeros(2, 0), pf.arange(4.), 1, 1, 1, 1,
                           1, 1, 1, 1, False)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(np.arange(4.)[None, :, None, None], (2, 4, 2, 2)))


def test_deform_conv2d_bad_input_raises():
    x, w = pf.zeros(2, 4, 5, 5), pf.zeros(6, 2, 3, 3)
    offset, mask, bias = pf.zeros(2, 18, 3, 3), pf.zeros(2, 9, 3, 3), pf.zeros(6)

    def call(x=x, w=w, offset=offset, mask=mask, bias=bias, stride=1, pad=0, dil=1, groups=2, offset_groups=1,
             use_mask=True):
        return TV.deform_conv2d(x, w, offset, mask, bias, stride, stride, pad, pad, dil, dil, groups, offset_groups,
                                use_mask)

    assert call().shape == (2, 6, 3, 3)
    with pytest.raises(RuntimeError, match="offset.shape\\[1\\] is not valid: got: 18 expected: 36"):
        call(offset_groups=2, mask=pf.zeros(2, 18, 3, 3))
    with pytest.raises(RuntimeError, match="mask.shape\\[1\\] is not valid: got: 8 expected: 9"):
        call(mask=pf.zeros(2, 8, 3, 3))
    with pytest.raises(RuntimeError, match="invalid batch size of offset"):
        call(offset=pf.zeros(1, 18, 3, 3))
    with pytest.raises(RuntimeError, match="invalid batch size of mask"):
        call(mask=pf.zeros(1, 9, 3, 3))
    with pytest.raises(RuntimeError, match=r"offset output dims: \(4, 3\) - computed output dims: \(3, 3\)"):
        call(offset=pf.zeros(2, 18, 4, 3))
    with pytest.raises(RuntimeError, match=r"mask output dims: \(3, 2\)"):
        call(mask=pf.zeros(2, 9, 3, 2))
    with pytest.raises(RuntimeError, match="expects 6 input channels, got 4"):
        call(groups=3)
    with pytest.raises(RuntimeError, match="6 output channels are not divisible by 4 groups"):
        call(x=pf.zeros(2, 8, 5, 5), groups=4)
    with pytest.raises(RuntimeError, match="4 input channels are not divisible by 3 offset groups"):
        call(offset_groups=3, offset=pf.zeros(2, 54, 3, 3), mask=pf.zeros(2, 27, 3, 3))
    with pytest.raises(RuntimeError, match="Calculated output size too small"):
        call(x=pf.zeros(2, 4, 1, 1), offset=pf.zeros(2, 18, 0, 0), mask=pf.zeros(2, 9, 0, 0), stride=2)
    with pytest.raises(RuntimeError, match="pad_h: -1 pad_w: -1"):
        call(pad=-1)
    with pytest.raises(RuntimeError, match="stride_h: 0 stride_w: 0"):
        call(stride=0)
    with pytest.raises(RuntimeError, match="dilation_h: 0 dilation_w: 0"):
        call(dil=0)
    with pytest.raises(RuntimeError, match="groups and offset groups must be positive"):
        call(offset_groups=0)
    with pytest.raises(RuntimeError, match="bias must have shape \\[6\\]"):
        call(bias=pf.zeros(5))
    with pytest.raises(RuntimeError, match="expected offset of the input's type"):
        call(offset=offset.double())
    with pytest.raises(RuntimeError, match="expected bias of the input's type"):
        call(bias=bias.double(), use_mask=False)
    with pytest.raises(RuntimeError, match="expected a 4-d offset"):
        call(offset=pf.zeros(2, 18, 9))
    with pytest.raises(RuntimeError, match="integer overflow"):
        call(pad=2**62)
    # the backward cannot be differentiated again (torchvision's error)
    x = pf.ones(1, 4, 5, 5, requires_grad=True)
    out = call(x=x, mask=pf.ones(1, 9, 3, 3), offset=pf.zeros(1, 18, 3, 3), w=pf.ones(6, 2, 3, 3))
    (g,) = pf.autograd.grad(out, x, pf.ones(out.shape, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError, match="double backwards on deform_conv2d not supported"):
        g.sum().backward()


# ---- linalg.lstsq ------------------------------------------------------------------------------------

def lstsq_case(rng, shape_a, shape_b, dtype, cond=None):
    a = rng.standard_normal(shape_a)
    if cond is not None:  # singular values spread over `cond` orders of magnitude
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        s = np.logspace(0, -cond, min(shape_a[-2:]))
        a = (u * s[..., None, :]) @ vt
    return tensor_pair(a.astype(dtype), grad=True), tensor_pair(rng.standard_normal(shape_b).astype(dtype), grad=True)


@pytest.mark.parametrize("driver", [None, "gelsy", "gelsd", "gelss", "gels"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstsq_matches_pytorch(driver, dtype):
    rng = seeded_rng()
    eps = np.finfo(dtype).eps
    cases = [((6, 3), (6, 2)), ((3, 6), (3, 2)), ((4, 4), (4, 1)), ((5, 3), (5,)), ((2, 5, 3), (2, 5, 4)),
             ((3, 1, 5, 2), (1, 4, 5, 3)), ((2, 6, 4), (2, 6)), ((0, 5, 3), (0, 5, 2)), ((4, 5, 3), (1, 5, 2))]
    for shape_a, shape_b in cases:
        (a_p, a_t), (b_p, b_t) = lstsq_case(rng, shape_a, shape_b, dtype)
        # Rounding errors grow with A's condition number (a random square matrix reaches 1e3 in
        # about 1% of draws), the gradients' with its square.
        cond = float(np.max(np.linalg.cond(a_t.detach().double().numpy()), initial=1.0))
        rtol = atol = max(1e-4 if dtype == "float32" else 1e-10, 100 * eps * cond)
        grad_tol = max(10 * rtol, 100 * eps * cond ** 2)
        want = torch.linalg.lstsq(a_t, b_t, driver=driver)
        got = pf.linalg.lstsq(a_p, b_p, driver=driver)
        for field in ("solution", "residuals", "rank", "singular_values"):
            w, g = getattr(want, field), getattr(got, field)
            assert tuple(g.shape) == tuple(w.shape), (shape_a, shape_b, field, g.shape, w.shape)
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"{shape_a} {shape_b} {field}")
        if want.solution.numel() == 0:
            continue
        # PyTorch 1.13's backward fails for a vector right-hand side (a dimension error inside its
        # formula): the reference gradient is that of the same system with B as one column
        vector = len(shape_b) == len(shape_a) - 1
        ref = torch.linalg.lstsq(a_t, b_t.unsqueeze(-1) if vector else b_t, driver=driver).solution
        gx = rng.standard_normal(tuple(want.solution.shape)).astype(dtype)
        (ref.squeeze(-1) if vector else ref).backward(torch.from_numpy(gx))
        got.solution.backward(pf.from_numpy(gx))
        np.testing.assert_allclose(a_p.grad.numpy(), a_t.grad.numpy(), rtol=grad_tol, atol=grad_tol)
        np.testing.assert_allclose(b_p.grad.numpy(), b_t.grad.numpy(), rtol=grad_tol, atol=grad_tol)


@pytest.mark.parametrize("cond", [2, 6])
def test_lstsq_ill_conditioned_and_rank_deficient(cond):
    rng = seeded_rng()
    (a_p, a_t), (b_p, b_t) = lstsq_case(rng, (3, 8, 5), (3, 8, 2), "float64", cond=cond)
    for driver in ("gelsy", "gelsd", "gelss"):
        want = torch.linalg.lstsq(a_t, b_t, driver=driver)
        got = pf.linalg.lstsq(a_p, b_p, driver=driver)
        np.testing.assert_allclose(got.solution.detach().numpy(), want.solution.detach().numpy(), rtol=1e-8,
                                   atol=1e-8 * 10**cond)
        np.testing.assert_array_equal(got.rank.numpy(), want.rank.numpy())
    # an exactly rank-deficient matrix: rank and the minimum-norm solution; rcond decides the rank
    a = rng.standard_normal((7, 4))
    a[:, 3] = a[:, 0] - a[:, 1]
    b = rng.standard_normal((7, 3))
    for driver in ("gelsy", "gelsd"):
        for rcond in (None, 1e-3):
            want = torch.linalg.lstsq(torch.from_numpy(a), torch.from_numpy(b), rcond, driver=driver)
            got = pf.linalg.lstsq(pf.from_numpy(a), pf.from_numpy(b), rcond, driver=driver)
            assert int(got.rank) == int(want.rank) == 3
            np.testing.assert_allclose(got.solution.numpy(), want.solution.numpy(), rtol=1e-9, atol=1e-9)
            assert got.residuals.numel() == want.residuals.numel() == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstsq_gels_without_full_rank_raises_linalg_error(dtype):
    """'gels' on a matrix with an exactly zero column (tall) or row (wide) at a random place of a
    random batch: PyTorch's LinAlgError (a RuntimeError) and message, which names the batch
    element only when there are several; the rank-revealing drivers solve the same system.
    (At least 2 rows and columns: LAPACK's gels returns X = 0 for an all-zero matrix.)"""
    rng = seeded_rng()
    assert issubclass(pf.linalg.LinAlgError, RuntimeError)
    for batch in [(), (1,), (3,), (2, 2)]:
        m, n = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        a = rng.standard_normal(batch + (m, n)).astype(dtype)
        b = rng.standard_normal(batch + (m, 2)).astype(dtype)
        flat = a.reshape(-1, m, n)
        element = int(rng.integers(0, flat.shape[0]))
        if m >= n:
            flat[element, :, rng.integers(0, n)] = 0
        else:
            flat[element, rng.integers(0, m), :] = 0
        with pytest.raises(torch.linalg.LinAlgError) as want:
            torch.linalg.lstsq(torch.from_numpy(a), torch.from_numpy(b), driver="gels")
        with pytest.raises(pf.linalg.LinAlgError) as got:
            pf.linalg.lstsq(pf.from_numpy(a), pf.from_numpy(b), driver="gels")
        assert str(got.value) == str(want.value)
        for driver in ("gelsy", "gelsd", "gelss"):
            pf.linalg.lstsq(pf.from_numpy(a), pf.from_numpy(b), driver=driver)


def test_lstsq_bad_input_raises():
    with pytest.raises(RuntimeError, match="input must have at least 2 dimensions"):
        pf.linalg.lstsq(pf.zeros(3), pf.zeros(3))
    with pytest.raises(RuntimeError, match=r"input.size\(-2\) should match other.size\(-1\)"):
        pf.linalg.lstsq(pf.zeros(3, 3), pf.zeros(4))
    with pytest.raises(RuntimeError, match=r"input.size\(-2\) should match other.size\(-2\)"):
        pf.linalg.lstsq(pf.zeros(3, 3), pf.zeros(4, 2))
    with pytest.raises(RuntimeError, match="should be one of"):
        pf.linalg.lstsq(pf.zeros(3, 3), pf.zeros(3, 3), driver="foo")
    with pytest.raises(RuntimeError, match="Expected input and other to have the same dtype"):
        pf.linalg.lstsq(pf.zeros(3, 3), pf.zeros(3, 3, dtype=pf.float64))
    a = pf.ones(5, 3)
    a[:, 2] = 0
    with pytest.raises(RuntimeError, match="does not have full rank"):
        pf.linalg.lstsq(a, pf.ones(5, 2), driver="gels")


# ---- through torchvision under mock_torch --------------------------------------------------------------

PERSPECTIVE = """
import numpy as np
import torch
from torchvision.transforms import functional as F
from torchvision.transforms import InterpolationMode


def perspective_outputs(seed):
    rng = np.random.default_rng(seed)
    img = torch.from_numpy(rng.random((3, 17, 23)))
    out = {}
    for i in range(4):
        start = [[0, 0], [22, 0], [22, 16], [0, 16]]
        end = [[int(x + d), int(y + e)] for (x, y), (d, e) in zip(start, rng.integers(-4, 5, (4, 2)))]
        for mode in (InterpolationMode.BILINEAR, InterpolationMode.NEAREST):
            out[f"{i}.{mode.value}"] = F.perspective(img, start, end, mode, fill=[0.5, 0.25, 0.0]).numpy()
        out[f"{i}.coeffs"] = np.array(F._get_perspective_coeffs(start, end))
    return out
"""


def test_transforms_perspective_matches_pytorch(tmp_path):
    """perspective solves for its coefficients with torch.linalg.lstsq (driver gels), then samples
    with grid_sample: PyTorch here, plugflow under mock_torch in a subprocess."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed: {seed}")
    namespace = {}
    exec(PERSPECTIVE, namespace)
    want = namespace["perspective_outputs"](seed)
    path = tmp_path / "plugflow.npy"
    code = ("import plugflow.mock_torch\nplugflow.mock_torch.enable()\n" + PERSPECTIVE +
            f"np.save({str(path)!r}, perspective_outputs({seed}), allow_pickle=True)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    got = np.load(path, allow_pickle=True).item()
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=1e-12, err_msg=key)


MOCK_OPS = """
import numpy as np
import torch, torchvision
from torchvision import ops


def vision_op_outputs(inputs):
    x, rois, dx, doffset, dmask = (torch.from_numpy(inputs[k]) for k in ("x", "rois", "dx", "doffset", "dmask"))
    out = {}
    x.requires_grad_()
    for name, module in (("psalign", ops.PSRoIAlign((2, 3), 0.5, 2)), ("pspool", ops.PSRoIPool(2, 0.5))):
        y = module(x[:, :12] if name == "pspool" else x, rois)
        y.sum().backward()
        out[name] = y.detach().numpy()
        out[name + ".grad"] = x.grad.numpy().copy()
        x.grad = None
    out["psalign_fn"] = ops.ps_roi_align(x, rois, 2, 0.5).detach().numpy()
    conv = ops.DeformConv2d(6, 4, 3, padding=1, groups=2)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(inputs["weight"]))
        conv.bias.copy_(torch.from_numpy(inputs["bias"]))
    dx.requires_grad_()
    y = conv(dx, doffset, dmask)
    y.square().sum().backward()
    out["deform"] = y.detach().numpy()
    out["deform_without_mask"] = conv(dx, doffset).detach().numpy()
    out["deform.grad"] = dx.grad.numpy()
    out["deform.weight.grad"] = conv.weight.grad.numpy()
    return out
"""


def test_torchvision_ops_modules_under_mock_torch(tmp_path):
    """PSRoIAlign, PSRoIPool, ps_roi_align and DeformConv2d (with and without a mask) run under
    mock_torch as in PyTorch: forward and gradients on the same inputs."""
    rng = seeded_rng()
    boxes = random_boxes(rng, 5, size=18.0, dtype="float64")
    inputs = {"x": rng.standard_normal((2, 24, 9, 11)).astype("float32"),
              "rois": np.concatenate([rng.integers(0, 2, (5, 1)), boxes], axis=1).astype("float32"),
              "dx": rng.standard_normal((2, 6, 7, 8)).astype("float32"),
              "doffset": (rng.standard_normal((2, 18, 7, 8)) * 2).astype("float32"),
              "dmask": rng.random((2, 9, 7, 8)).astype("float32"),
              "weight": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
              "bias": rng.standard_normal(4).astype("float32")}
    np.savez(tmp_path / "inputs.npz", **inputs)
    namespace = {}
    exec(MOCK_OPS, namespace)
    want = namespace["vision_op_outputs"](inputs)
    path = tmp_path / "plugflow.npy"
    code = ("import plugflow.mock_torch\nplugflow.mock_torch.enable()\n" + MOCK_OPS +
            f"inputs = dict(np.load({str(tmp_path / 'inputs.npz')!r}))\n"
            f"np.save({str(path)!r}, vision_op_outputs(inputs), allow_pickle=True)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    got = np.load(path, allow_pickle=True).item()
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-4, err_msg=key)


def test_torchvision_finds_its_operators_under_mock_torch():
    code = """
import plugflow.mock_torch
plugflow.mock_torch.enable()
import torch, torchvision
from torchvision import extension
assert extension._has_ops()
boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30.]])
print(torchvision.ops.nms(boxes, torch.tensor([0.5, 0.9, 0.3]), 0.5).tolist())
try:
    torchvision.ops.deform_conv2d(torch.zeros(1, 1, 3, 3), torch.zeros(1, 4, 1, 1), torch.zeros(1, 1, 3, 3))
except RuntimeError as e:
    print("refused:", e)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "[1, 2]"
    # torchvision's own check (its Python code, running on plugflow)
    assert lines[1].startswith("refused: the shape of the offset tensor at dimension 1 is not valid")
