"""A torchvision training recipe written for PyTorch, and run unmodified by both frameworks:
test_torchvision_models.py runs it with PyTorch in the pytest process and, in a subprocess under
plugflow.mock_torch (where `import torch` is plugflow), with plugflow on the same weights and data.

Every classification model of torchvision 0.14 is listed with a small input size: the smallest
at which its last batch norms still see more than one value per sample and channel (64 x 64 for
the networks that downsample 32x; at 32 x 32 their last stage is 1 x 1, and a batch norm over two
values makes the gradients upstream pure rounding noise, in PyTorch as in plugflow), or the
smallest the model accepts when it has no such layer. Randomness inside the forward (dropout,
stochastic depth) cannot draw the same numbers in two frameworks, so those layers get p = 0;
everything else runs as written. The video models (r3d_18 & co.) and RAFT (optical flow) are
listed with their input shape; RAFT gets its two images stacked on the channels (FlowPair).
"""

import copy

import torch
import torchvision
from torchvision import models

# name -> (input size, constructor keyword arguments). FAST: the smallest model of each family,
# run by `make test`.
FAST = {
    "alexnet": (63, {}),
    "resnet18": (64, {}),
    "resnext50_32x4d": (64, {}),
    "wide_resnet50_2": (64, {}),
    "vgg11_bn": (32, {}),
    "densenet121": (64, {"memory_efficient": True}),  # also runs torch.utils.checkpoint
    "squeezenet1_0": (32, {}),
    "squeezenet1_1": (32, {}),
    "mobilenet_v2": (64, {}),
    "mobilenet_v3_small": (64, {}),
    "shufflenet_v2_x0_5": (64, {}),
    "efficientnet_b0": (64, {}),
    "efficientnet_v2_s": (64, {}),
    "regnet_x_400mf": (64, {}),
    "regnet_y_400mf": (64, {}),
    "googlenet": (64, {}),
    "inception_v3": (139, {"aux_logits": False}),  # the auxiliary head needs 299 x 299 (SLOW)
    "mnasnet0_5": (64, {}),
    "convnext_tiny": (64, {}),
    "swin_t": (32, {}),
    "swin_v2_t": (32, {}),
    "vit_b_32": (64, {"image_size": 64}),
    "maxvit_t": (224, {}),  # its 7 x 7 partitions need 224 x 224
    # video (input: channels, frames, height, width): conv3d, 3-d pooling, BatchNorm3d
    "r3d_18": ((3, 4, 32, 32), {}),
    # optical flow (input: two images stacked on the channels): grid_sample, bilinear with
    # align_corners=True, in its correlation lookups. Its four-level correlation pyramid starts at
    # 1/8 resolution and needs 128 x 128: a level of one pixel divides by zero in RAFT's own
    # coordinate normalization (NaN in PyTorch too).
    "raft_small": ((6, 128, 128), {}),
}

# The rest, opt-in (PLUGFLOW_SLOW_TESTS=1): the larger variants, inception_v3 with its auxiliary
# head (which needs 299 x 299), and vgg11 (vgg11_bn, in FAST, holds every layer it has; each
# takes minutes, mostly in their 100M-parameter classifier).
# Each runs at its family's FAST size (the smallest at which that family's last batch norms see
# more than one value per channel; at 32 x 32 resnet50's gradients are rounding noise).


def family(name):
    """'resnet' for resnet18 and resnet152, 'efficientnet' for efficientnet_b0 and _v2_m."""
    return name.split("_")[0].rstrip("0123456789")


FAMILY_SIZE = {family(name): size for name, (size, _) in FAST.items() if isinstance(size, int)}
SLOW = {name: (FAMILY_SIZE.get(family(name), 64), {}) for name in models.list_models(module=models)
        if name not in FAST or name == "inception_v3"}
SLOW.update({"inception_v3": (299, {}), "vit_b_16": (64, {"image_size": 64}), "vit_l_16": (64, {"image_size": 64}),
             "vit_l_32": (64, {"image_size": 64}), "vit_h_14": (56, {"image_size": 56})})
# the other video models (S3D's final pooling and MViT's position embeddings need 16 x 224 x 224)
# and RAFT's large variant
SLOW.update({"mc3_18": ((3, 4, 32, 32), {}), "r2plus1d_18": ((3, 4, 32, 32), {}), "s3d": ((3, 16, 224, 224), {}),
             "mvit_v1_b": ((3, 16, 224, 224), {}), "mvit_v2_s": ((3, 16, 224, 224), {}),
             "raft_large": ((6, 128, 128), {})})
FLOW = {"raft_small", "raft_large"}

NUM_CLASSES = 10
STEPS = 3
SAMPLE = 65536  # larger gradients and weights are recorded at this many evenly spaced elements


class FlowPair(torch.nn.Module):
    """An optical flow model called on one tensor: two images stacked on the channels."""

    def __init__(self, flow):
        super().__init__()
        self.flow = flow

    def forward(self, x):
        return self.flow(x[:, :3], x[:, 3:])


def input_shape(size):
    """One sample's shape: (3, size, size) for an image size, else the table's shape."""
    return size if isinstance(size, tuple) else (3, size, size)


def build(name, kwargs):
    """The model (float32), with dropout and stochastic depth at p = 0."""
    if name in FLOW:
        model = FlowPair(models.get_model(name, weights=None, **kwargs))
    else:
        model = models.get_model(name, weights=None, num_classes=NUM_CLASSES, **kwargs)
    for module in model.modules():
        if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
    return model


def cast_state(state, dtype):
    """A copy of a state dict with its floating-point tensors in dtype (and its metadata, which
    some models' loading reads)."""
    cast = copy.copy(state)
    for k, v in state.items():
        cast[k] = v.to(dtype) if v.is_floating_point() else v.clone()
    return cast


def loss_of(model, output, target):
    """Cross-entropy of the logits, plus 0.4x that of GoogLeNet's and Inception's auxiliary heads.
    For RAFT (a list of flow predictions, one per refinement) the sequence loss of its paper
    (weights 0.8^(n - 1 - i), mean L1 error) toward zero flow, there being no flow targets; its
    "logits" are the final flow."""
    if isinstance(output, list):
        n = len(output)
        return sum(0.8 ** (n - 1 - i) * flow.abs().mean() for i, flow in enumerate(output)), output[-1]
    criterion = torch.nn.CrossEntropyLoss()
    if isinstance(output, torch.Tensor):
        return criterion(output, target), output
    aux = [a for a in output[1:] if a is not None]
    return criterion(output[0], target) + 0.4 * sum(criterion(a, target) for a in aux), output[0]


def sample(t):
    """A copy of t's elements (zero_grad and the optimizer write in place), flattened; at most
    SAMPLE of them, evenly spaced, so that records of 100M-parameter models stay small."""
    flat = t.detach().reshape(-1)
    return flat[::max(1, flat.numel() // SAMPLE)][:SAMPLE].clone()


def train(model, state, x, target):
    """STEPS steps of SGD with momentum from the weights in state, in x's dtype. Returns the
    losses, the first step's logits and gradients, and the parameters and buffers after the last
    step (those two as sample()s)."""
    model.to(x.dtype)
    model.load_state_dict(state)
    model.train()
    if isinstance(model, models.GoogLeNet) and model.aux1 is not None:
        # The auxiliary heads apply F.dropout(p=0.7) unconditionally in training mode: run them in
        # eval mode (their batch norms then use running statistics), the rest in training mode.
        model.aux1.eval()
        model.aux2.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    record = {"losses": []}
    for step in range(STEPS):
        optimizer.zero_grad()
        loss, logits = loss_of(model, model(x), target)
        loss.backward()
        record["losses"].append(loss.item())
        if step == 0:
            record["logits"] = logits.detach().clone()
            record["grads"] = {n: sample(p.grad) for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
    record["final"] = {k: sample(v) for k, v in model.state_dict().items()}
    return record
