"""``tokenizer: <an existing Hugging Face tokenizer folder>`` in a custom task: its ids shifted by the four special
ids, and a saved tokenizer that gives the task's ids on raw text."""

from __future__ import annotations

from pathlib import Path

import pytest
from custom_helpers import text_splits, use_source

from spt_hf.data import get_task_spec, load_task
from spt_hf.data.vocab import NUM_SPECIAL_TOKENS
from spt_hf.preprocessing import encode_text, save_preprocessing


def wordpiece_folder(root: Path, texts: list[str]) -> Path:
    """A small WordPiece tokenizer trained on ``texts``, saved as a PreTrainedTokenizerFast folder."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordPieceTrainer(vocab_size=60, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    backend.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    tokenizer.save_pretrained(root)
    return root


def test_an_existing_tokenizer_gives_shifted_ids_and_the_saved_tokenizer_agrees(monkeypatch, tmp_path):
    from transformers import AutoTokenizer

    splits = text_splits()
    folder = wordpiece_folder(tmp_path / "wp", splits["train"]["text"])
    options = {**use_source(monkeypatch, tmp_path, splits), "tokenizer": str(folder)}
    spec = get_task_spec("custom", **options)
    original = AutoTokenizer.from_pretrained(folder)
    assert spec.pretrained_tokenizer == str(folder) and spec.tokenization is None
    assert len(spec.vocab) == len(original) + NUM_SPECIAL_TOKENS
    text = splits["test"]["text"][3]
    expected = [
        i + NUM_SPECIAL_TOKENS for i in original(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ]
    assert load_task("custom", **options)["test"][3]["input_ids"] == expected[: spec.max_length]
    assert spec.task_card["lengths"]["train"]["max"] == spec.max_length
    save_preprocessing(spec, tmp_path / "saved")
    saved = AutoTokenizer.from_pretrained(tmp_path / "saved")
    for raw in [text, "ABAB cdcd zzz é [CLS]", "x" * 200]:
        assert saved(raw, truncation=True)["input_ids"] == encode_text(spec, raw)
    assert saved(text, truncation=True)["input_ids"] == expected[: spec.max_length]
    assert saved.pad_token_id == 0 and saved.convert_ids_to_tokens(expected[:1]) == original.convert_ids_to_tokens(
        [expected[0] - NUM_SPECIAL_TOKENS]
    )


def test_a_tokenizer_that_is_not_there_is_one_line(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits())
    with pytest.raises(ValueError, match=r"tokenizer='no/such-tokenizer' is none of .* nor a Hugging Face tokenizer"):
        get_task_spec("custom", **options, tokenizer="no/such-tokenizer")


def test_a_byte_level_bpe_tokenizer_round_trips_through_the_saved_tokenizer(monkeypatch, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    splits = text_splits()
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(splits["train"]["text"], trainer)
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>").save_pretrained(tmp_path / "bpe")
    options = {**use_source(monkeypatch, tmp_path, splits), "tokenizer": str(tmp_path / "bpe"), "max_length": 64}
    spec = get_task_spec("custom", **options)
    save_preprocessing(spec, tmp_path / "saved")
    saved = AutoTokenizer.from_pretrained(tmp_path / "saved")
    for raw in ["abababab12", "cdcd é ü 😀 <s>"]:
        assert saved(raw, truncation=True)["input_ids"] == encode_text(spec, raw)
        assert saved.decode(saved(raw)["input_ids"]) == raw


def test_unigram_tokenizers_are_refused_and_clashing_special_names_save_no_tokenizer(monkeypatch, tmp_path, caplog):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    splits = text_splits()
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Whitespace()
    unigram.train_from_iterator(splits["train"]["text"], trainers.UnigramTrainer(vocab_size=30, unk_token="<u>"))
    PreTrainedTokenizerFast(tokenizer_object=unigram).save_pretrained(tmp_path / "uni")
    options = use_source(monkeypatch, tmp_path, splits)
    with pytest.raises(ValueError, match=r"a Unigram model; spt_hf takes fast tokenizers of"):
        get_task_spec("custom", **options, tokenizer=str(tmp_path / "uni"))
    wordlevel = Tokenizer(models.WordLevel({"<unk>": 0, "abab": 1}, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>").save_pretrained(tmp_path / "wl")
    spec = get_task_spec("custom", **options, tokenizer=str(tmp_path / "wl"), max_length=8)
    assert len(spec.vocab) == 6 and encode_text(spec, "abab cdcd") == [5, 4]
    assert save_preprocessing(spec, tmp_path / "saved") == ["task_card.json"] and "carry no tokenizer" in caplog.text
