"""Collators: masking statistics and invariants, targets per input kind, padding, resumable mask streams."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spt_hf.data import (
    IGNORE_INDEX,
    MASK_ID,
    PAD_ID,
    CausalSPTCollator,
    ClassificationCollator,
    DataFormatError,
    MaskedSPTCollator,
    get_task_spec,
    num_masked,
)

LISTOPS = get_task_spec("listops")
PATHFINDER = get_task_spec("pathfinder")
IMAGE = get_task_spec("image")


def _token_examples(lengths: list[int], seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(4, 19, n).tolist(), "label": i % 10} for i, n in enumerate(lengths)]


def _pixel_examples(lengths: list[int], seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"input_values": rng.integers(0, 256, (n, 1)).astype(np.float32), "label": i % 2} for i, n in enumerate(lengths)
    ]


def test_masked_tokens_invariants_and_rate() -> None:
    examples = _token_examples([300, 120, 1000])
    batch = MaskedSPTCollator(LISTOPS, mask_rate=0.3, seed=1)(examples)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    original = torch.full_like(ids, PAD_ID)
    for i, ex in enumerate(examples):
        original[i, : len(ex["input_ids"])] = torch.tensor(ex["input_ids"])
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels[selected], original[selected])  # labels only at masked positions
    assert (ids[selected] == MASK_ID).all() and torch.equal(ids[~selected], original[~selected])
    assert not selected[mask == 0].any() and (ids[mask == 0] == PAD_ID).all()
    assert mask.dtype == torch.long and mask.sum() == 1420
    rate = selected.sum().item() / 1420
    assert 0.25 < rate < 0.35 and num_masked(batch) == selected.sum().item()


def test_masks_are_redrawn_and_resumable() -> None:
    examples = _token_examples([200, 200])
    collator = MaskedSPTCollator(LISTOPS, seed=5)
    state = collator.state_dict()
    first, second = collator(examples)["labels"], collator(examples)["labels"]
    assert not torch.equal(first, second)
    resumed = MaskedSPTCollator(LISTOPS, seed=99)
    resumed.load_state_dict(state)
    assert torch.equal(resumed(examples)["labels"], first)
    assert torch.equal(MaskedSPTCollator(LISTOPS, seed=5)(examples)["labels"], first)
    other_rank = MaskedSPTCollator(LISTOPS, seed=5, rank=1)(examples)["labels"]
    assert not torch.equal(other_rank, first)


@pytest.mark.parametrize("span", [3, 10])
def test_span_masking_counts_and_bounds(span: int) -> None:
    lengths = [100, 57, 8]
    batch = MaskedSPTCollator(LISTOPS, mask_rate=0.5, span_length=span, seed=2)(_token_examples(lengths))
    selected = batch["labels"] != IGNORE_INDEX
    for i, length in enumerate(lengths):
        n_spans = int(length * 0.5 / span)
        assert selected[i].sum() == n_spans * span and not selected[i, length:].any()
        runs = np.diff(np.flatnonzero(np.diff(np.r_[0, selected[i].int().numpy(), 0])))[::2]
        assert all(r % span == 0 for r in runs)  # whole spans (adjacent spans merge into multiples)


def test_zero_masked_batch_is_detectable() -> None:
    collator = MaskedSPTCollator(LISTOPS, mask_rate=0.01, span_length=4, seed=0)
    assert num_masked(collator(_token_examples([10, 20]))) == 0


def test_masked_continuous_levels_and_values() -> None:
    examples = _pixel_examples([1024, 700])
    batch = MaskedSPTCollator(PATHFINDER, seed=0, pad_to_multiple_of=128)(examples)
    assert set(batch) == {"input_values", "attention_mask", "mask_positions", "labels"}
    assert batch["input_values"].shape == (2, 1024, 1) and batch["labels"].dtype == torch.int64
    raw = torch.from_numpy(examples[1]["input_values"])
    assert torch.equal(batch["labels"][1, :700], raw.long())
    assert torch.allclose(batch["input_values"][1, :700], (raw - 127.5) / 127.5)  # normalised, not masked
    assert not batch["mask_positions"][1, 700:].any() and not batch["input_values"][1, 700:].any()
    values = MaskedSPTCollator(PATHFINDER, target="values")(examples)
    assert values["labels"].dtype == torch.float32 and torch.equal(values["labels"], values["input_values"])
    assert MaskedSPTCollator(IMAGE)(examples)["labels"].dtype == torch.float32  # Image: L1 on values
    with pytest.raises(ValueError, match="allowed"):
        MaskedSPTCollator(LISTOPS, target="values")


def test_causal_collators() -> None:
    batch = CausalSPTCollator(LISTOPS)(_token_examples([5, 3]))
    assert batch["labels"][1].tolist()[3:] == [IGNORE_INDEX, IGNORE_INDEX]
    assert torch.equal(batch["labels"][0], batch["input_ids"][0])
    pixels = CausalSPTCollator(PATHFINDER)(_pixel_examples([16, 9]))
    assert set(pixels) == {"input_values", "attention_mask", "labels"} and pixels["labels"].shape == (2, 16, 1)
    assert pixels["labels"].dtype == torch.int64 and pixels["attention_mask"][1].sum() == 9


def test_classification_collator() -> None:
    batch = ClassificationCollator(LISTOPS, pad_to_multiple_of=8)(_token_examples([5, 11]))
    assert batch["input_ids"].shape == (2, 16) and batch["labels"].tolist() == [0, 1]
    assert batch["labels"].dtype == torch.long
    pixels = ClassificationCollator(IMAGE)(_pixel_examples([1024]))
    assert pixels["input_values"].dtype == torch.float32 and set(pixels) == {"input_values", "attention_mask", "labels"}


def test_collators_accept_tensors_and_run_in_a_dataloader() -> None:
    data = [{"input_ids": torch.tensor(ex["input_ids"]), "label": ex["label"]} for ex in _token_examples([9] * 8)]
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=MaskedSPTCollator(LISTOPS))
    shapes = [b["input_ids"].shape for b in loader]
    assert shapes == [(4, 9), (4, 9)]


def test_worker_streams_differ_per_worker_and_epoch() -> None:
    data = [{"input_ids": [5] * 64, "label": 0}] * 4
    loader = torch.utils.data.DataLoader(
        data, batch_size=1, num_workers=2, collate_fn=MaskedSPTCollator(LISTOPS), multiprocessing_context="fork"
    )
    epochs = [[tuple(b["labels"][0].tolist()) for b in loader] for _ in range(2)]
    assert len(set(epochs[0])) == 4 and set(epochs[0]) != set(epochs[1])


def test_8_bit_storage_gives_the_same_batches_as_float32_values():
    """The cache stores 8-bit sources flat as uint8; the collator's batches equal those of float32 (L, C) values."""
    spec = get_task_spec("pathfinder")
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 256, (n, 1)) for n in (1024, 900, 1000)]
    as_float = [{"input_values": p.astype(np.float32), "spt_epoch": 0, "spt_index": i} for i, p in enumerate(pixels)]
    stored = [spec.encode({"input_values": p.astype(np.float32)}, "test") for p in pixels]
    assert all(s["input_values"].dtype == np.uint8 and s["input_values"].ndim == 1 for s in stored)
    as_uint8 = [{**s, "spt_epoch": 0, "spt_index": i} for i, s in enumerate(stored)]
    for collator in (MaskedSPTCollator(spec, seed=3), ClassificationCollator(spec)):
        a = collator([{**e, "label": 1} for e in as_float])
        b = collator([{**e, "label": 1} for e in as_uint8])
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_8_bit_storage_refuses_values_it_would_change():
    spec = get_task_spec("pathfinder")
    for bad in (np.full((4, 1), 256.0), np.full((4, 1), -1.0), np.full((4, 1), 0.5)):
        with pytest.raises(DataFormatError, match="not 8-bit integers"):
            spec.encode({"input_values": bad}, "item 3")


def test_non_finite_input_values_are_refused_naming_the_example():
    spec = get_task_spec("scifar")
    examples = [{"input_values": np.zeros((5, 3), np.float32), "label": 0} for _ in range(3)]
    examples[1]["input_values"][2, 1] = np.nan
    with pytest.raises(ValueError, match=r"example 1 of the batch: input_values holds nan at step 2, channel 1"):
        ClassificationCollator(spec)(examples)


def test_indexed_masks_are_a_pure_function_of_seed_epoch_and_example():
    """Whatever was read before, in whatever batch, by whichever process: the same example at the same epoch gets
    the same mask; another epoch, another mask."""
    examples = _token_examples([30, 40, 50, 60])
    collator = MaskedSPTCollator(LISTOPS, seed=7)

    def read(indices, epoch):
        batch = [{**examples[i], "spt_epoch": epoch, "spt_index": i} for i in indices]
        return {i: row for i, row in zip(indices, collator(batch)["labels"])}

    first = read([0, 1, 2, 3], epoch=0)
    collator([{**examples[0], "spt_epoch": 9, "spt_index": 0}])  # reads in between change nothing
    again = read([3, 1], epoch=0)
    assert all(
        torch.equal(first[i][: len(examples[i]["input_ids"])], again[i][: len(examples[i]["input_ids"])])
        for i in (1, 3)
    )
    later = read([1], epoch=1)
    assert not torch.equal(first[1], later[1])
