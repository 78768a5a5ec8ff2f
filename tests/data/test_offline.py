"""Real offline data: scikit-learn digits, Fashion-MNIST and the asterisk spoken digits (Debian packages)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from spt_hf.data import DIGITS_VOCAB, DataFormatError, get_task_spec, load_task
from spt_hf.data.readers.offline import ASTERISK_SOUNDS_DIR, FASHION_MNIST_DIR, FASHION_MNIST_FILES

needs_fashion = pytest.mark.skipif(
    not (FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz").is_file(),
    reason="Fashion-MNIST absent: apt-get install dataset-fashion-mnist",
)
needs_asterisk = pytest.mark.skipif(
    not list(ASTERISK_SOUNDS_DIR.glob("*/digits/0.wav")),
    reason="asterisk spoken digits absent: apt-get install asterisk-core-sounds-en-wav",
)


def test_digits_tokens_fixed_split() -> None:
    from sklearn.datasets import load_digits

    ds = load_task("digits")
    assert {k: len(v) for k, v in ds.items()} == {"train": 500, "validation": 400, "test": 897}
    assert load_task("digits")["test"]["label"] == ds["test"]["label"]  # fixed seed
    bunch = load_digits()
    rows = {tuple(r) for r in bunch.data.astype(int).tolist()}
    ids = ds["validation"][0]["input_ids"]
    assert len(ids) == 64 and tuple(i - 4 for i in ids) in rows and max(ids) < len(DIGITS_VOCAB) == 21
    all_rows = [tuple(x) for s in ds.values() for x in s["input_ids"]]
    assert len(set(all_rows)) == 1797


def test_digits_continuous_and_subsampling() -> None:
    spec = get_task_spec("digits", input_kind="continuous")
    assert spec.input_kind == "continuous" and spec.vocab is None and spec.num_quantized_levels == 17
    ds = load_task("digits", input_kind="continuous", num_train_examples=100, seed=1)
    x = ds["train"][0]["input_values"]
    assert len(ds["train"]) == 100 and x.shape == (64,) and x.dtype == np.uint8 and x.max() <= 16
    assert (
        load_task("digits", train_fraction=0.2)["train"]["label"]
        == load_task("digits", train_fraction=0.2)["train"]["label"]
    )
    with pytest.raises(ValueError, match="not both"):
        load_task("digits", train_fraction=0.2, num_train_examples=5)


@needs_fashion
def test_fashion_mnist_is_1024_steps() -> None:
    ds = load_task("fashion_mnist", train_size=600, test_size=100)
    assert {k: len(v) for k, v in ds.items()} == {"train": 550, "validation": 50, "test": 100}
    x = np.asarray(ds["train"].with_format("numpy")[0]["input_values"]).reshape(32, 32)
    assert x.shape == (32, 32) and not x[:2].any() and not x[:, -2:].any() and x.max() > 100
    assert ds["train"].features["label"].names[9] == "Ankle boot"


def test_fashion_mnist_bad_file(tmp_path: Path) -> None:
    for image_file, label_file in FASHION_MNIST_FILES.values():
        with gzip.open(tmp_path / image_file, "wb") as f:
            f.write((2051).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in (2, 28, 28)) + bytes(2 * 784))
        with gzip.open(tmp_path / label_file, "wb") as f:
            f.write((2049).to_bytes(4, "big") + (2).to_bytes(4, "big") + bytes([3, 12]))
    with pytest.raises(DataFormatError, match=r"t10k-labels-idx1-ubyte\.gz|train-labels-idx1-ubyte\.gz"):
        load_task("fashion_mnist", data_dir=tmp_path)
    with gzip.open(tmp_path / "train-images-idx3-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x08\x01junk")
    with pytest.raises(DataFormatError, match="bad header"):
        load_task("fashion_mnist", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        load_task("fashion_mnist", data_dir=tmp_path / "nowhere")


@needs_asterisk
def test_spoken_digits_speech_commands_shape() -> None:
    ds = load_task("spoken_digits")
    total = sum(len(v) for v in ds.values())
    assert total % 10 == 0 and len(ds["validation"]) >= 1 and len(ds["test"]) >= 1
    x = ds["train"][0]["input_values"]
    assert x.shape == (16000,) and 0.01 < np.abs(x).max() <= 1.0
    spec = get_task_spec("spoken_digits")
    assert spec.max_length == 16000 and spec.num_labels == 10


@needs_fashion
@pytest.mark.slow
def test_fashion_mnist_full_dataset() -> None:
    ds = load_task("fashion_mnist")
    assert {k: len(v) for k, v in ds.items()} == {"train": 55000, "validation": 5000, "test": 10000}
    assert ds["test"].features["input_values"].feature.dtype == "uint8"  # 8-bit pixels, stored as they are
    labels = np.bincount(ds["test"]["label"])
    assert labels.tolist() == [1000] * 10
