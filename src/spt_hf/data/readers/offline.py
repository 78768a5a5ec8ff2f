"""Real data that installs offline (docs/data.md §4): scikit-learn's digits, Fashion-MNIST, asterisk spoken digits.

These are the project's stand-ins for the image and speech benchmarks on machines that cannot download them:
real recorded data in the same shapes as the benchmark (a 1024-step grey image, a 16 kHz one-second clip).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..spec import DataFormatError, Source
from ..vocab import NUM_SPECIAL_TOKENS
from .audio import read_wav, to_fixed_length

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
ASTERISK_SOUNDS_DIR = Path("/usr/share/asterisk/sounds")
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
IDX_FORMAT = "a gzipped IDX file (magic 2051 for images N x 28 x 28 uint8, 2049 for labels N uint8)"


def locate_digits() -> Source:
    """scikit-learn's bundled ``digits.csv.gz`` (1,797 real 8x8 scans, intensities 0-16), found without importing
    scikit-learn (0.9 s that a phase on the cached task would otherwise pay before its first step)."""
    spec = importlib.util.find_spec("sklearn")
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else Path()
    path = folder / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"digits: scikit-learn's bundled {path} is missing (pip install scikit-learn)")
    return Source(root=path.parent, files=(path,))


def digits_examples(as_tokens: bool) -> Callable[[], Iterator[dict]]:
    """All 1,797 digits in raster order: 64 tokens (level + 4) or 64 steps of one raw value."""
    from sklearn.datasets import load_digits

    def gen() -> Iterator[dict]:
        bunch = load_digits()
        levels = bunch.data.astype(np.int32)  # (N, 64) ints 0..16
        for row, label in zip(levels, bunch.target, strict=True):
            if as_tokens:
                yield {"input_ids": (row + NUM_SPECIAL_TOKENS).tolist(), "label": int(label)}
            else:
                yield {"input_values": row.astype(np.float32).reshape(64, 1), "label": int(label)}  # (L, 1)

    return gen


def locate_fashion_mnist(data_dir: str | Path | None) -> Source:
    """The four IDX files of Fashion-MNIST (Debian ``dataset-fashion-mnist`` by default)."""
    root = Path(data_dir).expanduser() if data_dir is not None else FASHION_MNIST_DIR
    names = [n for pair in FASHION_MNIST_FILES.values() for n in pair]
    missing = [str(root / n) for n in names if not (root / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"fashion_mnist: missing {missing}. Install the Debian package `dataset-fashion-mnist` "
            f"(files in {FASHION_MNIST_DIR}) or point data_dir at a folder holding {names}."
        )
    return Source(root=root, files=tuple(root / n for n in names))


def read_idx(path: Path, magic: int, max_bytes: int = 2**31) -> np.ndarray:
    """Read one gzipped IDX file of unsigned bytes; checks the magic number and the declared sizes.

    Only the declared number of bytes (at most ``max_bytes``) is decompressed, so a corrupt header or a
    decompression bomb cannot exhaust memory.
    """
    ndim = magic - 2048
    offset = 4 + 4 * ndim
    try:
        with gzip.open(path, "rb") as f:
            header = f.read(offset)
            if len(header) < offset or int.from_bytes(header[:4], "big") != magic:
                raise DataFormatError(f"{path}: bad header (expected magic {magic}); expected {IDX_FORMAT}")
            dims = [int.from_bytes(header[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
            size = 1
            for d in dims:
                size *= d
            if size > max_bytes:
                raise DataFormatError(f"{path}: header says {dims}, over {max_bytes} bytes; expected {IDX_FORMAT}")
            data = f.read(size + 1)
    except (OSError, EOFError, zlib.error) as err:
        raise DataFormatError(f"{path}: cannot read ({type(err).__name__}: {err}); expected {IDX_FORMAT}") from None
    if len(data) != size:
        raise DataFormatError(f"{path}: header says {dims} but holds {len(data)} bytes; expected {IDX_FORMAT}")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def fashion_mnist_examples(root: Path, split: str, limit: int | None) -> Callable[[], Iterator[dict]]:
    """One Fashion-MNIST split (first ``limit`` items), padded with 2 zero pixels per side to 32x32, L=1024."""
    image_file, label_file = (root / n for n in FASHION_MNIST_FILES[split])

    def gen() -> Iterator[dict]:
        images = read_idx(image_file, 2051)  # (N, 28, 28)
        labels = read_idx(label_file, 2049)  # (N,)
        if images.shape[1:] != (28, 28):
            raise DataFormatError(f"{image_file}: images are {images.shape[1]}x{images.shape[2]}, expected 28x28")
        if images.shape[0] != labels.shape[0]:
            raise DataFormatError(f"{label_file}: {labels.shape[0]} labels for {images.shape[0]} images")
        n = images.shape[0] if limit is None else min(limit, images.shape[0])
        for i in range(n):
            if labels[i] > 9:
                raise DataFormatError(f"{label_file}: item {i} has label {labels[i]}, expected 0..9")
            padded = np.pad(images[i], 2).astype(np.float32)  # (32, 32)
            yield {"input_values": padded.reshape(1024, 1), "label": int(labels[i])}  # (L, 1)

    return gen


def locate_spoken_digits(data_dir: str | Path | None) -> Source:
    """Unique ``<voice>/digits/<d>.wav`` clips (d = 0..9) under the asterisk sounds folder."""
    root = Path(data_dir).expanduser() if data_dir is not None else ASTERISK_SOUNDS_DIR
    seen: dict[Path, Path] = {}
    for path in sorted(root.glob("*/digits/[0-9].wav")) if root.is_dir() else []:
        if not path.is_file():  # a named pipe would block the read
            continue
        seen.setdefault(path.resolve(), path)  # en, en_US -> en_US_f_Allison are symlinks to one voice
    if not seen:
        raise FileNotFoundError(
            f"spoken_digits: no {root}/<voice>/digits/<0-9>.wav files. Install the Debian package "
            "`asterisk-core-sounds-en-wav` (and -es/-fr/-it/-ru-wav for more voices) or point data_dir at a "
            "folder of that layout."
        )
    return Source(root=root, files=tuple(sorted(seen)))


def spoken_digit_splits(source: Source, seed: int) -> dict[str, list[tuple[Path, int]]]:
    """Clips split 60/20/20, stratified by digit when every digit has >= 3 clips, else uniformly; seeded."""
    clips, hashes = [], set()
    for path in source.files:
        digest = hashlib.sha256(path.read_bytes()).digest()
        if digest not in hashes:  # the same recording shipped twice would leak across splits
            hashes.add(digest)
            clips.append((path, int(path.stem)))
    rng = np.random.default_rng(seed)
    groups = [[c for c in clips if c[1] == d] for d in range(10)]
    if min(len(g) for g in groups) < 3:
        groups = [clips]
    out: dict[str, list[tuple[Path, int]]] = {"train": [], "validation": [], "test": []}
    for group in groups:
        order = rng.permutation(len(group))
        n_val = max(1, round(0.2 * len(group)))
        n_test = max(1, round(0.2 * len(group)))
        out["validation"] += [group[i] for i in order[:n_val]]
        out["test"] += [group[i] for i in order[n_val : n_val + n_test]]
        out["train"] += [group[i] for i in order[n_val + n_test :]]
    return out


def spoken_digit_examples(clips: list[tuple[Path, int]]) -> Callable[[], Iterator[dict]]:
    """Raw 16 kHz waveforms (resampled from 8 kHz), padded to 16000 samples, with the digit as label."""

    def gen() -> Iterator[dict]:
        for path, digit in clips:
            samples, rate = read_wav(path)
            yield {"input_values": to_fixed_length(samples, rate), "label": digit}  # (16000, 1)

    return gen
