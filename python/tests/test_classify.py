"""Images and `mn classify` against PIL and torchvision (Debian's python3-pil and
python3-torchvision): decoding equals PIL's pixels, the ImageNet transform equals torchvision's
on PIL images, and `mn classify` on a torchvision ResNet state_dict gives torchvision's
probabilities for PNG and JPEG files."""

import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

import meganeura as mn
from conftest import FIXTURES, relative_error

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
Image = pytest.importorskip("PIL.Image")
from torchvision import transforms  # noqa: E402

PREPROCESS = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                 transforms.ToTensor(),
                                 transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def fixture_writer():
    """make_nn_fixtures.py's safetensors writer (PyTorch's dtypes, I64 num_batches_tracked)."""
    spec = importlib.util.spec_from_file_location("nn_fixtures", FIXTURES / "nn" / "make_nn_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.save_safetensors


def images(directory):
    """A JPEG (4:2:0), an RGBA PNG (alpha dropped as convert('RGB')), a gray PNG, in shapes
    that take every branch of the resize (portrait, landscape, already 256 on one side)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:300, 0:410]
    rgb = np.stack([(x * 255 // 410), (y * 255 // 300), (x + y) % 256], -1).astype(np.uint8)
    rgb = np.clip(rgb.astype(int) + rng.integers(-20, 20, rgb.shape), 0, 255).astype(np.uint8)
    paths = [directory / "photo.jpg", directory / "alpha.png", directory / "gray.png"]
    Image.fromarray(rgb).save(paths[0], quality=90)
    rgba = np.concatenate([rgb[:260, :256], rng.integers(0, 255, (260, 256, 1))], -1)
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(paths[1])
    Image.fromarray(rgb[:233, :377, 1]).save(paths[2])
    return paths


def test_decoding_and_the_imagenet_transform_are_pils_and_torchvisions(tmp_path):
    for path in images(tmp_path):
        pil = Image.open(path).convert("RGB")
        np.testing.assert_array_equal(mn.data.read_image(path), np.asarray(pil))
        np.testing.assert_array_equal(mn.data.imagenet_preprocess(path), PREPROCESS(pil).numpy())
    with pytest.raises(mn.FormatError, match="not a PNG or JPEG"):
        mn.data.read_image(FIXTURES / "nn" / "mlp.safetensors")
    broken = tmp_path / "broken.jpg"
    broken.write_bytes((tmp_path / "photo.jpg").read_bytes()[:400])
    with pytest.raises(mn.FormatError, match="broken.jpg: JPEG"):
        mn.data.read_image(broken)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes((tmp_path / "gray.png").read_bytes()[:100])
    with pytest.raises(mn.FormatError, match="truncated.png: PNG"):
        mn.data.read_image(truncated)


def test_classify_gives_torchvisions_probabilities(tmp_path):
    torch.manual_seed(0)
    ref = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    ref.eval()
    model = tmp_path / "resnet18.safetensors"
    fixture_writer()(str(model), ref.state_dict())
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"class {i}\n" for i in range(10)))
    paths = images(tmp_path)
    run = subprocess.run([os.environ["MN_CLI"], "classify", str(model), *map(str, paths),
                          "--labels", str(labels), "--top", "10", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["model"] == "resnet18"
    batch = torch.stack([PREPROCESS(Image.open(p).convert("RGB")) for p in paths])
    expected = torch.softmax(ref(batch), -1).detach().numpy()
    for i, image in enumerate(out["images"]):
        assert image["path"] == str(paths[i])
        got = np.zeros(10)
        for entry in image["top"]:
            got[entry["class"]] = entry["probability"]
            assert entry["label"] == f"class {entry['class']}"
        assert relative_error(got, expected[i]) < 1e-4
        probabilities = [e["probability"] for e in image["top"]]
        assert probabilities == sorted(probabilities, reverse=True)

    bad_labels = tmp_path / "three.txt"
    bad_labels.write_text("a\nb\nc\n")
    run = subprocess.run([os.environ["MN_CLI"], "classify", str(model), str(paths[0]),
                          "--labels", str(bad_labels)], capture_output=True, text=True)
    assert run.returncode == 1 and "3 labels, the model has 10 classes" in run.stderr
    run = subprocess.run([os.environ["MN_CLI"], "classify", str(FIXTURES / "nn" / "mlp.safetensors"),
                          str(paths[0])], capture_output=True, text=True)
    assert run.returncode == 1 and "not a torchvision ResNet state_dict" in run.stderr
