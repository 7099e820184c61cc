"""torchvision's data side, written for PyTorch and run unmodified by both frameworks
(test_torchvision_data.py: PyTorch in the pytest process, plugflow in a subprocess under
plugflow.mock_torch): the tensor transforms, the pure-Python parts of torchvision.ops, and the
datasets that read local files. Inputs come from numpy with a fixed seed, so both runs see the
same data; run() returns every result as numpy arrays to compare.
"""

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import ops
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF


def as_numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def deterministic_(module, rng):
    """Sets every parameter from rng (weights scaled by their fan-in, so deep stacks keep their
    scale), so both frameworks hold the same weights."""
    with torch.no_grad():
        for p in module.parameters():
            scale = 1 / np.sqrt(p[0].numel()) if p.dim() > 1 else 0.3
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * scale).to(p.dtype))
    return module


def image(rng, height=20, width=24):
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def transforms(rng):
    img = image(rng)
    out = {"to_tensor": T.ToTensor()(img), "to_tensor_numpy": T.ToTensor()(np.asarray(img)),
           "pil_to_tensor": T.PILToTensor()(img)}
    x = out["to_tensor"]
    u8 = out["pil_to_tensor"]
    pipelines = {
        "normalize": T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        "resize_bilinear": T.Resize(10),
        "resize_nearest": T.Resize((12, 7), interpolation=InterpolationMode.NEAREST),
        "resize_bicubic": T.Resize((13, 31), interpolation=InterpolationMode.BICUBIC),
        "center_crop": T.CenterCrop(8),
        "center_crop_pads": T.CenterCrop((22, 30)),
        "random_crop_whole_padded": T.RandomCrop((24, 28), padding=2),
        "random_crop_reflect": T.RandomCrop((26, 30), padding=3, padding_mode="reflect"),
        "hflip": T.RandomHorizontalFlip(p=1.0),
        "vflip": T.RandomVerticalFlip(p=1.0),
        "to_float64": T.ConvertImageDtype(torch.float64),
        "to_uint8": T.ConvertImageDtype(torch.uint8),
        "grayscale": T.Grayscale(num_output_channels=3),
        "pad_edge": T.Pad((1, 2, 3, 4), padding_mode="edge"),
        "blur": T.GaussianBlur(5, sigma=1.5),
        "compose": T.Compose([T.Resize(16), T.CenterCrop(12), T.RandomHorizontalFlip(1.0),
                              T.Normalize([0.5] * 3, [0.25] * 3)]),
    }
    for name, transform in pipelines.items():
        out[name] = transform(x)
    for name in ("resize_bilinear", "resize_nearest", "center_crop", "hflip", "to_float64", "pad_edge"):
        out["uint8_" + name] = pipelines[name](u8)
    out["brightness"] = TF.adjust_brightness(x, 1.3)
    out["contrast"] = TF.adjust_contrast(x, 0.7)
    out["saturation"] = TF.adjust_saturation(x, 1.6)
    out["hue"] = TF.adjust_hue(x, 0.2)
    out["gamma"] = TF.adjust_gamma(x, 0.8)
    out["invert"] = TF.invert(u8)
    out["posterize"] = TF.posterize(u8, 3)
    out["solarize"] = TF.solarize(x, 0.6)
    out["autocontrast"] = TF.autocontrast(x)
    out["equalize"] = TF.equalize(u8)
    out["resized_crop"] = TF.resized_crop(x, 2, 3, 10, 12, [8, 8])
    out["five_crop"] = torch.stack(TF.five_crop(x, 6))
    out["erase"] = TF.erase(x.clone(), 2, 3, 4, 5, torch.zeros(3, 4, 5))
    # the geometric transforms sample tensors with grid_sample (perspective: test_torchvision_ops.py)
    out["rotate"] = TF.rotate(x, 30.0, interpolation=InterpolationMode.BILINEAR)
    out["rotate_expand_fill"] = TF.rotate(x, 45.0, expand=True, fill=[0.5, 0.2, 0.9])
    out["uint8_rotate"] = TF.rotate(u8, 30.0, interpolation=InterpolationMode.BILINEAR)
    out["affine"] = TF.affine(x, angle=15.0, translate=[2, 1], scale=1.1, shear=[5.0, 3.0],
                              interpolation=InterpolationMode.BILINEAR)
    displacement = torch.from_numpy(rng.uniform(-0.1, 0.1, (1, 20, 24, 2)).astype(np.float32))
    out["elastic"] = TF.elastic_transform(x, displacement)
    # A random crop position is drawn from each framework's own generator: check only that the
    # crop is a window of the image.
    crop = T.RandomCrop(8)(x)
    out["random_crop_is_a_window"] = np.array(any(
        torch.equal(x[:, i:i + 8, j:j + 8], crop) for i in range(x.shape[1] - 7) for j in range(x.shape[2] - 7)))
    return out


def ops_layers(rng):
    x = torch.from_numpy(rng.standard_normal((2, 4, 6, 5)))
    out = {}
    frozen = ops.FrozenBatchNorm2d(4).double()
    frozen.load_state_dict({"weight": torch.from_numpy(rng.uniform(0.5, 2, 4)),
                            "bias": torch.from_numpy(rng.standard_normal(4)),
                            "running_mean": torch.from_numpy(rng.standard_normal(4)),
                            "running_var": torch.from_numpy(rng.uniform(0.5, 2, 4)),
                            "num_batches_tracked": torch.tensor(7)})  # dropped by FrozenBatchNorm2d
    out["frozen_bn"] = frozen(x)
    layers = {
        "conv_norm_act": ops.Conv2dNormActivation(4, 6, kernel_size=3, stride=2, activation_layer=torch.nn.SiLU),
        "conv_norm_act_frozen": ops.Conv2dNormActivation(4, 4, kernel_size=1, norm_layer=ops.FrozenBatchNorm2d),
        "squeeze_excitation": ops.SqueezeExcitation(4, 2),
        "mlp": torch.nn.Sequential(ops.Permute([0, 2, 3, 1]), ops.MLP(4, [8, 3], activation_layer=torch.nn.GELU, inplace=None,
                                                                        dropout=0.0)),
        "stochastic_depth_eval": ops.StochasticDepth(0.5, "row"),
    }
    for name, layer in layers.items():
        layer = deterministic_(layer.double(), rng)
        if name.endswith("_eval"):
            layer.eval()
        inp = x.clone().requires_grad_()
        y = layer(inp)
        y.backward(torch.from_numpy(rng.standard_normal(tuple(y.shape))))
        out[name] = y
        out[name + "_grad"] = inp.grad
        for pname, p in layer.named_parameters():
            out[f"{name}_grad_{pname}"] = p.grad
    out["stochastic_depth_p0"] = ops.stochastic_depth(x, 0.0, "batch", training=True)
    return out


def detection_backbone(rng):
    """A detection backbone from its building blocks: ResNet-18 with frozen batch norms, its
    intermediate layers and a feature pyramid (torchvision's resnet_fpn_backbone)."""
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    backbone = deterministic_(resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=3).double(),
                              rng)
    x = torch.from_numpy(rng.standard_normal((1, 3, 64, 64)))
    features = backbone(x)
    sum(f.sum() for f in features.values()).backward()
    out = {f"fpn_{k}": v for k, v in features.items()}
    out.update({"fpn_grad_" + name: p.grad for name, p in backbone.named_parameters() if p.grad is not None})
    return out


def box_ops(rng):
    def boxes(n):
        xy = rng.uniform(0, 50, (n, 2))
        return torch.from_numpy(np.concatenate([xy, xy + rng.uniform(1, 30, (n, 2))], axis=1))

    a, b = boxes(6), boxes(4)
    out = {"area": ops.box_area(a), "iou": ops.box_iou(a, b), "giou": ops.generalized_box_iou(a, b),
           "ciou": ops.complete_box_iou(a, b), "diou": ops.distance_box_iou(a, b),
           "clip": ops.clip_boxes_to_image(a, (40, 35)), "remove_small": ops.remove_small_boxes(a, 12.0)}
    for fmt in ("cxcywh", "xywh"):
        converted = ops.box_convert(a, "xyxy", fmt)
        out["to_" + fmt] = converted
        out["from_" + fmt] = ops.box_convert(converted, fmt, "xyxy")
    masks = torch.from_numpy(rng.random((3, 12, 10)) > 0.8)
    out["masks_to_boxes"] = ops.masks_to_boxes(masks)
    logits = torch.from_numpy(rng.standard_normal((5, 3))).requires_grad_()
    targets = torch.from_numpy((rng.random((5, 3)) > 0.5).astype(np.float64))
    loss = ops.sigmoid_focal_loss(logits, targets, reduction="mean")
    loss.backward()
    out["focal_loss"], out["focal_loss_grad"] = loss, logits.grad
    for name, fn in (("giou_loss", ops.generalized_box_iou_loss), ("diou_loss", ops.distance_box_iou_loss),
                     ("ciou_loss", ops.complete_box_iou_loss)):
        pred = a[:4].clone().requires_grad_()
        loss = fn(pred, b, reduction="sum")
        loss.backward()
        out[name], out[name + "_grad"] = loss, pred.grad
    return out


def datasets(root):
    image_folder = torchvision.datasets.ImageFolder(f"{root}/images", transform=T.ToTensor())
    out = {"image_folder_classes": np.array(image_folder.classes),
           "image_folder_targets": np.array(image_folder.targets)}
    for i in range(len(image_folder)):
        out[f"image_folder_{i}"] = image_folder[i][0]
    batches = [(x, y) for x, y in DataLoader(image_folder, batch_size=4, num_workers=2)]
    out["loader_x"] = torch.cat([x for x, _ in batches])
    out["loader_y"] = torch.cat([y for _, y in batches])
    for train in (True, False):
        mnist = torchvision.datasets.MNIST(root, train=train, download=False, transform=T.ToTensor())
        split = "train" if train else "test"
        out[f"mnist_{split}_data"] = mnist.data
        out[f"mnist_{split}_targets"] = mnist.targets
        image0, label0 = mnist[0]
        out[f"mnist_{split}_item0"] = image0
        out[f"mnist_{split}_label0"] = np.array(label0)
    return out


def run(root, seed):
    rng = np.random.default_rng(seed)
    results = {}
    for group, fn in (("transforms", transforms), ("ops", ops_layers), ("detection", detection_backbone),
                      ("boxes", box_ops)):
        results.update({f"{group}.{k}": as_numpy(v) for k, v in fn(rng).items()})
    results.update({f"datasets.{k}": as_numpy(v) for k, v in datasets(root).items()})
    return results
