"""A task in a pretrained backbone's own vocabulary (spt_backbone with `backbone_input: tokenizer`).

As the paper's code feeds ListOps, bytes and pixels to Pythia-70M (docs/architectures.md), every task symbol is
rendered to its text and tokenised by the backbone's tokenizer on its own; the pieces are concatenated in order, so
symbols never merge with their neighbours and one symbol always gives the same backbone tokens:

- token tasks: the symbol's text (ListOps `[MAX` -> `[`, `MAX`; a digits level `7`); byte tasks (Text, Retrieval): the
  character of the byte (Latin-1 for bytes 0x80-0xFF, one character each);
- 8-bit continuous tasks (Image, Pathfinder, digits as values): each value's decimal text `0`..`255`, step-major;
- the end token: the tokenizer's end token; an unknown symbol, or one the tokenizer drops: its unknown token (else
  the end token).

Only the data changes: labels, splits and padding are the task's (padded positions are masked, so the pad id is not
the tokenizer's and needs not be).
"""

from __future__ import annotations

import dataclasses

import datasets

from .spec import TaskSpec
from .vocab import EOS_ID, MASK_ID, NUM_SPECIAL_TOKENS, PAD_ID, UNK_ID, ByteVocabulary, Vocabulary


class BackboneVocabulary(Vocabulary):
    """The backbone tokenizer's ids as a task vocabulary: `size` ids (the backbone's embedding rows)."""

    def __init__(self, size: int, name: str) -> None:
        super().__init__((), name=name)
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BackboneVocabulary) and (other.size, other.name) == (self.size, self.name)

    def __hash__(self) -> int:
        return hash((self.size, self.name))


def symbol_texts(spec: TaskSpec) -> dict[int, str]:
    """The text of every content id of the task (task id -> text)."""
    if spec.input_kind == "continuous":
        if spec.storage_dtype != "uint8":
            raise ValueError(
                f"Task {spec.name!r} has continuous values that are not 8-bit levels; `backbone_input: tokenizer` "
                "renders values as their decimal text and needs integer levels 0-255 (Image, Pathfinder, digits)."
            )
        return {level: str(level) for level in range(256)}
    if isinstance(spec.vocab, ByteVocabulary):
        return {NUM_SPECIAL_TOKENS + byte: bytes([byte]).decode("latin-1") for byte in range(256)}
    return {NUM_SPECIAL_TOKENS + index: symbol for index, symbol in enumerate(spec.vocab.symbols)}


def token_table(spec: TaskSpec, tokenizer) -> dict[int, list[int]]:
    """Task id (or 8-bit level) -> the backbone tokenizer's ids for it."""
    end = tokenizer.eos_token_id
    table = {} if spec.input_kind == "continuous" else {EOS_ID: [end], UNK_ID: [tokenizer.unk_token_id or end]}
    fallback = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else end
    for key, text in symbol_texts(spec).items():
        # A symbol the tokenizer drops (whitespace, for a word-level tokenizer) keeps its position as the unknown token.
        table[key] = tokenizer(text, add_special_tokens=False)["input_ids"] or [fallback]
    if any(None in ids for ids in table.values()):
        raise ValueError(
            "The backbone tokenizer has no end token (eos_token), which the task's end symbol and the symbols it "
            "drops are rendered to."
        )
    return table


def retokenize_task(splits: datasets.DatasetDict, spec: TaskSpec, tokenizer, name: str) -> tuple:
    """The splits with `input_ids` (and `input_ids_2`) in the backbone tokenizer's ids, and the task spec of those
    inputs (tokens over the tokenizer's vocabulary)."""
    table = token_table(spec, tokenizer)
    source = "input_values" if spec.input_kind == "continuous" else "input_ids"
    # each input column and the column of its backbone ids (a continuous task's values become `input_ids`)
    targets = {source: "input_ids", **({"input_ids_2": "input_ids_2"} if spec.paired else {})}

    def convert(batch: dict) -> dict:
        return {
            target: [[piece for value in row for piece in _pieces(table, value, spec)] for row in batch[column]]
            for column, target in targets.items()
        }

    features = spec.features()
    features = datasets.Features(
        {
            **{k: v for k, v in features.items() if k != "input_values"},
            **{target: datasets.List(datasets.Value("int32")) for target in targets.values()},
        }
    )
    converted = splits.map(
        convert, batched=True, remove_columns=[source], features=features, desc="re-tokenising for the backbone"
    )
    longest = max(
        (len(row) for split in converted.values() for target in targets.values() for row in split[target]), default=1
    )
    return converted, backbone_spec(spec, tokenizer, name, longest)


def backbone_spec(spec: TaskSpec, tokenizer, name: str, max_length: int | None = None) -> TaskSpec:
    """The spec of the task's inputs in the backbone tokenizer's ids, their longest `max_length`; without it, the
    longest the task's length allows: its length times the most pieces any one symbol takes (an upper bound, for an
    estimate made without the data)."""
    if max_length is None:
        max_length = spec.max_length * max(len(ids) for ids in token_table(spec, tokenizer).values())
    return dataclasses.replace(
        spec,
        input_kind="tokens",
        vocab=BackboneVocabulary(len(tokenizer), name),
        num_channels=1,
        normalization=None,
        num_quantized_levels=None,
        spt_target="tokens",
        max_length=max(max_length, 1),
        append_eos=False,
        storage_dtype="float32",
    )


def _pieces(table: dict[int, list[int]], value, spec: TaskSpec) -> list[int]:
    value = int(value)
    if value in (PAD_ID, MASK_ID) and spec.input_kind == "tokens":
        raise ValueError(f"Task {spec.name!r} data holds the special id {value} (padding or mask) inside a sequence.")
    return table[value]


__all__ = ["BackboneVocabulary", "backbone_spec", "retokenize_task", "symbol_texts", "token_table"]
