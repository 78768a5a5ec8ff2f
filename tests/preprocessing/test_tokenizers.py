"""What checkpoints carry for raw inputs: tokenizers giving the task's own ids, and the series feature extractor,
loaded through the Auto classes in a process without spt_hf."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from sklearn.datasets import load_digits
from without_spt_hf import run_without_spt_hf

from spt_hf.data import get_task_spec
from spt_hf.data.generators.listops import generate_listops
from spt_hf.data.readers import offline
from spt_hf.data.readers.lra import listops_example
from spt_hf.data.spec import Normalization, TaskSpec
from spt_hf.data.vocab import BYTE_VOCAB, EOS_ID, UNK_ID, Vocabulary
from spt_hf.preprocessing import build_tokenizer, encode_text, processing_class, save_preprocessing, symbols_of

TEXTS = [
    "A plain review.<br /><br />Ten out of 10!",
    "héllo wörld ✓ 😀 naïve — “quotes” 日本語",
    "tabs\tand\nnew lines\r\n  and  <pad> <eos> <unk> written as text",
    "",
]
DNA = Vocabulary(list("ACGT \n"), name="dna")
CHARS = TaskSpec(name="chars_demo", vocab=DNA, tokenization="chars", max_length=12, append_eos=True)


def listops_rows(n: int = 12) -> list[tuple[str, int]]:
    return generate_listops(n, min_length=5, max_length=60, max_depth=4, seed=1)


def digits_rows(n: int = 20) -> tuple[list[str], list[list[int]]]:
    """Raw digit scans written as the 64 intensities between spaces, and the digits task's own ids of them."""
    bunch = load_digits()
    texts = [" ".join(str(int(v)) for v in row) for row in bunch.data[:n]]
    ids = [ex["input_ids"] for _, ex in zip(range(n), offline.digits_examples(as_tokens=True)())]
    return texts, ids


def test_listops_tokenizer_gives_the_readers_ids():
    spec = get_task_spec("listops", max_length=30)
    tok = build_tokenizer(spec)
    for text, value in listops_rows():
        expected = listops_example(text, str(value), spec.max_length - 1, [EOS_ID], "row")["input_ids"]
        assert tok(text, truncation=True)["input_ids"] == expected == encode_text(spec, text)
    assert any(len(listops_example(t, "0", 10**6, [], "row")["input_ids"]) > 29 for t, _ in listops_rows())


@pytest.mark.parametrize("max_length", [8, 4096])
def test_bytes_tokenizer_is_exact_utf8_and_round_trips(max_length):
    spec = get_task_spec("text", max_length=max_length, append_eos=max_length == 8)
    tok = build_tokenizer(spec)
    for text in TEXTS:
        keep = max_length - 1 if spec.append_eos else max_length
        expected = BYTE_VOCAB.encode_text(text, keep) + ([EOS_ID] if spec.append_eos else [])
        ids = tok(text, truncation=True)["input_ids"]
        assert ids == expected == encode_text(spec, text)
        if max_length == 4096:
            assert tok.decode(ids) == text  # non-ASCII and special-token text come back exactly


def test_whitespace_tokenizer_gives_the_digits_tasks_ids():
    spec = get_task_spec("digits")
    tok = build_tokenizer(spec)
    texts, ids = digits_rows()
    assert [tok(t, truncation=True)["input_ids"] for t in texts] == ids
    assert tok("0  16\t3\n 17")["input_ids"] == [4, 20, 7, UNK_ID]  # any whitespace; 17 is not a level
    spaces = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())  # all that str.split() splits on
    text = " 1" + "2".join(spaces) + "3 "
    assert tok(text)["input_ids"] == encode_text(spec, text) and len(encode_text(spec, text)) == len(spaces) + 1


def test_chars_tokenizer_one_symbol_per_character_unknown_as_unk():
    tok = build_tokenizer(CHARS)
    assert symbols_of("chars", "AC g\n") == ["A", "C", " ", "g", "\n"]
    assert tok("AC gT\n")["input_ids"] == [4, 5, 8, UNK_ID, 7, 9, EOS_ID]
    long = "ACGT" * 5
    assert tok(long, truncation=True)["input_ids"] == encode_text(CHARS, long) == [4, 5, 6, 7] * 2 + [4, 5, 6, EOS_ID]


def test_tasks_without_a_text_form_carry_no_tokenizer_and_continuous_ones_a_feature_extractor():
    assert processing_class(get_task_spec("digits", input_kind="continuous")).num_channels == 1
    for name, channels in (("image", 1), ("scifar", 3), ("pathfinder", 1), ("speech_commands", 1)):
        extractor = processing_class(get_task_spec(name))
        spec = get_task_spec(name)
        assert (extractor.num_channels, extractor.max_length) == (channels, spec.max_length)
        assert (tuple(extractor.mean), tuple(extractor.std)) == (spec.normalization.mean, spec.normalization.std)
    assert processing_class(get_task_spec("retrieval")).model_max_length == 4000  # per document
    speech = processing_class(get_task_spec("spoken_digits"))
    clip = np.full(1000, 0.5, dtype=np.float32)
    out = speech(clip, sampling_rate=16000)  # zero-padded to 16000 real steps, as the task stores its clips
    assert out["input_values"].shape == (1, 16000, 1) and out["attention_mask"].sum() == 16000
    assert speech.sampling_rate == 16000 and processing_class(get_task_spec("image")).sampling_rate is None
    with pytest.raises(ValueError, match="no normalisation yet"):
        processing_class(get_task_spec("bidmc"))
    spec = TaskSpec(name="ids", vocab=Vocabulary(["a"], name="a"))
    assert processing_class(spec) is None
    clash = TaskSpec(name="clash", vocab=Vocabulary(["a", "<unk>"], name="a"), tokenization="whitespace")
    assert processing_class(clash) is None and processing_class(dataclasses.replace(clash, vocab=DNA)) is not None


def test_auto_tokenizer_loads_each_tokenizer_without_spt_hf(tmp_path):
    listops = get_task_spec("listops", max_length=30)
    text = get_task_spec("text", max_length=4096)
    digits = get_task_spec("digits")
    digit_texts, digit_ids = digits_rows(5)
    cases = {
        "listops": (listops, [t for t, _ in listops_rows()]),
        "text": (text, TEXTS),
        "digits": (digits, digit_texts),
        "chars": (CHARS, ["ACGT", "AC GT\nTTTTTTTTTTTTT", "xyz"]),
    }
    expected = {}
    for name, (spec, texts) in cases.items():
        written = save_preprocessing(spec, tmp_path / name)
        assert {"tokenizer.json", "tokenizer_config.json"} <= set(written)
        expected[name] = [encode_text(spec, t) for t in texts]
    assert expected["digits"] == digit_ids
    inputs = {name: texts for name, (_, texts) in cases.items()}
    code = f"""
import json
from transformers import AutoTokenizer
inputs = json.loads({json.dumps(json.dumps(inputs))})
out = {{}}
for name, texts in inputs.items():
    tok = AutoTokenizer.from_pretrained({str(tmp_path)!r} + "/" + name)
    out[name] = [tok(t, truncation=True)["input_ids"] for t in texts]
    batch = tok(texts, truncation=True, padding=True)
    assert all(sum(m) == len(i) for m, i in zip(batch["attention_mask"], out[name]))
print(json.dumps(out))
"""
    assert run_without_spt_hf(code, tmp_path) == expected


def test_feature_extractor_pads_and_normalises_as_the_collator(tmp_path):
    import torch

    from spt_hf.data.collators import normalize, pad_values

    spec = get_task_spec("bidmc", num_channels=2, max_length=6)
    spec = dataclasses.replace(spec, normalization=Normalization((1.0, -2.0), (2.0, 0.5)))
    fe = processing_class(spec)
    rng = np.random.default_rng(0)
    series = [rng.normal(size=(n, 2)).astype(np.float32) for n in (3, 6, 9)]
    got = fe(series, return_tensors="pt")
    raw, mask = pad_values([s[:6] for s in series], 2)
    assert torch.equal(got["attention_mask"], mask)
    torch.testing.assert_close(got["input_values"], normalize(spec, raw, mask))
    assert fe(series[0])["input_values"].shape == (1, 3, 2)
    with pytest.raises(ValueError, match="series 1: holds NaN"):
        fe([series[0], np.full((2, 2), np.nan)])
    with pytest.raises(ValueError, match=r"expected \(L,\) for one channel or \(L, 2\)"):
        fe([np.zeros((4, 3))])
    save_preprocessing(spec, tmp_path / "fe")
    assert json.loads((tmp_path / "fe" / "preprocessor_config.json").read_text())["auto_map"]
    code = f"""
import json
import numpy as np
from transformers import AutoFeatureExtractor
fe = AutoFeatureExtractor.from_pretrained({str(tmp_path / "fe")!r}, trust_remote_code=True)
series = json.loads({json.dumps(json.dumps([s.tolist() for s in series]))})
out = fe([np.asarray(s, dtype=np.float32) for s in series], return_tensors="np")
print(json.dumps({{"values": out["input_values"].tolist(), "mask": out["attention_mask"].tolist()}}))
"""
    out = run_without_spt_hf(code, tmp_path)
    np.testing.assert_allclose(out["values"], got["input_values"].numpy(), rtol=1e-6)
    assert out["mask"] == got["attention_mask"].tolist()


@dataclasses.dataclass(frozen=True)
class CustomLike(TaskSpec):
    """The fields a custom task adds that its preprocessing follows (data/custom's spec has them)."""

    truncation: str | None = None
    strip_patterns: tuple[str, ...] = ()
    task_card: dict | None = None


def test_left_truncation_and_strip_patterns_of_custom_tasks(tmp_path):
    spec = CustomLike(
        name="custom", vocab=DNA, tokenization="chars", max_length=5, truncation="left", strip_patterns=(r"^>.*\n",)
    )
    text = ">label A header line\nACGTTGCA\n>x\nC"
    tok = build_tokenizer(spec)
    assert encode_text(spec, text) == [DNA.token_to_id(c) for c in "GCA\nC"]
    assert tok(text, truncation=True)["input_ids"] == encode_text(spec, text)
    card = {"source": {"files": [{"name": "a.csv", "sha256": "00"}]}, "normalization": {"mode": "per_series"}}
    written = save_preprocessing(dataclasses.replace(spec, task_card=card), tmp_path)
    assert "task_card.json" in written and json.loads((tmp_path / "task_card.json").read_text()) == card


def test_per_series_normalisation_and_left_truncation_of_the_feature_extractor():
    card = {"normalization": {"mode": "per_series"}}
    spec = CustomLike(
        name="custom",
        input_kind="continuous",
        vocab=None,
        spt_target="values",
        num_channels=1,
        max_length=4,
        normalization=Normalization((0.5,), (2.0,)),
        truncation="left",
        task_card=card,
    )
    fe = processing_class(spec)
    raw = np.array([100.0, 1.0, 2.0, 3.0, 5.0])
    kept = raw[-4:]
    expected = ((kept - kept.mean()) / kept.std()).astype(np.float32)
    np.testing.assert_allclose(fe(raw)["input_values"][0, :, 0], (expected - 0.5) / 2.0, rtol=1e-6)
