"""Property-based tests (hypothesis) of the SPT collators and the leakage fingerprint.

Random batch sizes, lengths, padding multiples, mask rates and span lengths; each property is checked against the
examples the collator was given (an oracle independent of the collator's own code). Hypothesis runs derandomised
(the same inputs every run, no database) with bounded example counts and deadlines: ~10 s on 2 idle cores.
"""

from __future__ import annotations

import io
import math

import datasets
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spt_hf.data import (
    IGNORE_INDEX,
    MASK_ID,
    PAD_ID,
    CausalSPTCollator,
    ClassificationCollator,
    DataLeakageError,
    MaskedSPTCollator,
    RetrievalCollator,
    check_no_overlap,
    fingerprint_examples,
    fingerprint_info,
    get_task_spec,
    num_masked,
)

SETTINGS = settings(
    max_examples=80, deadline=3000, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
LISTOPS = get_task_spec("listops")  # tokens: content ids 4..18
PATHFINDER = get_task_spec("pathfinder")  # continuous, 1 channel, 256 levels
SCIFAR = get_task_spec("scifar")  # continuous, 3 channels, values
RETRIEVAL = get_task_spec("retrieval")

lengths_st = st.lists(st.integers(0, 80), min_size=1, max_size=6).filter(lambda ls: max(ls) > 0)
multiple_st = st.sampled_from([None, 1, 8, 16])
rate_st = st.floats(0.02, 0.98)
seed_st = st.integers(0, 2**31 - 1)


def _round_up(n: int, multiple: int | None) -> int:
    return n if not multiple else math.ceil(n / multiple) * multiple


def _tokens(lengths: list[int], seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    vocab = LISTOPS.vocab_size
    return [{"input_ids": rng.integers(4, vocab, n).tolist(), "label": int(rng.integers(10))} for n in lengths]


def _values(lengths: list[int], seed: int, channels: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"input_values": rng.integers(0, 256, (n, channels)).astype(np.float32), "label": int(rng.integers(2))}
        for n in lengths
    ]


def _original(examples: list[dict], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Oracle padding: ids (B, L) with PAD and the real-position mask (B, L) bool."""
    ids = torch.full((len(examples), length), PAD_ID, dtype=torch.long)
    real = torch.zeros((len(examples), length), dtype=torch.bool)
    for i, ex in enumerate(examples):
        n = len(ex["input_ids"])
        ids[i, :n] = torch.tensor(ex["input_ids"], dtype=torch.long)
        real[i, :n] = True
    return ids, real


def _runs(row: torch.Tensor) -> list[int]:
    """Lengths of the runs of True in a 1-D bool tensor."""
    edges = np.diff(np.r_[0, row.int().numpy(), 0])
    return (np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).tolist()


@SETTINGS
@given(lengths=lengths_st, multiple=multiple_st, rate=rate_st, span=st.integers(1, 6), seed=seed_st)
def test_masked_tokens_invariants(lengths: list[int], multiple: int | None, rate: float, span: int, seed: int) -> None:
    examples = _tokens(lengths, seed)
    batch = MaskedSPTCollator(LISTOPS, mask_rate=rate, span_length=span, seed=seed, pad_to_multiple_of=multiple)(
        examples
    )
    length = _round_up(max(lengths), multiple)
    original, real = _original(examples, length)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    for key in batch:
        assert batch[key].shape == (len(lengths), length) and batch[key].dtype == torch.long
    assert torch.equal(batch["attention_mask"].bool(), real)
    selected = batch["labels"] != IGNORE_INDEX
    assert not (selected & ~real).any()  # never on padding
    assert torch.equal(batch["labels"][selected], original[selected])  # targets: the original ids
    assert (batch["input_ids"][selected] == MASK_ID).all()  # masked ids replaced by MASK
    assert torch.equal(batch["input_ids"][~selected], original[~selected])  # the rest untouched (PAD at padding)
    assert num_masked(batch) == int(selected.sum())
    if span > 1:  # floor(L p / span) whole, non-overlapping spans per example
        for i, n in enumerate(lengths):
            spans = int(n * rate / span)
            assert int(selected[i].sum()) == spans * span
            assert all(r % span == 0 for r in _runs(selected[i]))  # touching spans merge into multiples


@SETTINGS
@given(
    lengths=lengths_st,
    multiple=multiple_st,
    rate=rate_st,
    span=st.integers(1, 5),
    seed=seed_st,
    task=st.sampled_from(["pathfinder", "scifar"]),
    target=st.sampled_from(["values", "levels"]),
)
def test_masked_continuous_invariants(
    lengths: list[int], multiple: int | None, rate: float, span: int, seed: int, task: str, target: str
) -> None:
    spec = PATHFINDER if task == "pathfinder" else SCIFAR
    examples = _values(lengths, seed, spec.num_channels)
    collator = MaskedSPTCollator(
        spec, mask_rate=rate, span_length=span, seed=seed, target=target, pad_to_multiple_of=multiple
    )
    batch = collator(examples)
    b, length, c = len(lengths), _round_up(max(lengths), multiple), spec.num_channels
    assert set(batch) == {"input_values", "attention_mask", "mask_positions", "labels"}
    assert batch["input_values"].shape == (b, length, c) and batch["input_values"].dtype == torch.float32
    assert batch["mask_positions"].shape == (b, length) and batch["mask_positions"].dtype == torch.bool
    mean = torch.tensor(spec.normalization.mean)
    std = torch.tensor(spec.normalization.std)
    for i, ex in enumerate(examples):
        n, raw = len(ex["input_values"]), torch.from_numpy(ex["input_values"])
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (length - n)
        assert not batch["mask_positions"][i, n:].any()  # never on padding
        assert torch.allclose(batch["input_values"][i, :n], (raw - mean) / std)  # normalised, not masked here
        assert not batch["input_values"][i, n:].any()
        if target == "levels":
            assert torch.equal(batch["labels"][i, :n], raw.long())
        if span > 1:
            assert int(batch["mask_positions"][i].sum()) == int(n * rate / span) * span
    if target == "levels":
        assert batch["labels"].dtype == torch.int64 and batch["labels"].shape == (b, length, c)
    else:
        assert torch.equal(batch["labels"], batch["input_values"])
    assert num_masked(batch) == int(batch["mask_positions"].sum())


@settings(SETTINGS, max_examples=40)
@given(lengths=lengths_st, rate=rate_st, seed=seed_st, continuous=st.booleans())
def test_mask_rate_within_binomial_bound(lengths: list[int], rate: float, seed: int, continuous: bool) -> None:
    """Over many draws the selected fraction of real positions is Binomial(N, p): within 5 sigma of N p."""
    spec = PATHFINDER if continuous else LISTOPS
    examples = _values(lengths, seed, 1) if continuous else _tokens(lengths, seed)
    collator = MaskedSPTCollator(spec, mask_rate=rate, seed=seed)
    selected = total = 0
    while total < 5000:
        batch = collator(examples)
        selected += num_masked(batch)
        total += int(batch["attention_mask"].sum())
    sigma = math.sqrt(total * rate * (1 - rate))
    assert abs(selected - total * rate) <= 5 * sigma + 1, (selected, total, rate)


@SETTINGS
@given(lengths=lengths_st, span=st.integers(1, 4), seed=seed_st, before=st.integers(0, 3), after=st.integers(1, 3))
def test_masks_are_deterministic_and_resumable(
    lengths: list[int], span: int, seed: int, before: int, after: int
) -> None:
    examples = _tokens(lengths, seed)
    first = MaskedSPTCollator(LISTOPS, span_length=span, seed=seed)
    again = MaskedSPTCollator(LISTOPS, span_length=span, seed=seed)
    for _ in range(before):
        assert torch.equal(first(examples)["labels"], again(examples)["labels"])  # same seed, same stream
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # a checkpoint; it loads without pickle's code execution
    expected = [first(examples)["labels"] for _ in range(after)]
    resumed = MaskedSPTCollator(LISTOPS, span_length=span, seed=seed + 1)
    resumed.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    assert all(torch.equal(resumed(examples)["labels"], e) for e in expected)


@SETTINGS
@given(
    lengths=st.lists(st.integers(100, 300), min_size=1, max_size=3),
    rate=st.floats(0.1, 0.9),
    span=st.integers(1, 4),
    seed=seed_st,
    ranks=st.lists(st.integers(0, 63), min_size=2, max_size=2, unique=True),
)
def test_ranks_draw_different_masks(lengths: list[int], rate: float, span: int, seed: int, ranks: list[int]) -> None:
    examples = _tokens(lengths, seed)
    masks = [MaskedSPTCollator(LISTOPS, rate, span, seed=seed, rank=r)(examples)["labels"] for r in ranks]
    assert not torch.equal(masks[0], masks[1])


@SETTINGS
@given(lengths=lengths_st, multiple=multiple_st, seed=seed_st, kind=st.sampled_from(["tokens", "levels", "values"]))
def test_causal_labels_are_the_inputs(lengths: list[int], multiple: int | None, seed: int, kind: str) -> None:
    length = _round_up(max(lengths), multiple)
    if kind == "tokens":
        examples = _tokens(lengths, seed)
        batch = CausalSPTCollator(LISTOPS, pad_to_multiple_of=multiple)(examples)
        original, real = _original(examples, length)
        assert torch.equal(batch["input_ids"], original) and torch.equal(batch["attention_mask"].bool(), real)
        assert torch.equal(batch["labels"], original.masked_fill(~real, IGNORE_INDEX))
        return
    examples = _values(lengths, seed, 1)
    batch = CausalSPTCollator(PATHFINDER, target=kind, pad_to_multiple_of=multiple)(examples)
    assert set(batch) == {"input_values", "attention_mask", "labels"}
    assert batch["labels"].shape == (len(lengths), length, 1)
    if kind == "values":
        assert torch.equal(batch["labels"], batch["input_values"])
    else:
        for i, ex in enumerate(examples):
            assert torch.equal(
                batch["labels"][i, : len(ex["input_values"])], torch.from_numpy(ex["input_values"]).long()
            )


@SETTINGS
@given(lengths=lengths_st, multiple=multiple_st, seed=seed_st, continuous=st.booleans())
def test_classification_shapes_and_padding(
    lengths: list[int], multiple: int | None, seed: int, continuous: bool
) -> None:
    length = _round_up(max(lengths), multiple)
    if continuous:
        examples = _values(lengths, seed, 3)
        batch = ClassificationCollator(SCIFAR, pad_to_multiple_of=multiple)(examples)
        assert set(batch) == {"input_values", "attention_mask", "labels"}
        assert batch["input_values"].shape == (len(lengths), length, 3)
        assert not batch["input_values"][~batch["attention_mask"].bool()].any()
    else:
        examples = _tokens(lengths, seed)
        batch = ClassificationCollator(LISTOPS, pad_to_multiple_of=multiple)(examples)
        original, real = _original(examples, length)
        assert torch.equal(batch["input_ids"], original) and torch.equal(batch["attention_mask"].bool(), real)
    assert batch["labels"].tolist() == [ex["label"] for ex in examples] and batch["labels"].dtype == torch.long


@SETTINGS
@given(firsts=lengths_st, seconds=lengths_st, multiple=multiple_st, seed=seed_st)
def test_retrieval_pads_each_document_on_its_own(
    firsts: list[int], seconds: list[int], multiple: int | None, seed: int
) -> None:
    n = min(len(firsts), len(seconds))
    firsts, seconds = firsts[:n], seconds[:n]
    assume(max(firsts) > 0 and max(seconds) > 0)
    one, two = _tokens(firsts, seed), _tokens(seconds, seed + 1)
    examples = [
        {"input_ids": a["input_ids"], "input_ids_2": b["input_ids"], "label": i % 2}
        for i, (a, b) in enumerate(zip(one, two))
    ]
    batch = RetrievalCollator(RETRIEVAL, pad_to_multiple_of=multiple)(examples)
    ids, real = _original(one, _round_up(max(firsts), multiple))
    ids2, real2 = _original(two, _round_up(max(seconds), multiple))
    assert torch.equal(batch["input_ids"], ids) and torch.equal(batch["attention_mask"].bool(), real)
    assert torch.equal(batch["input_ids_2"], ids2) and torch.equal(batch["attention_mask_2"].bool(), real2)
    assert batch["labels"].tolist() == [i % 2 for i in range(n)]


@SETTINGS
@given(lengths=lengths_st, seed=seed_st, wrong=st.sampled_from([(1,), (2,), (4,), (1, 3)]))
def test_continuous_inputs_of_the_wrong_shape_are_refused(lengths: list[int], seed: int, wrong: tuple) -> None:
    """An (L, C') sequence for a C-channel task is refused, not silently reshaped into C'L/C steps."""
    examples = _values(lengths, seed, 3)
    examples[-1]["input_values"] = np.zeros((max(lengths[-1], 1), *wrong), dtype=np.float32)
    with pytest.raises(ValueError, match=r"example \d+: input_values of shape .*expected \(L, 3\)"):
        ClassificationCollator(SCIFAR)(examples)


sequences_st = st.lists(st.lists(st.integers(4, 40), min_size=1, max_size=12), min_size=1, max_size=30)


@SETTINGS
@given(seqs=sequences_st, order=st.randoms(use_true_random=False))
def test_fingerprint_is_order_independent(seqs: list[list[int]], order) -> None:
    shuffled = list(seqs)
    order.shuffle(shuffled)
    digest = fingerprint_examples(datasets.Dataset.from_dict({"input_ids": seqs}))
    assert digest == fingerprint_examples(datasets.Dataset.from_dict({"input_ids": shuffled}))
    extra = datasets.Dataset.from_dict({"input_ids": [*seqs, [41]]})  # 41 is outside the drawn ids
    assert fingerprint_examples(extra) != digest


@SETTINGS
@given(train=sequences_st, fresh=sequences_st, data=st.data())
def test_check_no_overlap_finds_planted_inputs(train: list[list[int]], fresh: list[list[int]], data) -> None:
    fresh = [[i + 100 for i in s] for s in fresh]  # disjoint from train by construction
    planted = data.draw(st.lists(st.sampled_from(train), max_size=5))
    evaluation = list(fresh) + planted
    data.draw(st.randoms(use_true_random=False)).shuffle(evaluation)
    info = fingerprint_info(datasets.Dataset.from_dict({"input_ids": train}))
    eval_ds = datasets.Dataset.from_dict({"input_ids": evaluation})
    if not planted:
        assert check_no_overlap(info, eval_ds) == 0
        return
    with pytest.raises(DataLeakageError, match=f"{len(planted)} of {len(evaluation)} input sequences"):
        check_no_overlap(info, eval_ds, name="test")
    with pytest.warns(UserWarning, match="were used for pretraining"):
        assert check_no_overlap(info.hashes, eval_ds, allow_overlap=True) == len(planted)
