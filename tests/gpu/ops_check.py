"""The GPU check's comparison of the CUDA kernels of ps_roi_align, ps_roi_pool, deform_conv2d
and upsample_bicubic2d with the CPU's (tests/gpu/run.sh): each op on fresh random inputs on the
CPU and on the first CUDA device, its output and the gradients of every differentiable operand
(for a random output gradient) compared. Then conv2d_fused (an nn.Graph's conv + bias + residual
add + relu / silu / none) on cuDNN's fused runtime against the same graph unfused on the device
(the composed ops) and against the CPU, float32 with TF32 off and bfloat16, channels-last and
row-major; a bfloat16 channels-last problem must have run as a cuDNN graph. Exits non-zero on a
mismatch.

Usage: python tests/gpu/ops_check.py [--dry-run]
--dry-run compares the CPU with itself (a check of this script on a machine without GPU; it says
nothing about the CUDA kernels)."""

import sys

import numpy as np

import plugflow as torch

F = torch.nn.functional
nn = torch.nn
DRY = "--dry-run" in sys.argv[1:]
if not DRY:
    assert torch.cuda.is_available(), "plugflow sees no CUDA device"
DEVICE = "cpu" if DRY else "cuda"


def check(name, fn, inputs, grad_of, rtol=1e-5, atol=1e-5):
    """fn(*inputs) on the CPU and on DEVICE: the first output and its gradients with respect to
    inputs[i] for i in grad_of, for one random output gradient, must agree."""
    results, weight = {}, None
    for dev in ("cpu", DEVICE):
        xs = [t.detach().to(dev).clone().requires_grad_(i in grad_of) for i, t in enumerate(inputs)]
        out = fn(*xs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        assert str(out.device).startswith(dev), (name, out.device)
        if weight is None:
            weight = torch.randn(*out.shape).to(out.dtype)
        grads = torch.autograd.grad([out], [xs[i] for i in grad_of], [weight.to(dev)])
        results[dev] = [out.detach().cpu()] + [g.cpu() for g in grads]
    for k, (want, got) in enumerate(zip(results["cpu"], results[DEVICE])):
        what = "output" if k == 0 else f"gradient of operand {grad_of[k - 1]}"
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{name}: {what}")
    print(f"{name}: ok")


# rois (batch index, x1, y1, x2, y2): inside, across the border, malformed (x2 < x1), and larger
# than the map
rois = torch.tensor([[0, 1.0, 1.5, 7.2, 6.1], [1, 0.5, 0.0, 10.0, 8.0], [1, 3.0, 2.0, 2.5, 9.0],
                     [0, -2.0, 3.0, 14.0, 12.0]])
for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
    img = torch.randn(2, 12, 9, 11, dtype=dtype)  # 2 output channels of 2 x 3 bins
    r = rois.to(dtype)
    for scale, sampling in ((1.0, 0), (0.5, 2)):
        check(f"ps_roi_align {dtype} scale {scale} sampling {sampling}",
              lambda x, b: torch._C._ps_roi_align(x, b, scale, 2, 3, sampling), [img, r], [0], tol, tol)
        check(f"ps_roi_pool {dtype} scale {scale}", lambda x, b: torch._C._ps_roi_pool(x, b, scale, 2, 3),
              [img, r], [0], tol, tol)

    # deform_conv2d: groups, offset groups, mask and bias; offsets of a few pixels reach outside
    x = torch.randn(2, 4, 9, 10, dtype=dtype)
    w = torch.randn(6, 2, 3, 3, dtype=dtype)
    off = torch.randn(2, 2 * 2 * 9, 9, 10, dtype=dtype) * 2
    mask = torch.rand(2, 2 * 9, 9, 10, dtype=dtype)
    b = torch.randn(6, dtype=dtype)
    gemm_tol = 1e-4 if dtype == torch.float32 else 1e-9  # cuBLAS sums in another order
    check(f"deform_conv2d {dtype} groups 2, offset groups 2, mask, bias",
          lambda x, w, o, m, b: torch._C._deform_conv2d(x, w, o, m, b, [1, 1], [1, 1], [1, 1], 2, 2),
          [x, w, off, mask, b], [0, 1, 2, 3, 4], gemm_tol, gemm_tol)
    w1 = torch.randn(5, 4, 3, 3, dtype=dtype)
    off1 = torch.randn(2, 2 * 9, 5, 5, dtype=dtype) * 2
    check(f"deform_conv2d {dtype} stride 2, padding 2, dilation 2, no mask",
          lambda x, w, o: torch._C._deform_conv2d(x, w, o, None, None, [2, 2], [2, 2], [2, 2], 1, 1),
          [x, w1, off1], [0, 1, 2], gemm_tol, gemm_tol)

    # bicubic upsampling (and downsampling), by size and by scale factor
    check(f"upsample_bicubic2d {dtype} size", lambda t: F.interpolate(t, size=(13, 17), mode="bicubic"),
          [img], [0], tol, tol)
    check(f"upsample_bicubic2d {dtype} align_corners, scale 1.7",
          lambda t: F.interpolate(t, scale_factor=1.7, mode="bicubic", align_corners=True), [img], [0], tol, tol)
    check(f"upsample_bicubic2d {dtype} downsampling", lambda t: F.interpolate(t, size=(4, 5), mode="bicubic"),
          [img], [0], tol, tol)

half = torch.randn(2, 3, 7, 9)
for dtype in (torch.float16, torch.bfloat16):
    check(f"upsample_bicubic2d {dtype}", lambda t: F.interpolate(t, size=(11, 12), mode="bicubic"),
          [half.to(dtype)], [0], 1e-2, 1e-2)
print("issue 13 kernels: ps_roi_align, ps_roi_pool, deform_conv2d, upsample_bicubic2d (+ gradients) ok")


# ---- conv2d_fused: cuDNN's fused runtime, the composed ops, the CPU ------------------------------

ACTIVATIONS = {"relu": F.relu, "silu": F.silu, "none": lambda t: t}
FUSIONS = ("allow_fuse_bias_act", "allow_fuse_add_to_output")


class ConvEpilogue(nn.Module):
    """act(conv(x) + z): the bias with the convolution, z a dying temporary (the graph may write
    the fused output over it), each term present or not."""

    def __init__(self, act, bias, addend):
        super().__init__()
        self.act, self.addend = ACTIVATIONS[act], addend
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=bias)

    def forward(self, x):
        z = x * 0.5  # before the convolution: the fused node runs in the add's slot
        y = self.conv(x)
        if self.addend:
            y = y + z
        return self.act(y)


class Infer(nn.Graph):
    def __init__(self, model, fuse):
        super().__init__()
        self.model = model
        for flag in FUSIONS:
            getattr(self.config, flag)(fuse)

    def build(self, x):
        return self.model(x)


def fused_ops(graph):
    return graph._last.pass_reports[-1][2].node_ops()


torch.backends.cudnn.allow_tf32 = False  # float32 compared tightly: no TF32 rounding of the inputs
cases = [(act, bias, addend) for act in ACTIVATIONS for bias in (True, False) for addend in (True, False)
         if act != "none" or addend]  # conv + bias alone is the plain convolution
for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 5e-2)):
    for channels_last in (True, False):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x_cpu = torch.randn(2, 8, 9, 11).to(memory_format=fmt)
        for act, bias, addend in cases:
            name = f"conv2d_fused {dtype} {'channels_last' if channels_last else 'nchw'} {act}" + \
                f"{' bias' if bias else ''}{' addend' if addend else ''}"
            model = ConvEpilogue(act, bias, addend).to(memory_format=fmt)
            with torch.no_grad():
                want = model(x_cpu).double()  # eager float32 on the CPU
            dev_model = model.to(DEVICE).to(dtype)
            x = x_cpu.to(DEVICE).to(dtype)
            fused, unfused = Infer(dev_model, True), Infer(dev_model, False)
            got_fused, got_unfused = fused(x), unfused(x)
            assert "conv2d_fused" in fused_ops(fused) and "conv2d_fused" not in fused_ops(unfused), \
                (name, fused_ops(fused))
            for what, got in (("fused", got_fused), ("unfused", got_unfused)):
                np.testing.assert_allclose(got.cpu().double().numpy(), want.numpy(), rtol=tol, atol=tol * 4,
                                           err_msg=f"{name}: {what} graph against the CPU")
            np.testing.assert_allclose(got_fused.cpu().double().numpy(), got_unfused.cpu().double().numpy(),
                                       rtol=tol, atol=tol * 4, err_msg=f"{name}: fused against unfused")
            print(f"{name}: ok")
torch.backends.cudnn.allow_tf32 = True

choices = [c for c in torch._C.algo_choices() if c["provider"] == "cuda" and c["op"] == "conv2d_fused"]
for c in choices:
    print(f"conv2d_fused choice: {c['key']}: {c['algorithm']} ({c['implementation']}, {c['source']})")
if not DRY:
    on_cudnn = [c for c in choices if "bfloat16" in c["key"] and "x:nhwc" in c["key"] and c["algorithm"].startswith("eng")]
    assert on_cudnn, "no bfloat16 channels-last conv2d_fused ran on cuDNN's fused runtime (choices above)"
print(f"conv2d_fused: cuDNN graph for {sum(c['algorithm'] != 'composed' for c in choices)} of {len(choices)} problems, "
      "the others composed; fused, unfused and CPU agree")
