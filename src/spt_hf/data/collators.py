"""Collators: padding, and the SPT objectives' inputs and targets (docs/method.md §2).

All collators take the list of examples a ``DataLoader`` or the ``Trainer`` hands them (python lists, numpy
arrays or tensors), pad right to the longest sequence in the batch (optionally to a multiple of
``pad_to_multiple_of``) and return a dict of tensors whose keys are the model's forward arguments. Continuous
inputs are normalised here with the spec's per-channel statistics; the cached dataset keeps raw values.

Masked SPT draws its mask here, anew every time an example is read: each position is selected independently with
probability ``mask_rate`` (or ⌊L·p/span⌋ non-overlapping spans), padding never, and every selected position is
replaced (no 80/10/10 rule). Examples that carry their epoch and index (``EPOCH_KEY``, ``INDEX_KEY``, added by
:class:`~spt_hf.data.pretraining.IndexedExamples`) get a mask that is a pure function of (seed, epoch, index): the
same whatever was read before, however many data-loader workers or processes there are, and after a resume. Plain
examples draw from the collator's own generator stream (``state_dict`` / ``load_state_dict``). A batch with no
selected position has ``labels == -100`` everywhere (tokens) or ``mask_positions`` all false (continuous): see
:func:`num_masked`.

Packed sequences (the SPT collators' ``packed``, the recipe's ``packed_sequences``): the padded batch, masks drawn as
above, is rearranged into padding-free rows (:func:`pack_sequences`): several sequences per row, each with
``position_ids`` restarting at 0 and no ``attention_mask``, as transformers' ``DataCollatorWithFlattening`` makes
them; the same examples, masks and loss targets, in fewer positions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .spec import TaskSpec
from .vocab import MASK_ID, PAD_ID

IGNORE_INDEX = -100
# The recipes' default `pad_to_multiple_of` (recipes/arguments.py): variable-length batches padded to one of a handful
# of lengths, so torch.compile and cuFFT see few shapes; the collators themselves pad to the longest unless given one.
PAD_MULTIPLE = 64
EPOCH_KEY, INDEX_KEY = "spt_epoch", "spt_index"  # where an example says which read of which example it is


def padded_length(n: int, multiple: int | None, cap: int | None = None) -> int:
    """n rounded up to a multiple, but not beyond `cap` (the task's longest sequence) unless n itself is."""
    if not multiple:
        return n
    rounded = -(-n // multiple) * multiple
    return rounded if cap is None else min(rounded, max(n, cap))


def pad_tokens(
    seqs: list[Any], pad_to_multiple_of: int | None = None, max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token sequences with PAD: ``input_ids`` (B, L) long and ``attention_mask`` (B, L) long; L rounded up
    to a multiple of ``pad_to_multiple_of`` but not beyond ``max_length`` (a model's longest input)."""
    if not seqs:
        raise ValueError("cannot collate an empty batch")
    arrays = [np.asarray(s, dtype=np.int64).reshape(-1) for s in seqs]
    length = padded_length(max(a.shape[0] for a in arrays), pad_to_multiple_of, max_length)
    ids = np.full((len(arrays), length), PAD_ID, dtype=np.int64)  # (B, L)
    mask = np.zeros((len(arrays), length), dtype=np.int64)  # (B, L)
    for i, a in enumerate(arrays):
        ids[i, : a.shape[0]] = a
        mask[i, : a.shape[0]] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def pad_values(
    seqs: list[Any], num_channels: int, pad_to_multiple_of: int | None = None, max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad raw continuous sequences with zeros: values (B, L, C) float32 and ``attention_mask`` (B, L); L as
    in `pad_tokens`.

    Each sequence is (L_i, C), or flat (L_i·C,) in step-major order as the task cache stores it (any dtype, uint8
    for 8-bit sources); a flat length that is not a multiple of C, or any other shape, raises.
    """
    if not seqs:
        raise ValueError("cannot collate an empty batch")
    arrays = []
    for i, s in enumerate(seqs):
        a = np.asarray(s, dtype=np.float32)
        if a.ndim == 1 and a.shape[0] % num_channels == 0:
            a = a.reshape(-1, num_channels)  # (L_i, C) from the cache's flat step-major values
        if a.ndim != 2 or a.shape[1] != num_channels:
            raise ValueError(
                f"example {i}: input_values of shape {a.shape}, expected (L, {num_channels}) or L·{num_channels} "
                "flat values"
            )
        if not np.isfinite(a).all():
            bad = np.argwhere(~np.isfinite(a))[0]
            raise ValueError(
                f"example {i} of the batch: input_values holds {a[tuple(bad)]} at step {bad[0]}, channel {bad[1]} "
                f"({int((~np.isfinite(a)).sum())} non-finite values); clean the data (a NaN would make every loss NaN)"
            )
        arrays.append(a)  # (L_i, C)
    length = padded_length(max(a.shape[0] for a in arrays), pad_to_multiple_of, max_length)
    values = np.zeros((len(arrays), length, num_channels), dtype=np.float32)  # (B, L, C)
    mask = np.zeros((len(arrays), length), dtype=np.int64)  # (B, L)
    for i, a in enumerate(arrays):
        values[i, : a.shape[0]] = a
        mask[i, : a.shape[0]] = 1
    return torch.from_numpy(values), torch.from_numpy(mask)


def normalize(spec: TaskSpec, raw: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``(raw - mean) / std`` per channel, zero at padding; (B, L, C) float32."""
    if spec.normalization is None:
        raise ValueError(
            f"task {spec.name!r} has no normalisation yet: call "
            "spt_hf.data.fit_normalization(spec, dataset['train']) and build the collator with its result"
        )
    mean = torch.tensor(spec.normalization.mean, dtype=torch.float32)  # (C,)
    std = torch.tensor(spec.normalization.std, dtype=torch.float32)  # (C,)
    return ((raw - mean) / std) * attention_mask.unsqueeze(-1).to(raw.dtype)  # (B, L, C)


def quantized_levels(spec: TaskSpec, raw: torch.Tensor) -> torch.Tensor:
    """Raw values rounded to int64 levels in ``[0, num_quantized_levels)`` (B, L, C)."""
    return raw.round().clamp_(0, spec.num_quantized_levels - 1).long()


def num_masked(batch: dict[str, torch.Tensor]) -> int:
    """Number of masked positions of a masked-SPT batch (0 means the batch carries no loss)."""
    if "mask_positions" in batch:
        return int(batch["mask_positions"].sum())
    return int((batch["labels"] != IGNORE_INDEX).sum())


def _resolve_target(spec: TaskSpec, target: str | None) -> str:
    target = target or spec.spt_target
    allowed = ("tokens",) if spec.input_kind == "tokens" else ("values", "levels")
    if target not in allowed:
        raise ValueError(f"target={target!r} for task {spec.name!r} ({spec.input_kind} inputs); allowed: {allowed}")
    if target == "levels" and not spec.num_quantized_levels:
        raise ValueError(f"target='levels' needs spec.num_quantized_levels (task {spec.name!r} has none)")
    return target


def _inputs(spec: TaskSpec, examples: list[dict], multiple: int | None) -> dict[str, torch.Tensor]:
    """Padded model inputs; continuous inputs normalised, with the raw values under ``"raw"``."""
    if spec.input_kind == "tokens":
        ids, mask = pad_tokens([ex["input_ids"] for ex in examples], multiple, spec.max_length)
        return {"input_ids": ids, "attention_mask": mask}
    raw, mask = pad_values([ex["input_values"] for ex in examples], spec.num_channels, multiple, spec.max_length)
    return {"input_values": normalize(spec, raw, mask), "attention_mask": mask, "raw": raw}


def packing_plan(lengths: list[int], capacity: int) -> list[list[int]]:
    """Which examples share a row: first-fit decreasing into rows of ``capacity`` positions, no sequence split.

    Examples are placed longest first (ties in batch order), each into the first row with room for it; a row lists
    its examples in the order they are placed, which is the order they lie in it. Deterministic.
    """
    if any(n > capacity for n in lengths):
        raise ValueError(f"a sequence of {max(lengths)} positions does not fit rows of {capacity}")
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, free in enumerate(room) if lengths[index] <= free), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(index)
        room[row] -= lengths[index]
    return rows


def pack_sequences(batch: dict[str, torch.Tensor], restart_labels: bool = False) -> dict[str, torch.Tensor]:
    """A right-padded SPT batch rearranged into padding-free rows: (R, L) instead of (B, L), R <= B.

    Every per-position tensor (``input_ids``, ``input_values``, ``mask_positions``, ``labels``) is copied sequence by
    sequence into the rows of :func:`packing_plan` (capacity L, the padded length, so no row is longer than the
    padded batch and attention never costs more). ``position_ids`` (R, L) restart at 0 at each sequence; what is left
    of a row is padding (PAD ids, -100 labels, zeros, no mask positions) numbered as a sequence of its own, so it
    attends only to itself. ``attention_mask`` is dropped: the model keeps the sequences apart by their restarting
    positions (transformers' packed-sequence masks). ``restart_labels`` (causal SPT) sets the label of each
    sequence's first position to -100, as ``DataCollatorWithFlattening`` does: the last position of one sequence
    must not learn to predict the first of the next.
    """
    real = batch["attention_mask"].numpy().astype(bool)  # (B, L)
    lengths = real.sum(1).tolist()
    capacity = real.shape[1]
    rows = packing_plan(lengths, capacity)
    row_of = np.empty(len(lengths), dtype=np.int64)  # (B,) the row of each sequence ...
    start_of = np.empty(len(lengths), dtype=np.int64)  # (B,) ... and where it starts there
    filled = np.empty(len(rows), dtype=np.int64)  # (R,) real positions of each row
    for row, members in enumerate(rows):
        start = 0
        for index in members:
            row_of[index], start_of[index] = row, start
            start += lengths[index]
        filled[row] = start
    example, position = np.nonzero(real)  # (N,) every real position (right padding: 0..length-1)
    target = (row_of[example], start_of[example] + position)  # (N,) where it goes
    packed = {}
    for key, value in batch.items():  # numpy's indexing: one thread, no pool to wake on a busy machine
        if key == "attention_mask":
            continue
        if value.shape[:2] != real.shape:
            raise ValueError(f"cannot pack `{key}` of shape {tuple(value.shape)}: packing needs (B, L, ...) tensors")
        if key == "input_ids":
            fill = PAD_ID
        elif key == "labels" and not value.is_floating_point():
            fill = IGNORE_INDEX
        else:
            fill = 0
        source = value.numpy()
        rows_of_key = np.full((len(rows), capacity, *source.shape[2:]), fill, dtype=source.dtype)  # (R, L, ...)
        rows_of_key[target] = source[example, position]
        packed[key] = torch.from_numpy(rows_of_key)
    if restart_labels and "labels" in packed:
        packed["labels"][row_of, start_of] = IGNORE_INDEX
    # The row's padding is numbered as a sequence of its own, then every sequence from 0.
    position_ids = np.maximum(np.arange(capacity) - filled[:, None], 0)  # (R, L)
    position_ids[target] = position
    position_ids = torch.from_numpy(position_ids)
    packed["position_ids"] = position_ids
    return packed


def _stream_seed(*parts: int) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


@dataclass
class MaskedSPTCollator:
    """Masked (denoising) SPT batches: mask redrawn at every call, loss targets only at masked positions.

    Args:
        spec: the task.
        mask_rate: probability p that a position is selected.
        span_length: 1 for independent positions; > 1 selects ⌊L·p/span⌋ non-overlapping spans per example.
        seed: seed of the masks.
        rank: process rank, mixed into the seed of the generator stream of plain examples (indexed examples need no
            rank: their masks depend on the example, not on the process that reads it).
        target: ``"values"`` or ``"levels"`` for continuous inputs (default: ``spec.spt_target``).
        pad_to_multiple_of: round the padded length up to a multiple of this (not beyond the spec's max_length).
        packed: padding-free rows (:func:`pack_sequences`), the same masks; for models that keep packed sequences
            apart (the rotary Transformer with full attention).

    Token inputs give ``input_ids`` (selected -> MASK), ``attention_mask`` and ``labels`` (original id at selected
    positions, -100 elsewhere). Continuous inputs give normalised, unmasked ``input_values`` (B, L, C) (the model
    swaps in its mask vector), ``mask_positions`` (B, L) bool, ``attention_mask`` and ``labels`` (B, L, C):
    normalised values (float32) or raw levels (int64). Exact resumption: give indexed examples (the pipeline does);
    the generator stream of plain examples is re-seeded from the worker's seed in DataLoader workers.
    """

    spec: TaskSpec
    mask_rate: float = 0.5
    span_length: int = 1
    seed: int = 0
    rank: int = 0
    target: str | None = None
    pad_to_multiple_of: int | None = None
    packed: bool = False
    _generator: torch.Generator = field(init=False, repr=False)
    _worker: tuple[Any, torch.Generator] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not 0.0 < self.mask_rate < 1.0:
            raise ValueError(f"mask_rate must be in (0, 1), got {self.mask_rate}")
        if self.span_length < 1:
            raise ValueError(f"span_length must be >= 1, got {self.span_length}")
        self.target = _resolve_target(self.spec, self.target)
        self._generator = torch.Generator().manual_seed(_stream_seed(self.seed, self.rank))

    def state_dict(self) -> dict[str, Any]:
        """The mask stream's state (a resumed run continues the same masks)."""
        return {"seed": self.seed, "rank": self.rank, "generator_state": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the mask stream saved by :meth:`state_dict`."""
        self._generator.set_state(state["generator_state"])

    def _current_generator(self) -> torch.Generator:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self._generator
        if self._worker is None or self._worker[0] != (info.id, info.seed):
            gen = torch.Generator().manual_seed(_stream_seed(self.seed, self.rank, info.seed))
            self._worker = ((info.id, info.seed), gen)
        return self._worker[1]

    def draw_mask(self, attention_mask: torch.Tensor, reads: list[tuple[int, int]] | None = None) -> torch.Tensor:
        """Selected positions (B, L) bool, never at padding (right padding assumed). With `reads` (the epoch and
        index of each example) every row comes from a generator seeded by (seed, epoch, index)."""
        real = attention_mask.bool()  # (B, L)
        selected = torch.zeros_like(real)
        stream = self._current_generator() if reads is None else None
        for i, length in enumerate(real.sum(1).tolist()):
            gen = stream if reads is None else torch.Generator().manual_seed(_stream_seed(self.seed, *reads[i]))
            selected[i, :length] = self._draw_row(length, gen)
        return selected

    def _draw_row(self, length: int, gen: torch.Generator) -> torch.Tensor:
        """Selected positions (length,) of one example."""
        if self.span_length == 1:
            return torch.rand(length, generator=gen) < self.mask_rate
        row, span = torch.zeros(length, dtype=torch.bool), self.span_length
        n = int(length * self.mask_rate / span)
        if n:
            # n starts among the (length - n(span-1)) "compressed" slots, spread out: non-overlapping spans
            slots = torch.randperm(length - n * (span - 1), generator=gen)[:n].sort().values  # (n,)
            starts = slots + torch.arange(n) * (span - 1)  # (n,)
            row[(starts.unsqueeze(1) + torch.arange(span)).reshape(-1)] = True
        return row

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _inputs(self.spec, examples, self.pad_to_multiple_of)
        reads = None
        if examples and all(EPOCH_KEY in ex and INDEX_KEY in ex for ex in examples):
            reads = [(int(ex[EPOCH_KEY]), int(ex[INDEX_KEY])) for ex in examples]
        selected = self.draw_mask(batch["attention_mask"], reads)  # (B, L)
        if self.spec.input_kind == "tokens":
            ids = batch["input_ids"]  # (B, L)
            batch["labels"] = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
            batch["input_ids"] = ids.masked_fill(selected, MASK_ID)
        else:
            raw = batch.pop("raw")  # (B, L, C)
            batch["mask_positions"] = selected
            if self.target == "levels":
                batch["labels"] = quantized_levels(self.spec, raw)  # (B, L, C) int64
            else:
                batch["labels"] = batch["input_values"].clone()  # (B, L, C) float32
        return pack_sequences(batch) if self.packed else batch


@dataclass
class CausalSPTCollator:
    """Causal SPT batches: ``labels`` are the inputs themselves (the model shifts them, as in transformers).

    Token inputs: ``labels`` = ``input_ids`` with padding set to -100. Continuous inputs: normalised
    ``input_values`` and ``labels`` = normalised values (float32) or raw levels (int64); the model ignores
    padded positions through ``attention_mask``. ``packed`` (token inputs only): padding-free rows
    (:func:`pack_sequences`) whose sequences each start with a -100 label.
    """

    spec: TaskSpec
    target: str | None = None
    pad_to_multiple_of: int | None = None
    packed: bool = False

    def __post_init__(self) -> None:
        self.target = _resolve_target(self.spec, self.target)
        if self.packed and self.spec.input_kind != "tokens":
            raise ValueError(
                f"packed_sequences: causal SPT of continuous inputs (task {self.spec.name!r}) takes its loss at every "
                "position of a row, with no label to leave out, so a packed row's first value of each sequence "
                "would be predicted from the previous sequence; set packed_sequences: false (packing is exact for "
                "token inputs and for masked SPT)."
            )

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _inputs(self.spec, examples, self.pad_to_multiple_of)
        if self.spec.input_kind == "tokens":
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
            return pack_sequences(batch, restart_labels=True) if self.packed else batch
        raw = batch.pop("raw")
        if self.target == "levels":
            batch["labels"] = quantized_levels(self.spec, raw)
        else:
            batch["labels"] = batch["input_values"].clone()
        return batch


def _labels(spec: TaskSpec, examples: list[dict]) -> torch.Tensor:
    if spec.is_regression:
        return torch.tensor([float(ex["label"]) for ex in examples], dtype=torch.float32)  # (B,)
    return torch.tensor([int(ex["label"]) for ex in examples], dtype=torch.long)  # (B,)


@dataclass
class ClassificationCollator:
    """Finetuning batches: padded (normalised) inputs and ``labels`` (long classes or float32 regression)."""

    spec: TaskSpec
    pad_to_multiple_of: int | None = None

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _inputs(self.spec, examples, self.pad_to_multiple_of)
        batch.pop("raw", None)
        batch["labels"] = _labels(self.spec, examples)
        return batch


@dataclass
class RetrievalCollator:
    """Document-pair batches: ``input_ids``/``attention_mask``, ``input_ids_2``/``attention_mask_2``, ``labels``.

    Each document is padded on its own (the documents are encoded separately, never concatenated).
    """

    spec: TaskSpec
    pad_to_multiple_of: int | None = None

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        ids, mask = pad_tokens([ex["input_ids"] for ex in examples], self.pad_to_multiple_of, self.spec.max_length)
        ids2, mask2 = pad_tokens([ex["input_ids_2"] for ex in examples], self.pad_to_multiple_of, self.spec.max_length)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "input_ids_2": ids2,
            "attention_mask_2": mask2,
            "labels": _labels(self.spec, examples),
        }
