"""Hub tasks (IMDb, CIFAR-10, Speech Commands) read from local copies in the Hub's own schema and file layout."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from spt_hf.data import BYTE_VOCAB, EOS_ID, get_task_spec, load_task
from spt_hf.data.readers.hub_datasets import SPEECH_COMMANDS_WORDS

IMDB_FEATURES = datasets.Features(
    {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
)


def _imdb_copy(root: Path, n_train: int = 40, n_test: int = 20) -> Path:
    """The Hub repository layout: plain_text/{train,test,unsupervised}-00000-of-00001.parquet."""
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test), ("unsupervised", 3)):
        texts = [f"{split} review {i} é " + "word " * int(rng.integers(1, 60)) for i in range(n)]
        labels = [i % 2 for i in range(n)] if split != "unsupervised" else [-1] * n
        features = IMDB_FEATURES if split != "unsupervised" else None
        ds = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
        (root / "plain_text").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(root / "plain_text" / f"{split}-00000-of-00001.parquet"))
    return root


def test_imdb_parquet_copy_bytes_and_real_validation(tmp_path: Path) -> None:
    ds = load_task("text", data_dir=_imdb_copy(tmp_path), max_length=50)
    assert {k: len(v) for k, v in ds.items()} == {"train": 36, "validation": 4, "test": 20}
    assert ds["train"].features["label"].names == ["neg", "pos"]
    train_texts = {BYTE_VOCAB.decode_text(x) for x in ds["train"]["input_ids"]}
    assert not train_texts & {BYTE_VOCAB.decode_text(x) for x in ds["validation"]["input_ids"]}
    first = ds["test"][0]["input_ids"]
    assert first == BYTE_VOCAB.encode_text("test review 0 é " + "word " * 100, 50)[: len(first)]
    assert all(len(x) <= 50 for x in ds["train"]["input_ids"]) and EOS_ID not in first


def test_imdb_lra_convention_validates_on_test(tmp_path: Path) -> None:
    ds = load_task("text", data_dir=_imdb_copy(tmp_path), validation_from="test", max_length=1000)
    assert len(ds["train"]) == 40 and ds["validation"]["input_ids"] == ds["test"]["input_ids"]


def test_imdb_save_to_disk_copy(tmp_path: Path) -> None:
    data = {"text": ["good film", "bad film"] * 10, "label": [1, 0] * 10}
    split = datasets.Dataset.from_dict(data, features=IMDB_FEATURES)
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "imdb"))
    ds = load_task("text", data_dir=tmp_path / "imdb", max_length=1000, append_eos=True)
    assert ds["test"][0]["input_ids"] == [*BYTE_VOCAB.encode_text("good film"), EOS_ID]


def test_missing_local_copy_explains(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"dataset_dict\.json.*parquet"):
        load_task("text", data_dir=tmp_path)


def test_cifar_grey_and_rgb(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = rng.integers(0, 256, (30, 32, 32, 3), dtype=np.uint8)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    for split in ("train", "test"):
        ds = datasets.Dataset.from_dict(
            {"img": [Image.fromarray(a) for a in arrays], "label": [i % 10 for i in range(30)]}, features=features
        )
        ds.to_parquet(str(tmp_path / "plain_text" / f"{split}-00000-of-00001.parquet"))
    with pytest.raises(ValueError, match="cannot carve 5000 validation examples from 30"):
        load_task("image", data_dir=tmp_path)
    grey = load_task("image", data_dir=tmp_path, validation_from="test")
    assert {k: len(v) for k, v in grey.items()} == {"train": 30, "validation": 30, "test": 30}
    test = np.stack(grey["test"]["input_values"])  # (N, L·C): stored flat, 8-bit values as uint8
    luma = arrays @ np.array([0.299, 0.587, 0.114])  # ITU-R 601
    assert test.shape == (30, 1024) and test.dtype == np.uint8 and np.abs(test - luma.reshape(30, 1024)).max() <= 1.0
    rgb = load_task("scifar", data_dir=tmp_path, validation_from="test")
    values = np.stack(rgb["test"]["input_values"]).reshape(30, 1024, 3)  # step-major: (N, L, C)
    assert np.array_equal(values, arrays.reshape(30, 1024, 3))
    assert get_task_spec("scifar").num_channels == 3 and get_task_spec("image").validation_size == 5000


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def test_speech_commands_copy(tmp_path: Path) -> None:
    names = [*SPEECH_COMMANDS_WORDS[:5], "_silence_"]
    struct = datasets.Features(
        {
            "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
            "label": datasets.ClassLabel(names=names),
        }
    )
    clip = 0.5 * np.sin(np.arange(12000) / 7.0)
    for split in ("train", "validation", "test"):
        rows = {"audio": [{"bytes": _wav(clip, 16000), "path": f"{w}.wav"} for w in names], "label": list(range(6))}
        ds = datasets.Dataset.from_dict(rows, features=struct).cast_column("audio", datasets.Audio(sampling_rate=16000))
        ds.to_parquet(str(tmp_path / "v0.02" / f"{split}-00000-of-00001.parquet"))
    ds = load_task("speech_commands", data_dir=tmp_path)
    assert len(ds["train"]) == 5 and ds["train"]["label"] == [0, 1, 2, 3, 4]  # _silence_ dropped
    x = ds["test"][2]["input_values"]
    assert x.shape == (16000,) and x.dtype == np.float32 and np.allclose(x[:12000], clip, atol=1e-4)
    assert not x[12000:].any()
    assert ds["train"].features["label"].num_classes == 35


def test_offline_hub_id_gives_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match="pass data_dir pointing at a local copy"):
        load_task("text", hub_id="someone/not-cached-imdb")
