"""ListOps generator: LRA's algorithm (docs/data.md §3) in our own, faster implementation, and its TSV writer.

A node at depth < ``max_depth`` draws r ~ U(0, 1); r > ``value_p`` (0.25) makes a leaf digit 0-9, otherwise an
operator node with 2..``max_args`` children (depth + 1) and an operator drawn after its children, uniform over
MIN, MAX, MED (int of the median) and SM (sum mod 10). Length counts digits, operators and closing brackets.
Trees with ``min_length < length < max_length`` are kept, deduplicated, until enough are collected. The random
draws come in LRA's order; a tree is abandoned as soon as it reaches ``max_length`` (it would be rejected anyway,
so the accepted distribution is unchanged), which is where most of the speed comes from.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable
from pathlib import Path

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
SPLIT_FILES = {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}


class _TooLong(Exception):
    """Raised inside the recursion once a tree reaches the maximum length."""


def _apply(op: str, values: list[int]) -> int:
    if op == "[MIN":
        return min(values)
    if op == "[MAX":
        return max(values)
    if op == "[SM":
        return sum(values) % 10
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) // 2  # int(np.median): floor of the mean of the middle two


def make_tree_sampler(
    rng: random.Random, max_depth: int = 10, max_args: int = 10, value_p: float = 0.25, max_length: int = 2000
) -> Callable[[], tuple[str, int, int] | None]:
    """A function drawing one tree: ``(expression, value, length)``, or ``None`` if it reached ``max_length``."""
    draw, randint, choice = rng.random, rng.randint, rng.choice
    digits = [str(d) for d in range(10)]
    values10 = range(10)
    length = [0]

    def node(depth: int) -> tuple[list[str], int]:
        if depth < max_depth and draw() <= value_p:
            n = randint(2, max_args)
            parts, values = [], []
            for _ in range(n):
                sub, value = node(depth + 1)
                parts.append(sub)
                values.append(value)
            op = choice(OPERATORS)
            length[0] += 2
            if length[0] >= max_length:
                raise _TooLong
            # LRA's left-nested binary form: ( ( ( op c1 ) c2 ) ... ] )
            out = ["( " * (n + 1) + op]
            for sub in parts:
                out.extend(sub)
                out.append(")")
            out.append("] )")
            return out, _apply(op, values)
        value = choice(values10)
        length[0] += 1
        if length[0] >= max_length:
            raise _TooLong
        return [digits[value]], value

    def sample() -> tuple[str, int, int] | None:
        length[0] = 0
        try:
            parts, value = node(1)
        except _TooLong:
            return None
        return " ".join(parts), value, length[0]

    return sample


def generate_listops(
    num_examples: int,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
    value_p: float = 0.25,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[str, int]]:
    """``num_examples`` distinct ``(expression, value)`` pairs with ``min_length < length < max_length``.

    Args:
        num_examples: how many distinct trees to collect.
        min_length, max_length: exclusive length bounds (LRA: 500 and 2000; a short variant fits a CPU).
        max_depth: nodes at this depth are leaves (LRA: 10).
        max_args: most children of an operator (LRA: 10).
        value_p: probability threshold of an operator node (LRA: 0.25).
        seed: seeds a private ``random.Random``; the same arguments give the same output.
        progress: called with 1 for each tree kept.
    """
    if not 0 <= min_length < max_length - 1:
        raise ValueError(f"need 0 <= min_length < max_length - 1, got {min_length}, {max_length}")
    if max_args < 2 or max_depth < 1:
        raise ValueError(f"need max_args >= 2 and max_depth >= 1, got {max_args}, {max_depth}")
    sample = make_tree_sampler(random.Random(seed), max_depth, max_args, value_p, max_length)
    seen: set[str] = set()
    out: list[tuple[str, int]] = []
    attempts, limit = 0, 10_000 + 100_000 * num_examples
    while len(out) < num_examples:
        attempts += 1
        if attempts > limit:
            raise RuntimeError(
                f"kept {len(out)} of {num_examples} trees after {attempts} draws: the bounds "
                f"min_length={min_length}, max_length={max_length}, max_depth={max_depth}, "
                f"max_args={max_args} admit too few distinct trees"
            )
        tree = sample()
        if tree is None or tree[2] <= min_length or tree[0] in seen:
            continue
        seen.add(tree[0])
        out.append((tree[0], tree[1]))
        if progress is not None:
            progress(1)
    return out


def write_listops_tsv(rows: list[tuple[str, int]], path: str | Path) -> None:
    """Write rows as LRA does: header ``Source<TAB>Target``, tab-separated, CRLF line ends (csv's default)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(rows)


def write_listops_splits(
    out_dir: str | Path,
    num_train: int,
    num_val: int,
    num_test: int,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    **bounds: int | float,
) -> dict[str, Path]:
    """Generate distinct trees and write ``basic_{train,val,test}.tsv`` into ``out_dir`` (LRA's file names)."""
    rows = generate_listops(num_train + num_val + num_test, seed=seed, progress=progress, **bounds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = {
        "train": rows[:num_train],
        "validation": rows[num_train : num_train + num_val],
        "test": rows[num_train + num_val :],
    }
    paths = {}
    for split, chunk in parts.items():
        paths[split] = out / SPLIT_FILES[split]
        write_listops_tsv(chunk, paths[split])
    return paths
