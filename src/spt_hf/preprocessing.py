"""The preprocessing a checkpoint carries, so that it works on raw inputs without spt_hf (docs/pipelines.md).

A task of token inputs gets a real `transformers` tokenizer built with the `tokenizers` library from its
:class:`~spt_hf.data.spec.TaskSpec`: the spec's vocabulary with the same ids (the four special tokens first), the
spec's ``tokenization`` as the pre-tokenizer, the end token appended when the task appends it, and truncation to the
task's ``max_length`` (the end token counted). Saved next to the model, ``AutoTokenizer.from_pretrained(folder)``
loads it in any process and gives exactly the ids the task's own encoding gives (:func:`encode_text` is that
encoding, written in Python). A task of continuous inputs gets a
:class:`~spt_hf.modeling.feature_extraction_series.SeriesFeatureExtractor` (channels, normalisation, padding), which
``AutoFeatureExtractor.from_pretrained(folder, trust_remote_code=True)`` loads.

How each tokenization maps raw text to the vocabulary's symbols (``TOKENIZATIONS`` in ``data/spec.py``):

- ``bytes``: the UTF-8 bytes of the text, byte ``b`` as the symbol ``<0xNN>`` (id ``4 + b``). Built as a BPE model
  with no merges and no character symbols, whose byte fallback is exactly this mapping (not GPT-2's ByteLevel).
- ``chars``: one symbol per character (Unicode code point), whitespace included.
- ``whitespace``: the text split on whitespace.
- ``listops``: LRA's rule: parentheses dropped, then split on whitespace.

A custom task whose ``tokenizer`` names an existing Hugging Face tokenizer (``pretrained_tokenizer``) gets that
tokenizer rebuilt from its ``tokenizer.json`` with every id shifted by the four special ids (its id ``i`` is ours
``i + 4``, ours ``<pad> <mask> <eos> <unk>`` at 0-3), its own special tokens kept as content, neither added nor
matched in raw text, so it gives the task's ids on raw text.

Symbols outside the vocabulary become ``<unk>``; special-token text inside raw inputs (``"<pad>"``) is read as
ordinary text, never as the special token.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from .data.custom.inputs import load_pretrained, pretrained_ids
from .data.spec import TaskSpec
from .data.vocab import BYTE_VOCAB, EOS_ID, NUM_SPECIAL_TOKENS, SPECIAL_TOKENS, tokenize_listops
from .hub.data_card import TASK_CARD_FILE

logger = logging.getLogger(__name__)

PYTHON_WHITESPACE = r"[\s\x1c-\x1f]+"  # what str.split() splits on, as an Oniguruma pattern
_PAD, _MASK, _EOS, _UNK = SPECIAL_TOKENS


def symbols_of(tokenization: str, text: str) -> list[str]:
    """The symbols raw ``text`` becomes under ``tokenization`` (before the vocabulary maps them to ids)."""
    if tokenization == "bytes":
        return [f"<0x{b:02X}>" for b in text.encode("utf-8")]
    if tokenization == "chars":
        return list(text)
    if tokenization == "whitespace":
        return text.split()
    if tokenization == "listops":
        return tokenize_listops(text)
    raise ValueError(f"tokenization={tokenization!r} is not one of bytes, chars, whitespace, listops")


def encode_text(spec: TaskSpec, text: str) -> list[int]:
    """The ids the task gives raw ``text``: ``strip_patterns`` deleted, its symbols in the vocabulary (unknown ones
    ``<unk>``), truncated to ``max_length`` counting the end token (on the task's side), then the end token when the
    task appends it."""
    pretrained = pretrained_tokenizer(spec)
    if pretrained is None:
        _require_tokens(spec)
    keep = spec.max_length - 1 if spec.append_eos else spec.max_length
    for pattern in strip_patterns(spec):
        text = re.sub(pattern, "", text, flags=re.MULTILINE)
    if pretrained is not None:
        ids = [i + NUM_SPECIAL_TOKENS for i in pretrained_ids(pretrained, text)]
    else:
        ids = spec.vocab.encode(symbols_of(spec.tokenization, text), unknown_ok=True)
    ids = ids[-keep:] if truncation_side(spec) == "left" and len(ids) > keep else ids[:keep]
    return ids + [EOS_ID] if spec.append_eos else ids


def _require_tokens(spec: TaskSpec) -> None:
    if spec.input_kind != "tokens" or spec.tokenization is None:
        raise ValueError(
            f"task {spec.name!r} has no text tokenization (input_kind={spec.input_kind!r}); a tokenizer needs a "
            "token task with `tokenization` set (bytes, chars, whitespace or listops)"
        )


def pretrained_tokenizer(spec: TaskSpec) -> str | None:
    """The existing Hugging Face tokenizer a custom task's inputs go through, else None."""
    return getattr(spec, "pretrained_tokenizer", None)


def _shifted_backend(spec: TaskSpec):
    """The `tokenizers.Tokenizer` of an existing tokenizer with its ids shifted by 4 and ours at 0-3 (module doc)."""
    from tokenizers import Regex, Tokenizer, normalizers

    data = json.loads(load_pretrained(pretrained_tokenizer(spec)).backend_tokenizer.to_str())
    model = data["model"]
    model["vocab"] = {
        **{token: i for i, token in enumerate(SPECIAL_TOKENS)},
        **{token: i + NUM_SPECIAL_TOKENS for token, i in model["vocab"].items()},
    }
    data["added_tokens"] = [{**t, "id": t["id"] + NUM_SPECIAL_TOKENS} for t in data.get("added_tokens") or ()]
    data.update(post_processor=None, truncation=None, padding=None)
    backend = Tokenizer.from_str(json.dumps(data))
    rules = [normalizers.Replace(Regex(pattern), "") for pattern in strip_patterns(spec)]
    if rules:
        backend.normalizer = normalizers.Sequence([*rules, *([backend.normalizer] if backend.normalizer else [])])
    return backend


def truncation_side(spec: TaskSpec) -> str:
    """Which end of a too-long input the task keeps: ``"right"`` truncation keeps the start (a custom task's
    ``truncation`` option may say ``"left"``)."""
    return getattr(spec, "truncation", None) or "right"


def strip_patterns(spec: TaskSpec) -> tuple[str, ...]:
    """The regular expressions a custom task deletes from its text before tokenizing (``strip_patterns``; ``^`` and
    ``$`` match at every line, as both Python's ``re.MULTILINE`` and the tokenizers' Oniguruma read them)."""
    patterns = getattr(spec, "strip_patterns", None) or ()
    return (patterns,) if isinstance(patterns, str) else tuple(patterns)


def _backend(spec: TaskSpec):
    """The `tokenizers.Tokenizer` of a token task (model, pre-tokenizer, end token, truncation)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({symbol: i + NUM_SPECIAL_TOKENS for i, symbol in enumerate(spec.vocab.symbols)})
    if spec.tokenization == "bytes":
        if spec.vocab.symbols != BYTE_VOCAB.symbols:
            raise ValueError(f"task {spec.name!r}: tokenization 'bytes' needs the 256 byte symbols <0x00>..<0xFF>")
        backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=_UNK, byte_fallback=True))
        backend.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    else:
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=_UNK))
        if spec.tokenization == "chars":
            backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
            backend.decoder = decoders.Fuse()
        else:
            # Python's str.split(): Unicode whitespace and the separators \x1c-\x1f (the tokenizers library's
            # WhitespaceSplit misses those four). No decoder: decoding joins the symbols with spaces.
            backend.pre_tokenizer = pre_tokenizers.Split(Regex(PYTHON_WHITESPACE), behavior="removed")
    rules = [normalizers.Replace(Regex(pattern), "") for pattern in strip_patterns(spec)]
    if spec.tokenization == "listops":
        rules += [normalizers.Replace("(", " "), normalizers.Replace(")", " ")]
    if rules:
        backend.normalizer = normalizers.Sequence(rules)
    if spec.append_eos:
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A {_EOS}", pair=f"$A {_EOS} $B:1 {_EOS}:1", special_tokens=[(_EOS, EOS_ID)]
        )
    return backend


def build_tokenizer(spec: TaskSpec):
    """A `transformers` fast tokenizer of a token task that gives :func:`encode_text`'s ids on raw text (with
    ``truncation=True``; ``model_max_length`` is the task's ``max_length``)."""
    from transformers import PreTrainedTokenizerFast

    if pretrained_tokenizer(spec) is None:
        _require_tokens(spec)
    return PreTrainedTokenizerFast(
        tokenizer_object=_shifted_backend(spec) if pretrained_tokenizer(spec) else _backend(spec),
        pad_token=_PAD,
        mask_token=_MASK,
        eos_token=_EOS,
        unk_token=_UNK,
        model_max_length=spec.max_length,
        padding_side="right",
        truncation_side=truncation_side(spec),
        split_special_tokens=True,  # "<pad>" in a review is text, as in the task's own encoding
        model_input_names=["input_ids", "attention_mask"],
    )


def build_feature_extractor(spec: TaskSpec):
    """The :class:`SeriesFeatureExtractor` of a continuous task (its normalisation must be fitted already)."""
    from .modeling.feature_extraction_series import SeriesFeatureExtractor

    if spec.input_kind != "continuous":
        raise ValueError(f"task {spec.name!r} has token inputs; use build_tokenizer")
    if spec.normalization is None:
        raise ValueError(
            f"task {spec.name!r} has no normalisation yet: fit it first (spt_hf.data.fit_normalization(spec, train))"
        )
    rate = audio_sampling_rate(spec)
    return SeriesFeatureExtractor(
        num_channels=spec.num_channels,
        mean=list(spec.normalization.mean),
        std=list(spec.normalization.std),
        max_length=spec.max_length,
        truncation_side=truncation_side(spec),
        per_series=((getattr(spec, "task_card", None) or {}).get("normalization") or {}).get("mode") == "per_series",
        fixed_length=rate is not None,  # the audio tasks' clips are zero-padded to their length
        sampling_rate=rate,
    )


def audio_sampling_rate(spec: TaskSpec) -> int | None:
    """The sampling rate of an audio task's waveforms (the Hub task type says which tasks are audio); else None."""
    from .data.readers.audio import SAMPLE_RATE

    return SAMPLE_RATE if spec.HUB_TASK_TYPE == "audio-classification" else None


def processing_class(spec: TaskSpec):
    """What a checkpoint of ``spec`` carries for raw inputs: its tokenizer, its feature extractor, or ``None``
    (token inputs without a text form, or read through a pretrained backbone's tokenizer ids, whose map from the
    task's symbols no single tokenizer file holds)."""
    if spec.input_kind == "continuous":
        return build_feature_extractor(spec)
    own_symbols = len(spec.vocab) == NUM_SPECIAL_TOKENS + len(spec.vocab.symbols)  # not a backbone tokenizer's ids
    if pretrained_tokenizer(spec) is None and (spec.tokenization is None or not own_symbols):
        return None
    clash = sorted(set(SPECIAL_TOKENS) & set(spec.vocab.symbols))
    if clash:  # the data's own "<unk>" symbol and the special token cannot share one name in a tokenizer file
        logger.warning(
            "task %r has the symbols %s among its content: its checkpoints carry no tokenizer", spec.name, clash
        )
        return None
    return build_tokenizer(spec)


def save_preprocessing(spec: TaskSpec, directory: str | Path) -> list[str]:
    """Save the task's tokenizer or feature extractor (and its ``task_card.json`` when the spec has one) into
    ``directory``; returns the names of the files written."""
    directory = Path(directory)
    before = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    processor = processing_class(spec)
    if processor is not None:
        processor.save_pretrained(str(directory))
    write_task_card(spec, directory)
    return sorted({p.name for p in directory.iterdir()} - before)


def write_task_card(spec: TaskSpec, directory: str | Path) -> Path | None:
    """Write the spec's ``task_card`` (a dict, set for custom tasks) as ``task_card.json``; None when it has none."""
    card = getattr(spec, "task_card", None)
    if not card:
        return None
    path = Path(directory, TASK_CARD_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_plain(card), indent=2, sort_keys=True) + "\n")
    return path


def _plain(value: Any) -> Any:
    """A task card as JSON values: tuples become lists, mappings keep string keys, paths become strings."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


__all__ = [
    "TASK_CARD_FILE",
    "build_feature_extractor",
    "build_tokenizer",
    "classify_series",
    "encode_text",
    "processing_class",
    "save_preprocessing",
    "symbols_of",
    "write_task_card",
]


def classify_series(model, series, feature_extractor=None, top_k: int = 1) -> list[list[dict[str, Any]]]:
    """Classify raw continuous series with a finetuned checkpoint (any number of channels; one-channel series also
    work through ``pipeline("audio-classification", ...)``, docs/pipelines.md).

    Args:
        model: a checkpoint folder or Hub id, or a loaded classifier.
        series: one series or a list of them, each ``(L,)`` (one channel) or ``(L, C)``.
        feature_extractor: the checkpoint's ``SeriesFeatureExtractor``; loaded from ``model`` when it is a path.
        top_k: how many labels to return per series, best first.

    Returns:
        Per series, ``top_k`` dicts ``{"label": ..., "score": ...}`` (softmax scores), as the pipelines return them.
    """
    import torch
    from transformers import AutoFeatureExtractor, AutoModelForSequenceClassification

    if isinstance(model, str | Path):
        feature_extractor = feature_extractor or AutoFeatureExtractor.from_pretrained(str(model))
        model = AutoModelForSequenceClassification.from_pretrained(str(model))
    if feature_extractor is None:
        raise ValueError("a loaded model needs its feature_extractor (AutoFeatureExtractor.from_pretrained(folder))")
    batch = feature_extractor(series, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        probs = model(**batch).logits.softmax(-1)  # (B, num_labels)
    scores, ids = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    labels = model.config.id2label
    return [
        [{"label": labels[int(i)], "score": float(s)} for s, i in zip(row_scores, row_ids, strict=True)]
        for row_scores, row_ids in zip(scores, ids, strict=True)
    ]
