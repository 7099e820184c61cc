"""torchvision's detection models under plugflow.mock_torch against PyTorch on the same weights and
images (tv_detection_recipe.py, run by PyTorch here and by plugflow in a subprocess): the eval
detections (boxes, scores, labels: every step through nms, roi_align and MultiScaleRoIAlign) and
one training step's losses and gradient norm, in float64. `make test` runs Faster R-CNN
(MobileNetV3-Large 320 FPN) and SSDlite; PLUGFLOW_SLOW_TESTS=1 adds the ResNet-50 FPN family: FCOS, RetinaNet, Faster, Mask and Keypoint
R-CNN."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tv_detection_recipe

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# float64. Detections pass through thresholds, sorts and nms, so the same order is required; the
# box decoder exponentiates regression outputs, which turns 1e-13 differences of summation order
# into ~1e-8 pixels.
# A float32 result (the RPN's objectness loss: torchvision's targets are float32, and PyTorch's
# loss takes the target's dtype) is compared to float32 rounding.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-5}  # rtol = atol

WORKER = """
import sys
import plugflow.mock_torch
plugflow.mock_torch.enable()
import torch
sys.path.insert(0, {tests_dir!r})
import tv_detection_recipe

name, table, folder = sys.argv[1:4]
data = torch.load(folder + "/in.pt")
kwargs = getattr(tv_detection_recipe, table)[name]
record = tv_detection_recipe.run(name, kwargs, data["state"], data["images"], data["targets"], torch.float64)
torch.save(record, folder + "/out.pt")
"""


def in_canonical_order(record):
    """The record with each image's detections sorted by (score, label, box) rounded to 1e-6."""
    record = dict(record)
    for i in range(len(tv_detection_recipe.IMAGE_SIZES)):
        rows = torch.cat([record[f"eval.{i}.scores"][:, None], record[f"eval.{i}.labels"][:, None].double(),
                          record[f"eval.{i}.boxes"]], dim=1).numpy()
        order = torch.from_numpy(np.lexsort(np.round(rows, 6).T[::-1]).copy())
        for key in [k for k in record if k.startswith(f"eval.{i}.")]:
            record[key] = record[key][order]
    return record


def run_case(name, table, tmp_path):
    kwargs = getattr(tv_detection_recipe, table)[name]
    torch.manual_seed(0)
    model = tv_detection_recipe.build(name, kwargs).to(torch.float64)
    with torch.no_grad():  # SSDlite's initial heads score every box alike: ties would make the order arbitrary
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=tv_detection_recipe.WEIGHT_NOISE.get(name, 0.02))
    state = model.state_dict()
    images, targets = tv_detection_recipe.make_data(1)
    torch.save({"state": state, "images": images, "targets": targets}, tmp_path / "in.pt")
    expected = tv_detection_recipe.run(name, kwargs, state, images, targets, torch.float64)
    result = subprocess.run([sys.executable, "-c", WORKER.format(tests_dir=TESTS_DIR), name, table, str(tmp_path)],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-5000:]
    actual = torch.load(tmp_path / "out.pt")
    if name in tv_detection_recipe.UNORDERED:
        expected, actual = in_canonical_order(expected), in_canonical_order(actual)
    assert sorted(actual) == sorted(expected)
    assert expected["eval.0.boxes"].shape[0] > 0 and expected["eval.1.boxes"].shape[0] > 0  # something detected
    for key, want in expected.items():
        got = actual[key]
        assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, want.dtype, got.shape, want.shape)
        if want.is_floating_point():
            tolerance = TOLERANCE[want.dtype]
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tolerance, atol=tolerance, err_msg=key)
        else:
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=key)


@pytest.mark.parametrize("name", sorted(tv_detection_recipe.FAST))
def test_detection_model_matches_pytorch(name, tmp_path):
    run_case(name, "FAST", tmp_path)


@pytest.mark.skipif(os.environ.get("PLUGFLOW_SLOW_TESTS") != "1", reason="slow: set PLUGFLOW_SLOW_TESTS=1")
@pytest.mark.parametrize("name", sorted(tv_detection_recipe.SLOW))
def test_larger_detection_model_matches_pytorch(name, tmp_path):
    run_case(name, "SLOW", tmp_path)
