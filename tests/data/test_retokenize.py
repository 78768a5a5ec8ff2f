"""The tokenizer route of spt_backbone: every task symbol rendered to text and tokenised on its own by the backbone's
tokenizer (a word-level tokenizer built here), as the paper's code feeds ListOps, bytes and pixels to Pythia-70M."""

import datasets
import pytest
from helpers import PRETRAINED_WORDS, save_pretrained_backbone
from transformers import AutoTokenizer

from spt_hf.data import BYTE_VOCAB, EOS_ID, LISTOPS_VOCAB, UNK_ID, get_task_spec
from spt_hf.data.retokenize import retokenize_task, token_table

WORD = {word: index for index, word in enumerate(PRETRAINED_WORDS)}
UNKNOWN, END = WORD["<unk>"], WORD["<|endoftext|>"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(save_pretrained_backbone(tmp_path_factory.mktemp("tokenizer")))


def test_symbols_are_tokenised_one_by_one(tokenizer):
    listops = token_table(get_task_spec("listops"), tokenizer)
    assert listops[LISTOPS_VOCAB.token_to_id("[MAX")] == [WORD["["], WORD["MAX"]]  # as the official `listops` mapping
    assert listops[LISTOPS_VOCAB.token_to_id("7")] == [WORD["7"]]
    assert listops[EOS_ID] == [END] and listops[UNK_ID] == [UNKNOWN]
    text = token_table(get_task_spec("text"), tokenizer)
    assert text[BYTE_VOCAB.encode_text("a")[0]] == [WORD["a"]]
    assert text[BYTE_VOCAB.encode_text(" ")[0]] == [UNKNOWN]  # dropped by a word-level tokenizer: keeps its position
    assert text[BYTE_VOCAB.encode_text("é")[0]] == [UNKNOWN]  # 0xC3: Latin-1 'Ã', not in this vocabulary
    digits = token_table(get_task_spec("digits", input_kind="continuous"), tokenizer)
    assert digits[16] == [WORD["16"]] and digits[255] == [WORD["255"]]


def test_values_that_are_not_8_bit_levels_cannot_be_rendered(tokenizer):
    with pytest.raises(ValueError, match="not 8-bit levels; `backbone_input: tokenizer` renders values"):
        token_table(get_task_spec("bidmc"), tokenizer)


def test_a_task_is_retokenised_with_its_labels_and_pairs(tokenizer):
    spec = get_task_spec("retrieval")
    splits = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {
                    "input_ids": [BYTE_VOCAB.encode_text("ab"), BYTE_VOCAB.encode_text("b") + [EOS_ID]],
                    "input_ids_2": [BYTE_VOCAB.encode_text("c"), BYTE_VOCAB.encode_text("7")],
                    "label": [0, 1],
                },
                features=spec.features(),
            )
            for split in ("train", "validation", "test")
        }
    )
    converted, new_spec = retokenize_task(splits, spec, tokenizer, name="tiny")
    assert converted["train"]["input_ids"] == [[WORD["a"], WORD["b"]], [WORD["b"], END]]
    assert converted["train"]["input_ids_2"] == [[WORD["c"]], [WORD["7"]]] and converted["test"]["label"] == [0, 1]
    assert (new_spec.input_kind, new_spec.vocab_size, new_spec.paired, new_spec.max_length) == (
        "tokens",
        len(tokenizer),
        True,
        2,
    )


def test_a_continuous_task_is_retokenised_value_by_value(tokenizer):
    """Image, Pathfinder and digits as values: each 8-bit level becomes its decimal text's tokens, in `input_ids`."""
    spec = get_task_spec("digits", input_kind="continuous")
    rows = {"input_values": [[0, 16, 7], [255]], "label": [3, 1]}  # stored as 8-bit levels, steps x channels
    splits = datasets.DatasetDict(
        {split: datasets.Dataset.from_dict(rows, features=spec.features()) for split in ("train", "test")}
    )
    converted, new_spec = retokenize_task(splits, spec, tokenizer, name="tiny")
    assert sorted(converted["train"].column_names) == ["input_ids", "label"]
    assert converted["test"]["input_ids"] == [[WORD["0"], WORD["16"], WORD["7"]], [WORD["255"]]]
    assert (new_spec.input_kind, new_spec.num_channels, new_spec.max_length) == ("tokens", 1, 3)
