"""Vocabularies: fixed special ids, sizes and round trips."""

from __future__ import annotations

import pytest

from spt_hf.data import BYTE_VOCAB, DIGITS_VOCAB, EOS_ID, LISTOPS_VOCAB, MASK_ID, PAD_ID, UNK_ID
from spt_hf.data.vocab import tokenize_listops


def test_special_ids_and_sizes() -> None:
    assert (PAD_ID, MASK_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert len(BYTE_VOCAB) == 260 and len(LISTOPS_VOCAB) == 19 and len(DIGITS_VOCAB) == 21
    for vocab in (BYTE_VOCAB, LISTOPS_VOCAB, DIGITS_VOCAB):
        assert vocab.special_token_ids() == {
            "pad_token_id": 0,
            "mask_token_id": 1,
            "eos_token_id": 2,
            "unk_token_id": 3,
        }


def test_listops_order_is_fixed() -> None:
    assert LISTOPS_VOCAB.encode(["0", "9", "[MIN", "[MAX", "[MED", "[SM", "]"]) == [4, 13, 14, 15, 16, 17, 18]
    tokens = tokenize_listops("( ( ( [MAX 2 ) 9 ) ] )")
    assert tokens == ["[MAX", "2", "9", "]"]
    assert LISTOPS_VOCAB.decode([*LISTOPS_VOCAB.encode(tokens), EOS_ID]) == [*tokens, "<eos>"]
    with pytest.raises(KeyError, match="not in the listops vocabulary"):
        LISTOPS_VOCAB.encode(["[FIRST"])
    assert LISTOPS_VOCAB.encode(["[FIRST"], unknown_ok=True) == [UNK_ID]


def test_bytes_round_trip() -> None:
    ids = BYTE_VOCAB.encode_text("héllo")
    assert ids[0] == ord("h") + 4 and len(ids) == 6 and BYTE_VOCAB.decode_text(ids) == "héllo"
    assert BYTE_VOCAB.encode_text("abcdef", max_tokens=3) == [101, 102, 103]
    with pytest.raises(ValueError):
        BYTE_VOCAB.decode([260])
