"""`spt-hf inspect --task_config TASK.yaml`: what a custom task infers from its data, before anything is trained.

It prints the source and split sizes, the input kind, the vocabulary size or channels, the length distribution per
split and how many examples `max_length` truncates, the problem type with its evidence, the classes with their counts
per split, and the leakage report; `--json` prints the task card as one JSON object (keys `problem_type`,
`num_labels`, `label_names`, `input_kind`, `vocab_size` or `num_channels`, `max_length`, `splits`, `lengths`,
`leakage`, ...).
"""

import argparse
import json

from .options import add_command, spellings

NATURAL_SPLITS = ("train", "validation", "test")
SPLIT_KEYS = ("splits", "split_origin", "lengths", "truncated", "label_counts")  # the card's mappings by split


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "what a custom task infers from its data (nothing is trained)"
    parser = add_command(commands, common, "inspect", inspect_command, text, builds_models=False)
    parser.add_argument(
        *spellings("--task_config"), required=True, help="a task file: `task: custom` and `task_options:`"
    )
    parser.add_argument("--json", action="store_true", help="print the task card as one JSON object")


def inspect_command(args, rest: list[str]) -> int:
    import datasets

    from ..data import get_task_spec
    from ..recipes.task_file import read_task_file

    datasets.disable_progress_bars()  # the source's reading: the card is the output
    task, options = read_task_file(args.task_config)
    spec = get_task_spec(task, **options)
    card = getattr(spec, "task_card", None)
    if not isinstance(card, dict):
        raise ValueError(f"{args.task_config}: `spt-hf inspect` describes `task: custom` files; {task!r} is built in")
    card = {**in_split_order(card), "validation_warnings": card_validation_warnings(card)}
    print(json.dumps(card, indent=1) if args.json else "\n".join(card_lines(card)))
    return 0


def in_split_order(card: dict) -> dict:
    """The card with its per-split mappings (and the leakage's split pairs, `train/test`) in the splits' natural
    order (train, validation, test, then the others as they come), also for a card cached in alphabetical order by
    an earlier version."""

    def rank(key: str) -> tuple[int, ...]:
        return tuple(NATURAL_SPLITS.index(s) if s in NATURAL_SPLITS else len(NATURAL_SPLITS) for s in key.split("/"))

    def ordered(mapping):
        return dict(sorted(mapping.items(), key=lambda item: rank(item[0]))) if isinstance(mapping, dict) else mapping

    card = {**card, **{key: ordered(card[key]) for key in SPLIT_KEYS if key in card}}
    if isinstance(card.get("leakage"), dict) and "duplicates" in card["leakage"]:
        card["leakage"] = {**card["leakage"], "duplicates": ordered(card["leakage"]["duplicates"])}
    return card


def card_validation_warnings(card: dict) -> list[str]:
    """`validation_warnings` of the splits a task card describes (classes: those with examples in each split)."""
    from ..data.custom.splits import validation_warnings

    counts = card.get("label_counts") or {}
    classes = [[name for name, n in counts[split].items() if n] for split in ("train", "validation") if split in counts]
    return validation_warnings(card["splits"].get("validation", 0), *(classes if len(classes) == 2 else []))


def card_lines(card: dict) -> list[str]:
    """The task card as lines of text for a terminal."""
    source = card["source"]
    lines = [f"source: {source['description']} ({source['kind']})"]
    lines.append("splits: " + ", ".join(f"{s} {n} ({card['split_origin'][s]})" for s, n in card["splits"].items()))
    if card["input_kind"] == "tokens":
        lines.append(f"inputs: tokens ({card['tokenizer']}), vocabulary of {card['vocab_size']} with 4 special tokens")
    else:
        norm = card["normalization"]["mode"]
        lines.append(
            f"inputs: continuous, {card['num_channels']} channel(s), {card['layout']}, normalisation {norm}, "
            f"missing values: {card['missing']}"
        )
    lines.append(f"columns: {card['columns']}")
    lines.append(f"max_length: {card['max_length']} ({card['max_length_rule']}), truncation {card['truncation']}")
    for split, summary in card["lengths"].items():
        lines.append(
            f"  {split}: length min {summary['min']}, median {summary['median']:g}, max {summary['max']}; "
            f"{card['truncated'][split]} truncated"
        )
    lines.append(f"problem type: {card['problem_type']} ({card['problem_type_evidence']})")
    if card.get("label_counts"):
        lines.append(f"classes ({card['num_labels']}): " + ", ".join(card["label_names"]))
        for split, counts in card["label_counts"].items():
            lines.append(f"  {split}: " + ", ".join(f"{name} {n}" for name, n in counts.items()))
    lines += [f"validation warning: {line}" for line in card.get("validation_warnings", [])]
    leakage = card["leakage"]
    if leakage.get("check") == "off":
        lines.append("leakage: not checked (leakage_check: off)")
    else:
        dupes = ", ".join(f"{pair} {n}" for pair, n in leakage["duplicates"].items())
        lines.append(f"leakage: duplicates {dupes}; group overlap {leakage['group_overlap']}")
        lines += [f"  warning: {line}" for line in leakage["findings"]] or ["  no findings"]
    return lines
