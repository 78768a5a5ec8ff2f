"""Tasks hosted on the Hugging Face Hub (docs/data.md §2): IMDb, CIFAR-10 and Speech Commands.

Online, the dataset is fetched by its Hub id; offline, ``data_dir`` may hold a local copy (a ``save_to_disk``
folder, or the Hub repository's parquet files). Either way each example is converted to our features here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

from ..spec import DataFormatError, Source
from ..vocab import BYTE_VOCAB, EOS_ID
from .audio import read_wav, to_fixed_length

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPEECH_COMMANDS_WORDS = (
    "yes",
    "no",
    "up",
    "down",
    "left",
    "right",
    "on",
    "off",
    "stop",
    "go",
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "bed",
    "bird",
    "cat",
    "dog",
    "happy",
    "house",
    "marvin",
    "sheila",
    "tree",
    "wow",
    "backward",
    "forward",
    "follow",
    "learn",
    "visual",
)
HUB_SPLITS = {"train": "train", "validation": "validation", "test": "test"}
IMDB_FORMAT = "rows with 'text' (a string) and 'label' (0 neg, 1 pos)"
CIFAR_FORMAT = "rows with 'img' (a 32x32 image) and 'label' (0..9)"


def locate_hub(task: str, hub_id: str, config: str | None, data_dir: str | Path | None) -> Source:
    """A local copy under ``data_dir`` (``dataset_dict.json`` or ``*.parquet`` files) or else the Hub id."""
    if data_dir is None:
        return Source(hub_id=hub_id, extra={"config": config})
    root = Path(data_dir).expanduser()
    if (root / "dataset_dict.json").is_file():
        return Source(root=root, files=(root / "dataset_dict.json",), extra={"kind": "disk"})
    files = tuple(sorted(root.rglob("*.parquet"))) if root.is_dir() else ()
    if not files:
        raise FileNotFoundError(
            f"{task}: no local copy under {str(root)!r}: looked for {root / 'dataset_dict.json'} (a save_to_disk "
            f"folder) and for {root}/**/<split>-*.parquet (the Hub repository {hub_id!r} downloaded). "
            "Pass data_dir=None to fetch it from the Hub when online."
        )
    return Source(root=root, files=files, extra={"kind": "parquet"})


def open_hub(source: Source, splits: Sequence[str]) -> dict[str, datasets.Dataset]:
    """The requested splits of the source, as Hub-format ``datasets.Dataset`` objects."""
    if source.hub_id is not None:
        try:
            loaded = datasets.load_dataset(source.hub_id, source.extra.get("config"))
        except Exception as err:  # offline, unknown id, a script-based repository: all need the same advice
            raise FileNotFoundError(
                f"could not load {source.hub_id!r} from the Hub ({type(err).__name__}: {err}). Offline, pass "
                "data_dir pointing at a local copy (a save_to_disk folder or the repository's parquet files)."
            ) from err
    elif source.extra["kind"] == "disk":
        loaded = datasets.load_from_disk(str(source.root))
    else:
        data_files = {}
        for split in splits:
            names = [p for p in source.files if p.name.startswith(f"{split}-") or p.stem == split]
            if names:
                data_files[split] = [str(p) for p in names]
        loaded = datasets.load_dataset("parquet", data_files=data_files)
    missing = [s for s in splits if s not in loaded]
    if missing:
        where = source.hub_id or source.root
        raise FileNotFoundError(f"{where}: splits {missing} not found (found {list(loaded)})")
    return {s: loaded[s] for s in splits}


def require_columns(ds: datasets.Dataset, columns: Sequence[str], what: str) -> None:
    """Raise :class:`DataFormatError` naming the missing columns and those found."""
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise DataFormatError(
            f"{what}: columns {missing} are missing (found {ds.column_names}); expected {list(columns)}"
        )


def imdb_examples(ds: datasets.Dataset, max_length: int, append_eos: bool) -> Callable[[], Iterator[dict]]:
    """IMDb rows (``text``, ``label``) as UTF-8 byte ids truncated to ``max_length``."""
    require_columns(ds, ["text", "label"], "imdb")
    keep = max_length - 1 if append_eos else max_length
    tail = [EOS_ID] if append_eos else []

    def gen() -> Iterator[dict]:
        for i, ex in enumerate(ds):
            if ex["label"] not in (0, 1):
                raise DataFormatError(
                    f"imdb item {i}: label {ex['label']!r} is not 0 (neg) or 1 (pos); expected {IMDB_FORMAT}"
                )
            if not isinstance(ex["text"], str):
                raise DataFormatError(f"imdb item {i}: text {ex['text']!r} is not a string; expected {IMDB_FORMAT}")
            yield {"input_ids": BYTE_VOCAB.encode_text(ex["text"], keep) + tail, "label": ex["label"]}

    return gen


def cifar_examples(ds: datasets.Dataset, rgb: bool) -> Callable[[], Iterator[dict]]:
    """CIFAR-10 rows (``img``, ``label``) as raster-order pixels: grey (ITU-R 601 luma, L=1024, C=1) or RGB (C=3)."""
    require_columns(ds, ["img", "label"], "cifar10")

    def gen() -> Iterator[dict]:
        for i, ex in enumerate(ds):
            img: Image.Image = ex["img"]
            if not isinstance(img, Image.Image):
                raise DataFormatError(f"cifar10 item {i}: 'img' is {type(img).__name__}; expected {CIFAR_FORMAT}")
            if img.size != (32, 32):
                raise DataFormatError(
                    f"cifar10 item {i}: image is {img.size[0]}x{img.size[1]}; expected {CIFAR_FORMAT}"
                )
            if not isinstance(ex["label"], int) or not 0 <= ex["label"] < 10:
                raise DataFormatError(
                    f"cifar10 item {i}: label {ex['label']!r} is outside 0..9; expected {CIFAR_FORMAT}"
                )
            pixels = np.asarray(img.convert("RGB" if rgb else "L"), dtype=np.float32)  # (32, 32[, 3])
            yield {"input_values": pixels.reshape(1024, 3 if rgb else 1), "label": ex["label"]}

    return gen


def speech_commands_examples(ds: datasets.Dataset) -> Callable[[], Iterator[dict]]:
    """Speech Commands rows (``audio``, ``label``) as raw 16 kHz waveforms padded to 16000 samples (35 words).

    Rows whose label is not one of the 35 words (``_silence_``) are dropped, as in the paper's 35-way task.
    """
    require_columns(ds, ["audio", "label"], "speech_commands")
    names = ds.features["label"].names if isinstance(ds.features["label"], datasets.ClassLabel) else None
    if names is None:
        raise DataFormatError("speech_commands: the label column must be a ClassLabel with the word names")
    ours = {w: i for i, w in enumerate(SPEECH_COMMANDS_WORDS)}
    remap = np.array([ours.get(n, -1) for n in names])
    raw = ds.cast_column("audio", datasets.Audio(decode=False))

    def gen() -> Iterator[dict]:
        for i, ex in enumerate(raw):
            if not isinstance(ex["label"], int) or not 0 <= ex["label"] < len(remap):  # -1 would wrap around
                raise DataFormatError(
                    f"speech_commands item {i}: label {ex['label']!r} is outside 0..{len(remap) - 1}; expected a "
                    "ClassLabel index"
                )
            label = int(remap[ex["label"]])
            if label < 0:
                continue
            audio = ex["audio"] or {}
            name = f"speech_commands item {i} ({audio.get('path')})"
            if audio.get("bytes"):
                data = audio["bytes"]
            elif audio.get("path") and Path(audio["path"]).is_file():
                data = Path(audio["path"]).read_bytes()
            else:
                raise DataFormatError(f"{name}: no audio bytes and no readable file; expected a PCM WAV clip")
            samples, rate = read_wav(data, name=name)
            yield {"input_values": to_fixed_length(samples, rate), "label": label}

    return gen
