"""PyTorch's example scripts, written the ordinary way (example_scripts/: argparse, torchvision
datasets, DataLoader workers, Adadelta with StepLR, manual SGD with gradient clipping, Adam,
torch.save / torch.load), run unmodified with `python -m plugflow.mock_torch` on small synthetic
data. Where a script reports a test loss, PyTorch itself recomputes it from the checkpoint the
plugflow run saved: the printed number must match."""

import importlib.util
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_scripts")


def run_script(script, args, cwd, expect_ok=True):
    result = subprocess.run([sys.executable, "-m", "plugflow.mock_torch", os.path.join(SCRIPTS, script), *args],
                            cwd=cwd, capture_output=True, text=True, timeout=600)
    if expect_ok:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def import_with_torch(path, name):
    """A module of the example scripts imported here, where `import torch` is PyTorch."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_idx(path, array):
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.astype(np.uint8).tobytes())


def test_mnist_example(tmp_path):
    rng = np.random.default_rng(0)
    raw = tmp_path / "data" / "MNIST" / "raw"
    os.makedirs(raw)
    for split, n in (("train", 160), ("t10k", 48)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for image, label in zip(images, labels):  # a learnable bright bar per class
            image[2 + 2 * label:4 + 2 * label, 4:24] = 255
        write_idx(raw / f"{split}-images-idx3-ubyte", images)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    os.makedirs(tmp_path / "run")
    result = run_script("mnist/main.py", ["--epochs", "2", "--batch-size", "32", "--test-batch-size", "16",
                                          "--log-interval", "2", "--workers", "2", "--save-model"], tmp_path / "run")
    losses = [float(x) for x in re.findall(r"Test set: Average loss: ([0-9.]+)", result.stdout)]
    assert len(losses) == 2 and len(re.findall(r"Train Epoch: 2 ", result.stdout)) == 3, result.stdout

    # PyTorch evaluates the saved weights on the same test set.
    example = import_with_torch(os.path.join(SCRIPTS, "mnist", "main.py"), "mnist_example")
    model = example.Net()
    model.load_state_dict(torch.load(tmp_path / "run" / "mnist_cnn.pt"))
    model.eval()
    transform = torchvision.transforms.Compose([torchvision.transforms.ToTensor(),
                                                torchvision.transforms.Normalize((0.1307,), (0.3081,))])
    test_set = torchvision.datasets.MNIST(tmp_path / "data", train=False, transform=transform)
    with torch.no_grad():
        x = torch.stack([test_set[i][0] for i in range(len(test_set))])
        y = torch.tensor([test_set[i][1] for i in range(len(test_set))])
        loss = torch.nn.functional.nll_loss(model(x), y, reduction="sum").item() / len(test_set)
    assert abs(loss - losses[-1]) < 2e-4, (loss, losses[-1])


def corpus(folder, rng):
    words = [f"w{i}" for i in range(40)]
    os.makedirs(folder)
    for name, lines in (("train.txt", 120), ("valid.txt", 30), ("test.txt", 30)):
        with open(folder / name, "w") as f:
            for _ in range(lines):
                start = int(rng.integers(0, 40))
                f.write(" ".join(words[(start + k) % 40] for k in range(int(rng.integers(3, 9)))) + "\n")


def test_word_language_model_example(tmp_path):
    corpus(tmp_path / "data", np.random.default_rng(1))
    args = ["--data", str(tmp_path / "data"), "--emsize", "16", "--nhid", "16", "--epochs", "2", "--bptt", "12",
            "--batch_size", "8", "--log-interval", "5", "--lr", "5", "--save", str(tmp_path / "model.pt")]
    result = run_script("word_language_model/main.py", args, tmp_path)
    assert len(re.findall(r"\| end of epoch", result.stdout)) == 2, result.stdout
    printed = float(re.search(r"End of training \| test loss +([0-9.]+)", result.stdout).group(1))

    # PyTorch evaluates the saved weights on the test split, as the script does.
    folder = os.path.join(SCRIPTS, "word_language_model")
    data = import_with_torch(os.path.join(folder, "data.py"), "wlm_data")
    model_module = import_with_torch(os.path.join(folder, "model.py"), "wlm_model")
    words = data.Corpus(str(tmp_path / "data"))
    model = model_module.RNNModel("LSTM", len(words.dictionary), 16, 16, 2, 0.2)
    model.load_state_dict(torch.load(tmp_path / "model.pt"))
    model.eval()
    test = words.test[:len(words.test) // 10 * 10].view(10, -1).t().contiguous()
    hidden, total = model.init_hidden(10), 0.0
    with torch.no_grad():
        for i in range(0, test.size(0) - 1, 12):
            seq_len = min(12, len(test) - 1 - i)
            output, hidden = model(test[i:i + seq_len], hidden)
            total += seq_len * torch.nn.functional.nll_loss(output, test[i + 1:i + 1 + seq_len].view(-1)).item()
    assert abs(total / (len(test) - 1) - printed) < 0.006, (total / (len(test) - 1), printed)

    result = run_script("word_language_model/main.py", args + ["--model", "Transformer", "--epochs", "1"], tmp_path)
    assert math.isfinite(float(re.search(r"test loss +([0-9.]+)", result.stdout).group(1)))

    result = run_script("word_language_model/main.py", args + ["--epochs", "1", "--dry-run", "--onnx-export",
                                                               str(tmp_path / "model.onnx")], tmp_path, expect_ok=False)
    assert result.returncode != 0 and "End of training" in result.stdout
    assert "NotImplementedError: torch.onnx.export: plugflow cannot export to ONNX" in result.stderr
    assert not (tmp_path / "model.onnx").exists()


def test_dcgan_example(tmp_path):
    rng = np.random.default_rng(2)
    for cls in ("a", "b"):
        os.makedirs(tmp_path / "images" / cls)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(tmp_path / "images" / cls / f"{i}.png")
    common = ["--imageSize", "64", "--batchSize", "8", "--nz", "8", "--ngf", "8", "--ndf", "8", "--workers", "2",
              "--outf", str(tmp_path / "out"), "--manualSeed", "3"]
    result = run_script("dcgan/main.py", ["--dataset", "folder", "--dataroot", str(tmp_path / "images"), "--niter", "2",
                                          *common], tmp_path)
    assert len(re.findall(r"Loss_D: [0-9.]+ Loss_G: [0-9.]+", result.stdout)) == 4, result.stdout
    for image in ("real_samples.png", "fake_samples_epoch_000.png", "fake_samples_epoch_001.png"):
        with Image.open(tmp_path / "out" / image) as png:
            assert png.mode == "RGB" and png.size[1] == 64 + 2 * 2  # one row of 8 images, 2-pixel padding
    state = torch.load(tmp_path / "out" / "netG_epoch_1.pth")
    assert tuple(state["main.0.weight"].shape) == (8, 64, 4, 4) and tuple(state["main.12.weight"].shape) == (8, 3, 4, 4)

    # Training continues from the checkpoints, on FakeData.
    result = run_script("dcgan/main.py", ["--dataset", "fake", "--dry-run", "--netG",
                                          str(tmp_path / "out" / "netG_epoch_1.pth"), "--netD",
                                          str(tmp_path / "out" / "netD_epoch_1.pth"), *common], tmp_path)
    assert "Loss_D" in result.stdout
