"""A torchvision detection recipe written for PyTorch, and run unmodified by both frameworks:
test_torchvision_detection.py runs it with PyTorch in the pytest process and, in a subprocess under
plugflow.mock_torch, with plugflow on the same weights and images.

Each model is built with weights=None and random initialization (copied from the PyTorch model),
few classes (so that untrained scores pass the score threshold and nms has work to do), and its
training-time samplers asked for more proposals than there are, so that they take every candidate
instead of a random subset (the two frameworks draw different random numbers). It then runs in
eval mode on two small images of different sizes (boxes, scores, labels) and one training step
(its loss dict and the gradients' norm).
"""

import torch
from torchvision.models import detection

NUM_CLASSES = 5
TAKE_ALL = 1 << 20  # a sampler "batch size" no image reaches: every candidate is used

# name -> constructor keyword arguments. FAST runs in `make test`, SLOW with PLUGFLOW_SLOW_TESTS=1.
SMALL_IMAGES = {"min_size": 128, "max_size": 160}  # the R-CNNs resize to this (SSDlite: 320 x 320)
FAST = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"rpn_batch_size_per_image": TAKE_ALL,
                                              "box_batch_size_per_image": TAKE_ALL, "rpn_pre_nms_top_n_train": 300,
                                              "rpn_post_nms_top_n_train": 300, **SMALL_IMAGES},
    # Untrained, SSDlite's deepest feature maps are constant, so their anchors tie on score: which
    # of them topk and the per-image limit keep, and which of two overlapping ones nms keeps,
    # depends on the order of ties. It therefore keeps every candidate and suppresses nothing, and
    # its detections are compared as a set (UNORDERED).
    "ssdlite320_mobilenet_v3_large": {"topk_candidates": TAKE_ALL, "detections_per_img": TAKE_ALL,
                                      "nms_thresh": 1.0},
}
UNORDERED = {"ssdlite320_mobilenet_v3_large"}
R_CNN = {"rpn_batch_size_per_image": TAKE_ALL, "box_batch_size_per_image": TAKE_ALL, "rpn_pre_nms_top_n_train": 300,
         "rpn_post_nms_top_n_train": 300, **SMALL_IMAGES}
SLOW = {
    # untrained, its focal-loss head scores about 0.01 (the prior): below the default threshold
    "fcos_resnet50_fpn": {"score_thresh": 0.001, **SMALL_IMAGES},
    "retinanet_resnet50_fpn": {"score_thresh": 0.001, **SMALL_IMAGES},
    "fasterrcnn_resnet50_fpn": R_CNN,
    "maskrcnn_resnet50_fpn": R_CNN,
    "keypointrcnn_resnet50_fpn": R_CNN,
}
# The tests add noise of this scale to the initial weights (SSDlite's initial heads score every box
# alike); ResNet-50's untrained batch norms would blow the noise up (logits ~1e3, no proposals left).
WEIGHT_NOISE = {name: 0.0 for name in ("retinanet_resnet50_fpn", "fasterrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn",
                                       "keypointrcnn_resnet50_fpn")}
EXTRA_TARGETS = {"maskrcnn_resnet50_fpn": {"masks"}, "keypointrcnn_resnet50_fpn": {"keypoints"}}
IMAGE_SIZES = [(96, 128), (112, 80)]


def build(name, kwargs):
    return getattr(detection, name)(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, **kwargs)


def make_data(seed):
    """Two images in [0, 1) and their targets: 3 boxes each, with labels."""
    g = torch.Generator().manual_seed(seed)
    images, targets = [], []
    for h, w in IMAGE_SIZES:
        images.append(torch.rand(3, h, w, generator=g, dtype=torch.float64))
        xy = torch.rand(3, 2, generator=g, dtype=torch.float64) * torch.tensor([w * 0.6, h * 0.6], dtype=torch.float64)
        wh = 8 + torch.rand(3, 2, generator=g, dtype=torch.float64) * torch.tensor([w * 0.35, h * 0.35],
                                                                                  dtype=torch.float64)
        labels = torch.randint(1, NUM_CLASSES, (3,), generator=g)
        targets.append({"boxes": torch.cat([xy, xy + wh], dim=1), "labels": labels})
    # What Mask and Keypoint R-CNN train on besides (drawn after the boxes, which stay as they were):
    # each box's mask (the box, less a random corner), and 17 keypoints inside it, some not visible.
    for (h, w), target in zip(IMAGE_SIZES, targets):
        boxes = target["boxes"]
        ys = torch.arange(h, dtype=torch.float64)[None, :, None]
        xs = torch.arange(w, dtype=torch.float64)[None, None, :]
        x0, y0, x1, y1 = (boxes[:, k, None, None] for k in range(4))
        inside = (xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)
        cut = torch.rand(len(boxes), 2, generator=g, dtype=torch.float64)
        corner = (xs >= x0 + cut[:, 0, None, None] * (x1 - x0)) & (ys >= y0 + cut[:, 1, None, None] * (y1 - y0))
        target["masks"] = (inside & ~corner).to(torch.uint8)
        u = torch.rand(len(boxes), 17, 2, generator=g, dtype=torch.float64)
        visible = (torch.rand(len(boxes), 17, 1, generator=g) < 0.8).to(torch.float64)
        target["keypoints"] = torch.cat([boxes[:, None, :2] + u * (boxes[:, None, 2:] - boxes[:, None, :2]),
                                         visible], 2).float()
    return images, targets


def run(name, kwargs, state, images, targets, dtype):
    """{key: tensor} of the eval detections and the training step's losses, in dtype."""
    model = build(name, kwargs).to(dtype)
    model.load_state_dict(state)
    images = [im.to(dtype) for im in images]
    keep = {"boxes", "labels"} | EXTRA_TARGETS.get(name, set())
    # (keypoints stay float32: torchvision refuses others)
    targets = [{k: v.to(dtype) if v.is_floating_point() and k != "keypoints" else v for k, v in t.items() if k in keep}
               for t in targets]
    record = {}
    model.eval()
    with torch.no_grad():
        for i, detections in enumerate(model(images)):
            for key, value in detections.items():
                record[f"eval.{i}.{key}"] = value.clone()
    model.train()
    losses = model(images, targets)
    total = sum(losses.values())
    total.backward()
    for key, value in losses.items():
        record[f"loss.{key}"] = value.detach().clone()
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    record["grad_norm"] = torch.cat(grads).norm()
    return record
