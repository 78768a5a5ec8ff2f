"""The task specification: what a model and a collator need to know about a benchmark.

A :class:`TaskSpec` says what the inputs are (tokens of a vocabulary, or ``num_channels`` continuous values per
step), how long they get, what is predicted (classes or a regression target) and measured, the default pooling,
the normalisation of continuous inputs and the default target of the SPT objectives (docs/method.md §2, §7). Each task
of the paper is a subclass in :mod:`spt_hf.data.tasks` that sets these defaults and knows how to find and read its
files; the fields a user may change are listed in its ``OPTIONS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import datasets
import numpy as np

from ..modeling.configuration_sequence import POOLING_MODES
from .vocab import Vocabulary, special_token_ids

INPUT_KINDS = ("tokens", "continuous")
PROBLEM_TYPES = ("single_label_classification", "regression")
SPT_TARGETS = ("tokens", "values", "levels")
STORAGE_DTYPES = ("float32", "uint8")
# How raw text becomes the symbols of a token vocabulary (what a saved tokenizer reproduces): UTF-8 bytes; one
# symbol per character; whitespace-separated symbols; LRA's ListOps rule (parentheses dropped, then whitespace).
TOKENIZATIONS = ("bytes", "chars", "whitespace", "listops")
# options of ``load_task`` that are not task options (``get_task_spec`` accepts and ignores them, except for a task
# that lists one in its OPTIONS: the custom task's source folder and splits)
LOAD_OPTIONS = (
    "cache_dir",
    "data_dir",
    "split_seed",
    "validation_from",
    "num_train_examples",
    "train_fraction",
    "seed",
)


class DataFormatError(ValueError):
    """A data file does not have the expected format; the message names the file, the line or item, and the format."""


def text_lines(path: Path, fmt: str, newline: str | None = "") -> Iterator[tuple[int, str]]:
    """Numbered lines of a UTF-8 text file, line ends kept and a leading byte-order mark dropped.

    Bytes that are not UTF-8 raise :class:`DataFormatError` naming the line and column (a text-mode ``open``
    would raise a bare ``UnicodeDecodeError`` a whole read-ahead buffer later, naming no line).
    """
    with open(path, encoding="utf-8", errors="surrogateescape", newline=newline) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.isascii():  # rare: only then look for undecodable bytes (kept as lone surrogates)
                line = line.removeprefix("\ufeff") if lineno == 1 else line
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as err:
                    byte = ord(line[err.start]) - 0xDC00
                    raise DataFormatError(
                        f"{path}:{lineno}: not UTF-8 text (byte 0x{byte:02X} at column {err.start + 1}); "
                        f"expected format: {fmt}"
                    ) from None
            yield lineno, line


@dataclass(frozen=True)
class Normalization:
    """Per-channel affine normalisation ``(x - mean) / std`` of continuous inputs.

    Args:
        mean: one value per channel, in the units of the raw signal stored in the dataset.
        std: one positive value per channel.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean has {len(self.mean)} channels, std {len(self.std)}")
        if any(not s > 0 for s in self.std):
            raise ValueError(f"std must be positive, got {self.std}")

    def apply(self, values: np.ndarray) -> np.ndarray:
        """Normalise raw values of shape ``(..., C)``; returns float32."""
        mean = np.asarray(self.mean, dtype=np.float32)  # (C,)
        std = np.asarray(self.std, dtype=np.float32)  # (C,)
        return ((np.asarray(values, dtype=np.float32) - mean) / std).astype(np.float32, copy=False)


@dataclass(frozen=True)
class Source:
    """Where a task's data was found: local files (hashed into the cache key) or a Hub dataset id."""

    root: Path | None = None
    files: tuple[Path, ...] = ()
    hub_id: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


# A raw split is a zero-argument callable yielding examples already in the task's features.
RawSplits = dict[str, Any]


@dataclass(frozen=True)
class TaskSpec:
    """Everything a model, a collator and the pipeline need to know about one task.

    Args:
        name: the task name used by ``load_task``.
        input_kind: ``"tokens"`` (``input_ids`` over ``vocab``) or ``"continuous"`` (``input_values``: the raw
            signal values of L steps and ``num_channels`` channels, stored flat in step-major order, L·C values;
            ``reshape(-1, num_channels)`` gives (L, C)).
        max_length: the longest sequence the task produces (token sequences are truncated to it at load time,
            counting the end token when ``append_eos``).
        num_labels: number of classes, 1 for regression.
        problem_type: ``"single_label_classification"`` or ``"regression"`` (transformers' names).
        metric: ``"accuracy"`` or ``"r2"``.
        pooling: default pooling of the classification head (docs/method.md §4).
        vocab: the token vocabulary (token inputs only).
        num_channels: channels per step of continuous inputs (1 for token inputs).
        normalization: per-channel mean/std of continuous inputs; ``None`` means "fit on the train split" with
            :func:`fit_normalization` before building a collator.
        num_quantized_levels: number of raw intensity levels for ``"levels"`` SPT targets (256 for Pathfinder).
        spt_target: default target of the SPT objectives: ``"tokens"``, ``"values"`` (L1/MSE on normalised values)
            or ``"levels"`` (cross-entropy over raw quantised levels).
        label_names: class names, written into the ``ClassLabel`` feature.
        paired: two documents per example (Retrieval): ``input_ids`` and ``input_ids_2``.
        append_eos: append the end token to every token sequence.
        tokenization: how raw text maps to the symbols of ``vocab`` (one of ``TOKENIZATIONS``), so that a checkpoint
            can carry a tokenizer for raw inputs; ``None`` where the inputs are not text.
        validation_size: size (fraction of train if < 1, else a count) of the validation split carved from train
            when the source has no validation split.
        split_sizes: train/validation/test fractions (or counts, when they sum to more than 1) of a source that
            comes as one pool (Pathfinder 80/10/10, digits 500/400/897).
        storage_dtype: how the cache stores continuous values: ``"uint8"`` for 8-bit sources (pixels, 4x smaller
            than float32 and exact), ``"float32"`` otherwise. The collators turn both into the same float32 batches.
    """

    name: str = ""
    input_kind: str = "tokens"
    max_length: int = 1024
    num_labels: int = 2
    problem_type: str = "single_label_classification"
    metric: str = "accuracy"
    pooling: str = "mean"
    vocab: Vocabulary | None = None
    num_channels: int = 1
    normalization: Normalization | None = None
    num_quantized_levels: int | None = None
    spt_target: str = "tokens"
    label_names: tuple[str, ...] | None = None
    paired: bool = False
    append_eos: bool = False
    tokenization: str | None = None
    validation_size: float = 0.1
    split_sizes: tuple[float, float, float] = (0.8, 0.1, 0.1)
    storage_dtype: str = "float32"

    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length",)
    # Training examples of the task's published data as ``load_task`` splits it by default (validation carved from
    # train), and the part carved for validation; from the dataset's published sizes, each task naming its source.
    # None where unknown (the dry run then needs the recipe's ``max_steps`` or ``num_train_examples``).
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = None
    # The Hub's task type of a model finetuned on the task (its model card's `pipeline_tag`), by the data's modality.
    HUB_TASK_TYPE: ClassVar[str] = "other"
    # Which of spt_hf's generators (`data/generators`) writes the task's files: "listops", "pathfinder" or None.
    GENERATOR: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        checks = [
            ("input_kind", INPUT_KINDS),
            ("problem_type", PROBLEM_TYPES),
            ("pooling", POOLING_MODES),
            ("spt_target", SPT_TARGETS),
            ("storage_dtype", STORAGE_DTYPES),
        ]
        for field, allowed in checks:
            if getattr(self, field) not in allowed:
                raise ValueError(f"{type(self).__name__}.{field}={getattr(self, field)!r}; allowed: {allowed}")
        if self.input_kind == "tokens" and (self.vocab is None or self.spt_target != "tokens"):
            raise ValueError(f"task {self.name!r}: token inputs need a vocab and spt_target='tokens'")
        if self.input_kind == "continuous" and self.spt_target == "tokens":
            raise ValueError(f"task {self.name!r}: continuous inputs need spt_target 'values' or 'levels'")
        if self.spt_target == "levels" and not self.num_quantized_levels:
            raise ValueError(f"task {self.name!r}: spt_target='levels' needs num_quantized_levels")
        if self.normalization is not None and len(self.normalization.mean) != self.num_channels:
            raise ValueError(f"task {self.name!r}: normalisation has the wrong number of channels")
        if self.tokenization is not None and (self.input_kind != "tokens" or self.tokenization not in TOKENIZATIONS):
            raise ValueError(
                f"task {self.name!r}: tokenization={self.tokenization!r}; token tasks allow {TOKENIZATIONS}"
            )
        if self.max_length < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length}")

    @classmethod
    def from_options(cls, **options: Any) -> TaskSpec:
        """Instantiate the task with user options; unknown options raise naming the allowed ones."""
        return cls(**cls.check_options(options))

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Raise on options the task does not have; dict values become sorted item tuples (hashable)."""
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if unknown:
            raise TypeError(f"task {cls.name!r} got unknown options {unknown}; allowed: {list(cls.OPTIONS)}")
        return {k: tuple(sorted(v.items())) if isinstance(v, dict) else v for k, v in options.items()}

    @property
    def is_regression(self) -> bool:
        """True for regression tasks (one float label per example)."""
        return self.problem_type == "regression"

    def train_examples(self, validation_from: str = "train") -> int | None:
        """Training examples of the published data as ``load_task`` splits it (``TRAIN_EXAMPLES``): with
        ``validation_from="test"`` the part carved for validation stays in train. None where unknown."""
        if self.TRAIN_EXAMPLES is None:
            return None
        train, carved = self.TRAIN_EXAMPLES
        return train + carved if validation_from == "test" else train

    @property
    def vocab_size(self) -> int | None:
        """Size of the token vocabulary including the special tokens; ``None`` for continuous inputs."""
        return len(self.vocab) if self.vocab is not None else None

    def options(self) -> dict[str, Any]:
        """The user-settable fields and their values (part of the cache key)."""
        return {k: getattr(self, k) for k in self.OPTIONS}

    def features(self) -> datasets.Features:
        """The ``datasets`` features of every split of this task."""
        if self.is_regression:
            label = datasets.Value("float32")
        else:
            names = list(self.label_names) if self.label_names else [str(i) for i in range(self.num_labels)]
            label = datasets.ClassLabel(names=names)
        if self.input_kind == "tokens":
            cols = {"input_ids": datasets.List(datasets.Value("int32"))}
            if self.paired:
                cols["input_ids_2"] = datasets.List(datasets.Value("int32"))
        else:
            cols = {"input_values": datasets.List(datasets.Value(self.storage_dtype))}  # L·C values, step-major
        return datasets.Features({**cols, "label": label})

    def encode(self, example: dict[str, Any], where: str) -> dict[str, Any]:
        """An example of a reader, (L, C) values for continuous inputs, in the cache's storage: flat, in
        ``storage_dtype``; 8-bit storage refuses values that are not integers in [0, 255] (it would change them)."""
        if self.input_kind != "continuous":
            return example
        values = np.asarray(example["input_values"])
        if values.ndim != 2 or values.shape[1] != self.num_channels:
            raise DataFormatError(f"{where}: values of shape {values.shape}, expected (L, {self.num_channels})")
        if self.storage_dtype == "uint8":
            if values.size and (values.min() < 0 or values.max() > 255 or not np.array_equal(values, np.round(values))):
                raise DataFormatError(f"{where}: values are not 8-bit integers (0-255) as task {self.name!r} stores")
            return {**example, "input_values": values.astype(np.uint8).reshape(-1)}
        return {**example, "input_values": values.astype(np.float32).reshape(-1)}

    def model_config_kwargs(self) -> dict[str, Any]:
        """Fields a model config needs so pretraining and finetuning agree on inputs and heads."""
        kwargs: dict[str, Any] = {
            "num_labels": self.num_labels,
            "problem_type": self.problem_type,
            "pooling": self.pooling,
            "input_kind": self.input_kind,
            "max_position_embeddings": self.max_length,
        }
        if self.label_names is not None and not self.is_regression:  # pipeline() answers with the class names
            kwargs["id2label"] = dict(enumerate(self.label_names))
            kwargs["label2id"] = {name: i for i, name in enumerate(self.label_names)}
        if self.input_kind == "tokens":
            kwargs.update(vocab_size=self.vocab_size, **special_token_ids())
        else:
            kwargs.update(num_channels=self.num_channels, num_quantized_levels=self.num_quantized_levels)
        return kwargs

    def locate(self, data_dir: str | Path | None) -> Source:
        """Find the task's files under ``data_dir`` (or decide on a Hub id); raise naming what was looked for."""
        raise NotImplementedError

    def build(self, source: Source) -> RawSplits:
        """The raw splits as example generators: ``train``/``validation``/``test``, or one ``pool`` to divide."""
        raise NotImplementedError


def fit_normalization(spec: TaskSpec, train: datasets.Dataset, batch_size: int = 256) -> TaskSpec:
    """Return ``spec`` with per-channel mean/std of ``train``'s ``input_values`` if it has no normalisation yet.

    Statistics come from the train split only, over real (unpadded) steps, in float64.
    """
    if spec.input_kind != "continuous" or spec.normalization is not None:
        return spec
    total = np.zeros(spec.num_channels)  # (C,)
    total_sq = np.zeros(spec.num_channels)  # (C,)
    count = 0
    for batch in train.with_format("numpy").iter(batch_size=batch_size):
        for values in batch["input_values"]:  # L·C values, step-major
            values = np.asarray(values, dtype=np.float64).reshape(-1, spec.num_channels)  # (L, C)
            total += values.sum(0)
            total_sq += (values**2).sum(0)
            count += values.shape[0]
    if count == 0:
        raise ValueError(f"cannot fit a normalisation for {spec.name!r} on an empty train split")
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    std = np.where(std > 1e-8, std, 1.0)
    norm = Normalization(tuple(float(m) for m in mean), tuple(float(s) for s in std))
    return dataclasses.replace(spec, normalization=norm)
