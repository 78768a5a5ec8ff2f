"""The SPT pretraining set (train split only) and the fingerprint that guards evaluation against leakage.

Pretraining must see only training inputs (docs/data.md §6). :func:`pretraining_dataset` builds the set from the
train split; :func:`fingerprint_examples` records a hash of every model input sequence it holds (sha256 over the
canonical bytes), as a digest for ``results.json`` and a sorted array of 8-byte prefixes the pipeline saves as
``.npy``; :func:`check_no_overlap` refuses an evaluation split that shares an input with it unless allowed.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from .collators import EPOCH_KEY, INDEX_KEY
from .spec import TaskSpec

INPUT_COLUMNS = ("input_ids", "input_values")


class DataLeakageError(RuntimeError):
    """An evaluation split shares model inputs with the data used for pretraining."""


def pretraining_dataset(splits: datasets.DatasetDict, spec: TaskSpec) -> datasets.Dataset:
    """The train split's inputs without labels; for document pairs, every document as its own row."""
    train = splits["train"]
    if not spec.paired:
        return train.remove_columns([c for c in train.column_names if c not in INPUT_COLUMNS])
    first = train.select_columns(["input_ids"])
    second = train.select_columns(["input_ids_2"]).rename_column("input_ids_2", "input_ids").cast(first.features)
    return datasets.concatenate_datasets([first, second])


class IndexedExamples(torch.utils.data.Dataset):
    """A dataset whose examples say which read they are: their index and the current epoch (``EPOCH_KEY``,
    ``INDEX_KEY``), so that the masked-SPT collator draws each example's mask as a pure function of (seed, epoch,
    index). The trainer calls :meth:`set_epoch` before each epoch's data loader is iterated; a fixed ``epoch`` gives
    the same masks at every read (evaluation)."""

    def __init__(self, dataset: datasets.Dataset, epoch: int = 0):
        self.dataset, self.epoch = dataset, epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**self.dataset[int(index)], EPOCH_KEY: self.epoch, INDEX_KEY: int(index)}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        rows = self.dataset[[int(i) for i in indices]]  # one Arrow read for the whole batch
        names = list(rows)
        return [
            {**{name: rows[name][k] for name in names}, EPOCH_KEY: self.epoch, INDEX_KEY: int(i)}
            for k, i in enumerate(indices)
        ]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def column_names(self) -> list[str]:
        return self.dataset.column_names


def _row_digests(dataset: datasets.Dataset, batch_size: int = 1000) -> list[bytes]:
    """sha256 of each row's input sequence(s); a second document (``input_ids_2``) is hashed as its own row."""
    columns = [c for c in ("input_ids", "input_ids_2", "input_values") if c in dataset.column_names]
    if not columns:
        raise ValueError(f"no input columns {INPUT_COLUMNS} in {dataset.column_names}")
    out = []
    for batch in dataset.select_columns(columns).with_format("numpy").iter(batch_size=batch_size):
        for col in columns:
            kind = "input_values" if col == "input_values" else "input_ids"
            dtype = np.float32 if kind == "input_values" else np.int64
            for seq in batch[col]:
                data = np.ascontiguousarray(np.asarray(seq, dtype=dtype))
                out.append(hashlib.sha256(kind.encode() + str(data.shape).encode() + data.tobytes()).digest())
    return out


@dataclass(frozen=True)
class DataFingerprint:
    """What pretraining saw: a digest of the set of inputs and the sorted 8-byte prefixes of their hashes.

    Args:
        digest: sha256 hex over the sorted per-input hashes (order-independent).
        num_examples: number of input sequences hashed.
        hashes: sorted unique uint64 prefixes (save with ``np.save``; restore with :meth:`from_hashes`).
    """

    digest: str
    num_examples: int
    hashes: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary for ``results.json`` (the hash array is saved separately)."""
        return {"digest": self.digest, "num_examples": self.num_examples, "num_unique": int(self.hashes.size)}

    @classmethod
    def from_hashes(cls, hashes: np.ndarray, digest: str = "", num_examples: int = 0) -> DataFingerprint:
        """Rebuild from a saved hash array (the digest is informative only); it must be 1-D integers."""
        hashes = np.asarray(hashes)
        if hashes.ndim != 1 or hashes.dtype.kind not in "ui":
            raise ValueError(
                f"fingerprint hashes must be a 1-D integer array, got {hashes.dtype} of shape {hashes.shape}"
            )
        return cls(digest, num_examples or int(hashes.size), np.unique(hashes.astype(np.uint64)))

    @classmethod
    def load(cls, path: str | Path) -> DataFingerprint:
        """Read a hash array saved with ``np.save`` (e.g. from a Hub checkpoint): a plain ``.npy``, never unpickled.

        The header is checked against the file size before anything is allocated (a forged shape cannot exhaust
        memory); object arrays, which would need pickle, are refused.
        """
        readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        with open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                if version not in readers:
                    raise ValueError(f".npy format version {version} is not supported")
                shape, fortran_order, dtype = readers[version](f)
                if dtype.hasobject:
                    raise ValueError("object arrays would need pickle")
                size = int(np.prod(shape, dtype=object)) * dtype.itemsize
                held = os.fstat(f.fileno()).st_size - f.tell()
                if held != size:
                    raise ValueError(f"the header declares {size} bytes of data, the file holds {held}")
                data = f.read(size)
            except (ValueError, EOFError, OSError) as err:
                raise ValueError(f"{path}: not a plain .npy array of fingerprint hashes ({err})") from None
        hashes = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")
        return cls.from_hashes(hashes)


def fingerprint_info(dataset: datasets.Dataset) -> DataFingerprint:
    """The :class:`DataFingerprint` of every input sequence in ``dataset``."""
    digests = _row_digests(dataset)
    digests_sorted = sorted(digests)
    digest = hashlib.sha256(b"".join(digests_sorted)).hexdigest()
    prefixes = np.array([int.from_bytes(d[:8], "little") for d in digests], dtype=np.uint64)
    return DataFingerprint(digest, len(digests), np.unique(prefixes))


def fingerprint_examples(dataset: datasets.Dataset) -> str:
    """sha256 hex digest of the set of input sequences of ``dataset`` (hash of the sorted per-example hashes)."""
    return fingerprint_info(dataset).digest


def check_no_overlap(
    pretrain: DataFingerprint | np.ndarray,
    eval_dataset: datasets.Dataset,
    allow_overlap: bool = False,
    name: str = "evaluation",
) -> int:
    """Count the inputs of ``eval_dataset`` that pretraining saw; raise unless ``allow_overlap`` (then warn).

    Returns the number of overlapping input sequences (8-byte hash prefixes: false positives ~ n·m / 2⁶⁴).
    """
    known = pretrain.hashes if isinstance(pretrain, DataFingerprint) else np.asarray(pretrain, dtype=np.uint64)
    digests = _row_digests(eval_dataset)
    prefixes = np.array([int.from_bytes(d[:8], "little") for d in digests], dtype=np.uint64)
    overlap = int(np.isin(prefixes, known).sum())
    if overlap:
        msg = (
            f"{overlap} of {len(prefixes)} input sequences of the {name} split were used for pretraining "
            "(SPT must see the train split only)"
        )
        if not allow_overlap:
            raise DataLeakageError(msg + "; pass allow_overlap=True to evaluate anyway")
        warnings.warn(msg, stacklevel=2)
    return overlap
