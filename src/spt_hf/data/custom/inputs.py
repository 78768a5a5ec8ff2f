"""A custom task's inputs: tokens of a vocabulary fitted on train, or continuous values of one or more channels.

Text becomes symbols by ``tokenizer``: ``bytes`` (UTF-8 bytes, the fixed 256-symbol vocabulary), ``chars`` (one
symbol per character, the default for text), ``alphabet`` (the characters of the ``alphabet`` option, others unknown),
``whitespace`` (whitespace-separated words) or ``ids`` (integers, as a list or between spaces). Binary inputs (a
``datasets.Value("binary")`` column, e.g. class folders of MIDI files) take ``bytes`` only, their default. The
vocabulary keeps the symbols seen at least ``min_frequency`` times in train. Series are lists of numbers (one
channel), lists of lists in ``(L, C)`` (``steps_first``) or ``(C, L)`` (``channels_first``) layout, several sequence
columns (one channel each), or several number columns (one step each). ``missing`` says what a NaN, ``None`` or
``?`` becomes: an error (default), ``zero``, or ``ffill`` (the channel's previous value; 0 before the first).

``tokenizer`` may also name an existing Hugging Face tokenizer (a ``save_pretrained`` folder, or a name in the local
cache; nothing is downloaded): its ids, shifted by the four special ids (its id ``i`` is ours ``i + 4``), its
vocabulary whole (nothing is fitted), its own special tokens neither added nor matched in the text. WordPiece, BPE
and WordLevel models are taken.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np

from ..spec import DataFormatError
from ..vocab import BYTE_VOCAB, NUM_SPECIAL_TOKENS, UNK_ID

TOKENIZERS = ("bytes", "chars", "alphabet", "whitespace", "ids")
PRETRAINED_MODELS = ("WordPiece", "BPE", "WordLevel")  # models of existing tokenizers whose ids the saved one shifts
# the spec's tokenization (spec.TOKENIZATIONS) of each tokenizer: an alphabet is characters, ids are whitespace symbols
TOKENIZATION = {"bytes": "bytes", "chars": "chars", "alphabet": "chars", "whitespace": "whitespace"}
TOKENIZATION["ids"] = "whitespace"
LAYOUTS = ("auto", "steps_first", "channels_first")
MISSING = ("error", "zero", "ffill")
NORMALIZATIONS = ("train", "per_series")
NUMBERS = ("int", "uint", "float")
INPUT_COLUMNS = (
    "text",
    "sequence",
    "input_values",
    "series",
    "values",
    "input_ids",
    "sentence",
    "seq",
    "signal",
    "binary",
)


def iter_rows(ds: datasets.Dataset, rows: np.ndarray | None, columns: list[str]) -> Iterator[tuple[int, dict]]:
    """(row number in the source split, counting from 1 as messages say it, row) of ``ds`` (restricted to ``rows``),
    read in batches of the needed columns only."""
    view = ds.select_columns(columns)
    if rows is not None:
        view = view.select(rows)
    for start, batch in enumerate(view.iter(batch_size=512)):
        for i in range(len(batch[columns[0]])):
            index = start * 512 + i
            yield (int(rows[index]) if rows is not None else index) + 1, {c: batch[c][i] for c in columns}


def _floats(value: Any, where: str, column: str) -> np.ndarray:
    """The float64 array of a row's value; ``None``, ``?`` and empty text are NaN; ragged channels and text that is
    no number are one-line errors naming the row."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        pass

    def one(v: Any) -> Any:
        if isinstance(v, list | tuple):
            return [one(x) for x in v]
        if v is None or (isinstance(v, str) and v.strip() in ("?", "", "nan", "NaN")):
            return np.nan
        if _floats_or_none(str(v)) is None:
            raise DataFormatError(f"{where}: column {column!r} holds {v!r}, not a number; fix the row")
        return float(v)

    nested = one(value)
    if isinstance(nested, list) and any(isinstance(v, list) for v in nested):
        lengths = [len(v) if isinstance(v, list) else 1 for v in nested]
        if len(set(lengths)) > 1:
            raise DataFormatError(
                f"{where}: column {column!r} holds lists of different lengths {lengths[:8]}: a series' channels "
                "(or each step's channels) must be equally long; make them equal"
            )
    return np.asarray(nested, dtype=np.float64)


@dataclass(frozen=True)
class InputPlan:
    """How one row's input columns become a token sequence or an ``(L, C)`` series (what the cache stores)."""

    columns: tuple[str, ...]
    kind: str  # "tokens" | "continuous"
    tokenizer: str | None = None
    symbols: tuple[str, ...] = ()
    strip_patterns: tuple[str, ...] = ()
    layout: str = "steps_first"  # steps_first | channels_first | stacked (one column a channel) | steps (columns)
    num_channels: int = 1
    missing: str = "error"
    normalization: str = "train"

    def text(self, row: dict, where: str) -> Any:
        """The raw text (or list of symbols) of a token row, after ``strip_patterns``."""
        value = row[self.columns[0]]
        if isinstance(value, str):
            for pattern in self.strip_patterns:
                value = re.sub(pattern, "", value, flags=re.MULTILINE)
        if value is None or len(value) == 0:
            raise DataFormatError(f"{where}: empty input in column {self.columns[0]!r}; drop the row or fill it in")
        return value

    def tokens(self, row: dict, where: str) -> list[str] | list[int] | str | bytes:
        """The symbols of a token row (bytes for the ``bytes`` tokenizer, a pretrained tokenizer's own ids)."""
        value = self.text(row, where)
        if self.tokenizer not in TOKENIZERS:
            if not isinstance(value, str):
                raise DataFormatError(f"{where}: tokenizer {self.tokenizer!r} reads text, got {type(value).__name__}")
            return pretrained_ids(self.tokenizer, value)
        if self.tokenizer == "bytes":
            return value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if isinstance(value, list):
            return [str(int(v)) if isinstance(v, float) else str(v) for v in value]
        return value.split() if self.tokenizer in ("whitespace", "ids") else value  # a str: its characters

    def series(self, row: dict, where: str) -> np.ndarray:
        """The ``(L, C)`` float64 values of a continuous row, missing values handled by ``missing``."""
        if self.layout == "steps":
            values = _floats([row[c] for c in self.columns], where, ", ".join(self.columns)).reshape(-1, 1)
        elif self.layout == "stacked":
            parts = [_floats(row[c], where, c).reshape(-1) for c in self.columns]
            if len({len(p) for p in parts}) > 1:
                lengths = {c: len(p) for c, p in zip(self.columns, parts, strict=True)}
                raise DataFormatError(f"{where}: channel columns of unequal lengths {lengths}; make them equal")
            values = np.stack(parts, axis=1)
        else:
            values = _floats(row[self.columns[0]], where, self.columns[0])
            values = values.reshape(-1, 1) if values.ndim == 1 else values
            values = values.T if self.layout == "channels_first" and values.ndim == 2 else values
        if values.ndim != 2 or values.shape[1] != self.num_channels:
            raise DataFormatError(
                f"{where}: a series of shape {values.shape} where train has {self.num_channels} channels "
                f"({self.layout}); give every series the same channels or set layout"
            )
        if values.shape[0] == 0:
            raise DataFormatError(f"{where}: empty series; drop the row")
        return self._fill(values, where)

    def _fill(self, values: np.ndarray, where: str) -> np.ndarray:
        bad = np.isnan(values)
        if not bad.any():
            return values
        if self.missing == "error":
            step = int(np.argwhere(bad)[0][0])
            raise DataFormatError(f"{where}: missing value (NaN or '?') at step {step}; set missing: zero or ffill")
        if self.missing == "zero":
            return np.where(bad, 0.0, values)
        index = np.where(bad, 0, np.arange(len(values))[:, None])  # ffill: index of the last valid step so far
        np.maximum.accumulate(index, axis=0, out=index)
        filled = values[index, np.arange(values.shape[1])]
        return np.where(np.isnan(filled), 0.0, filled)

    def length(self, row: dict, where: str) -> int:
        """The untruncated length of a row (tokens or steps)."""
        return len(self.tokens(row, where)) if self.kind == "tokens" else len(self.series(row, where))

    def encode(self, row: dict, where: str, max_length: int, truncation: str) -> dict[str, Any]:
        """The cache's fields of one row: ``input_ids`` or ``input_values`` (L, C), truncated to ``max_length``."""
        cut = slice(-max_length, None) if truncation == "left" else slice(0, max_length)
        if self.kind == "tokens":
            tokens = self.tokens(row, where)[cut]
            if self.tokenizer == "bytes" or self.tokenizer not in TOKENIZERS:  # bytes, or a pretrained tokenizer's ids
                return {"input_ids": [b + NUM_SPECIAL_TOKENS for b in tokens]}
            ids = self._ids
            return {"input_ids": [ids.get(t, UNK_ID) for t in tokens]}
        values = self.series(row, where)[cut]
        if self.normalization == "per_series":
            std = values.std(0)
            values = (values - values.mean(0)) / np.where(std > 1e-8, std, 1.0)
        return {"input_values": values.astype(np.float32)}

    @property
    def _ids(self) -> dict[str, int]:
        cached = self.__dict__.get("_id_map")
        if cached is None:
            cached = {s: i + NUM_SPECIAL_TOKENS for i, s in enumerate(self.symbols)}
            self.__dict__["_id_map"] = cached
        return cached


def choose_input_columns(
    features: datasets.Features, options: dict[str, Any], taken: set[str], where: str
) -> tuple[str, ...]:
    """The input columns: ``input_column(s)`` as given, else a usual name, else the one column left over, else all
    the number columns left over (one step each, as in UCR's CSV files)."""
    columns = list(features)
    given = options.get("input_columns") or options.get("input_column")
    if given is not None:
        given = [given] if isinstance(given, str) else list(given)
        missing = [c for c in given if c not in columns]
        if missing:
            raise DataFormatError(f"{where}: no column {missing[0]!r}; columns: {columns}; set input_column")
        return tuple(given)
    usual = [c for c in INPUT_COLUMNS if c in columns]
    if usual:
        return (usual[0],)
    rest = [c for c in columns if c not in taken]
    numeric = [c for c in rest if isinstance(features[c], datasets.Value) and features[c].dtype.startswith(NUMBERS)]
    if len(rest) == 1 or (len(rest) > 1 and len(numeric) == len(rest)):
        return tuple(rest)
    raise DataFormatError(f"{where}: cannot tell the input column; columns: {columns}; set input_column")


def detect_plan(
    train: datasets.Dataset, rows: np.ndarray | None, columns: tuple[str, ...], options: dict[str, Any], where: str
) -> InputPlan:
    """The input plan from the train split's ``rows`` (all when ``None``): kind, tokenizer and vocabulary, or layout
    and channels. Messages name rows by their number in ``train``."""
    first = next(iter_rows(train, rows, list(columns)))[1]
    sample = first[columns[0]]
    tokenizer = options.get("tokenizer")
    if tokenizer is not None and tokenizer not in TOKENIZERS:
        load_pretrained(tokenizer)  # the name of an existing Hugging Face tokenizer, or a one-line error
    if isinstance(sample, bytes):
        if tokenizer not in (None, "bytes") or len(columns) > 1:
            raise ValueError(
                f"{where}: input column {columns[0]!r} holds binary data; use one input column and tokenizer: bytes"
            )
        return _token_plan(train, rows, columns[:1], "bytes", options, where)
    is_text = isinstance(sample, str) and len(columns) == 1 and _floats_or_none(sample) is None
    if tokenizer is not None or is_text or (isinstance(sample, list) and sample and isinstance(sample[0], str)):
        if len(columns) > 1:
            raise ValueError(f"token inputs read one column, got input_columns {list(columns)}; give one")
        tokenizer = tokenizer or ("chars" if isinstance(sample, str) else "whitespace")
        return _token_plan(train, rows, columns, tokenizer, options, where)
    return _series_plan(train, rows, columns, sample, options, where)


_PRETRAINED: dict[str, Any] = {}


def load_pretrained(name: str) -> Any:
    """The existing Hugging Face tokenizer ``name`` (a folder or a cached name; offline), loaded once per process;
    a one-line error when it cannot be loaded or its model is not WordPiece, BPE or WordLevel."""
    if name in _PRETRAINED:
        return _PRETRAINED[name]
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as err:  # noqa: BLE001  # any failure to load is the user's to fix; say which, in one line
        raise ValueError(
            f"tokenizer={name!r} is none of {list(TOKENIZERS)} nor a Hugging Face tokenizer folder or a name in the "
            f"local cache ({type(err).__name__}); give a save_pretrained folder or one of those"
        ) from None
    model = getattr(getattr(loaded, "backend_tokenizer", None), "model", None)
    if type(model).__name__ not in PRETRAINED_MODELS:
        raise ValueError(
            f"tokenizer {name!r}: a {type(model).__name__} model; spt_hf takes fast tokenizers of {PRETRAINED_MODELS}"
        )
    _PRETRAINED[name] = loaded
    return loaded


def pretrained_ids(name: str, text: str) -> list[int]:
    """The existing tokenizer ``name``'s own ids of ``text``: no special tokens added, special-token text in the
    input read as ordinary text (as every spt_hf tokenizer reads it)."""
    return load_pretrained(name)(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def _floats_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _token_plan(
    train: datasets.Dataset,
    rows: np.ndarray | None,
    columns: tuple[str, ...],
    tokenizer: str,
    options: dict,
    where: str,
) -> InputPlan:
    strip = options.get("strip_patterns") or ()
    strip = (strip,) if isinstance(strip, str) else tuple(strip)
    plan = InputPlan(columns, "tokens", tokenizer, strip_patterns=strip)
    if tokenizer == "bytes":
        return InputPlan(columns, "tokens", tokenizer, BYTE_VOCAB.symbols, strip)
    if tokenizer not in TOKENIZERS:
        original = load_pretrained(tokenizer)
        return InputPlan(
            columns, "tokens", tokenizer, tuple(original.convert_ids_to_tokens(range(len(original)))), strip
        )
    if tokenizer == "alphabet":
        alphabet = options.get("alphabet")
        if not alphabet:
            raise ValueError("tokenizer: alphabet needs the `alphabet` option, e.g. alphabet: ACGT")
        return InputPlan(columns, "tokens", tokenizer, tuple(dict.fromkeys(str(alphabet))), strip)
    counts: Counter = Counter()
    for index, row in iter_rows(train, rows, list(columns)):
        counts.update(plan.tokens(row, f"{where} row {index}"))
    keep = [s for s, n in counts.items() if n >= int(options.get("min_frequency") or 1)]
    if tokenizer == "ids":
        bad = next((s for s in keep if _floats_or_none(s) is None), None)
        if bad is not None:
            raise DataFormatError(f"{where}: token {bad!r} is not an integer id; use tokenizer: whitespace")
        keep.sort(key=lambda s: (float(s), s))
    elif tokenizer == "chars":
        keep.sort()
    else:
        keep.sort(key=lambda s: (-counts[s], s))
    return InputPlan(columns, "tokens", tokenizer, tuple(keep), strip)


def _series_plan(
    train: datasets.Dataset, rows: np.ndarray | None, columns: tuple[str, ...], sample: Any, options: dict, where: str
) -> InputPlan:
    missing = options.get("missing") or "error"
    normalization = options.get("normalization") or "train"
    for name, value, allowed in (("missing", missing, MISSING), ("normalization", normalization, NORMALIZATIONS)):
        if value not in allowed:
            raise ValueError(f"{name}={value!r}; allowed: {list(allowed)}")
    common = {"missing": missing, "normalization": normalization}
    if len(columns) > 1:
        scalar = not isinstance(sample, list)
        layout = "steps" if scalar else "stacked"
        return InputPlan(columns, "continuous", layout=layout, num_channels=1 if scalar else len(columns), **common)
    layout = options.get("layout") or "auto"
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; allowed: {list(LAYOUTS)}")
    first_dims, second_dims = set(), set()
    for index, row in iter_rows(train, rows, list(columns)):
        shape = _floats(row[columns[0]], f"{where} row {index}", columns[0]).shape
        if len(shape) == 1:
            shape = (shape[0], 1)
        if len(shape) != 2:
            raise DataFormatError(f"{where} row {index}: a series of shape {shape}; expected (L,), (L, C) or (C, L)")
        first_dims.add(shape[0])
        second_dims.add(shape[1])
    if layout == "auto":
        if len(first_dims) == 1 and len(second_dims) == 1:
            layout = "channels_first" if next(iter(first_dims)) < next(iter(second_dims)) else "steps_first"
        elif len(second_dims) == 1:
            layout = "steps_first"
        elif len(first_dims) == 1:
            layout = "channels_first"
        else:
            raise DataFormatError(
                f"{where}: ragged channel counts (dimensions {sorted(first_dims)} x {sorted(second_dims)}); give "
                "every series the same channels"
            )
    channels = second_dims if layout == "steps_first" else first_dims
    if len(channels) != 1:
        raise DataFormatError(f"{where}: ragged channel counts {sorted(channels)}; give every series the same")
    return InputPlan(columns, "continuous", layout=layout, num_channels=next(iter(channels)), **common)
