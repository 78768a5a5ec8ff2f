"""Packed against padded SPT training steps on ListOps' lengths: tokens/s of the same batches, interleaved.

ListOps examples come from spt_hf's generator with LRA's bounds (500 < length < 2000 symbols, plus the end token) and
are tokenised as the task reads them. Each round draws `--batch` examples and collates them twice with the SPT
collator of `--objective`: padded to the longest (`attention_mask`), and packed (`packed_sequences: true`: rows of
the same length, several sequences per row with restarting position_ids, `spt_hf.data.collators.pack_sequences`),
with the same masks. Two copies of one rotary Transformer (same initial weights, SDPA, full attention) each take a
training step (forward, backward, AdamW) on their version; the order alternates from round to round. Tokens/s counts
the real tokens of the batch (the same on both sides) over the step's time; collation is timed apart. One JSON line
per batch size, then a Markdown table with the ratio of the median tokens/s (packed / padded) and the share of the
CPU other processes used meanwhile (`other_cpu`: absolute tokens/s count only below ~5%; the interleaved ratio is
less exposed to load, not immune).

    python benchmarks/bench_packing.py                            # d=128, 2 layers, B=8 and 32, 8 rounds
    python benchmarks/bench_packing.py --objective causal --batch 16 --rounds 12
    python benchmarks/bench_packing.py --device cuda --batch 32 64
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from common import DTYPES  # noqa: E402

LISTOPS_BOUNDS = {"min_length": 500, "max_length": 2000}  # LRA's


def listops_examples(count: int, seed: int, **bounds) -> list[dict]:
    """`count` generated ListOps expressions as the task reads them (parentheses dropped, the end token appended)."""
    from spt_hf.data.generators import generate_listops
    from spt_hf.data.readers.lra import listops_example
    from spt_hf.data.vocab import EOS_ID

    rows = generate_listops(count, seed=seed, **bounds)
    examples = [listops_example(source, str(value), 4095, [EOS_ID], "generated") for source, value in rows]
    return [{**ex, "spt_epoch": 0, "spt_index": i} for i, ex in enumerate(examples)]


def build_model(objective: str, d: int, layers: int, heads: int, vocab_size: int, device: str):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    import spt_hf  # noqa: F401  (registers the model types)

    config = AutoConfig.for_model(
        "spt_rotary_transformer",
        vocab_size=vocab_size,
        hidden_size=d,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * d,
        position_embedding_type="rotary",
        bidirectional=objective == "masked",
    )
    torch.manual_seed(0)
    auto = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    return auto.from_config(config).to(device).train()


class Side:
    """One model copy with its optimiser, stepping on one kind of batch."""

    def __init__(self, model, dtype, device: str):
        self.model, self.dtype, self.device = model, dtype, device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(self, batch: dict) -> tuple[float, float]:
        """(seconds, loss) of one training step on `batch`."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if self.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device_type=self.device, dtype=self.dtype, enabled=self.dtype != torch.float32):
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, loss.item()


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def other_cpu_share(start: tuple, own_start) -> float:
    """The share of all CPUs that other processes used since `start` (`cpu_ticks`) and `own_start` (`os.times`)."""
    (busy0, total0), (busy1, total1), own_end = start, cpu_ticks(), os.times()
    own = (own_end.user + own_end.system - own_start.user - own_start.system) * os.sysconf("SC_CLK_TCK")
    return max(0.0, (busy1 - busy0) - own) / max(1, total1 - total0)


def bench(examples: list[dict], batch_size: int, args) -> dict:
    from spt_hf.data import CausalSPTCollator, MaskedSPTCollator, get_task_spec

    spec = get_task_spec("listops", max_length=4096)
    collator = MaskedSPTCollator if args.objective == "masked" else CausalSPTCollator
    collate = {"padded": collator(spec), "packed": collator(spec, packed=True)}
    dtype = DTYPES[args.dtype]
    models = [build_model(args.objective, args.d, args.layers, args.heads, spec.vocab_size, args.device) for _ in "ab"]
    models[1].load_state_dict(models[0].state_dict())  # the same initial weights (built with the same seed too)
    sides = {name: Side(model, dtype, args.device) for name, model in zip(("padded", "packed"), models)}
    draw = random.Random(args.seed)
    times = {"padded": [], "packed": []}
    collate_s = {"padded": [], "packed": []}
    tokens, positions, rows, first_losses = [], {"padded": [], "packed": []}, [], {}
    for round_index in range(args.warmup + args.rounds):
        if round_index == args.warmup:
            ticks, own = cpu_ticks(), os.times()
        chosen = draw.sample(examples, batch_size)
        real = sum(len(ex["input_ids"]) for ex in chosen)
        batches = {}
        for name in ("padded", "packed"):
            start = time.perf_counter()
            batches[name] = collate[name](chosen)
            collate_s[name].append(time.perf_counter() - start)
        order = ("padded", "packed") if round_index % 2 == 0 else ("packed", "padded")
        measured = {name: sides[name].step(batches[name]) for name in order}
        if round_index == 0:  # same weights, same examples: the same loss
            first_losses = {name: loss for name, (_, loss) in measured.items()}
        if round_index < args.warmup:
            continue
        tokens.append(real)
        rows.append(batches["packed"]["input_ids"].shape[0])
        for name in ("padded", "packed"):
            times[name].append(measured[name][0])
            positions[name].append(batches[name]["input_ids"].numel())
    other = other_cpu_share(ticks, own)
    speed = {name: [n / t for n, t in zip(tokens, times[name])] for name in times}
    median = {name: statistics.median(speed[name]) for name in speed}
    pairs = [b / a for a, b in zip(speed["padded"], speed["packed"])]
    return {
        "objective": args.objective,
        "device": args.device,
        "dtype": args.dtype,
        "d": args.d,
        "layers": args.layers,
        "batch": batch_size,
        "rounds": args.rounds,
        "mean_length": round(sum(tokens) / (len(tokens) * batch_size), 1),
        "padded_tok_s": round(median["padded"], 1),
        "packed_tok_s": round(median["packed"], 1),
        "packed_over_padded": round(median["packed"] / median["padded"], 3),
        "median_pair_ratio": round(statistics.median(pairs), 3),
        "padded_step_s": round(statistics.median(times["padded"]), 4),
        "packed_step_s": round(statistics.median(times["packed"]), 4),
        "real_share_padded": round(sum(tokens) / sum(positions["padded"]), 3),
        "real_share_packed": round(sum(tokens) / sum(positions["packed"]), 3),
        "rows_packed": round(statistics.mean(rows), 2),
        "collate_ms_padded": round(1000 * statistics.median(collate_s["padded"]), 2),
        "collate_ms_packed": round(1000 * statistics.median(collate_s["packed"]), 2),
        "first_loss_diff": abs(first_losses["padded"] - first_losses["packed"]),
        "other_cpu": round(other, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", choices=("masked", "causal"), default="masked")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32], help="examples per step (one row each)")
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (one packed and one padded step each)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--examples", type=int, default=256, help="generated ListOps examples to draw batches from")
    parser.add_argument("--min_length", "--min-length", type=int, default=LISTOPS_BOUNDS["min_length"])
    parser.add_argument("--max_length", "--max-length", type=int, default=LISTOPS_BOUNDS["max_length"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    examples = listops_examples(args.examples, args.seed, min_length=args.min_length, max_length=args.max_length)
    lengths = sorted(len(ex["input_ids"]) for ex in examples)
    print(
        json.dumps(
            {
                "listops_examples": len(examples),
                "length_min": lengths[0],
                "length_median": lengths[len(lengths) // 2],
                "length_max": lengths[-1],
                "generate_s": round(time.perf_counter() - start, 1),
                "threads": args.threads,
            }
        ),
        flush=True,
    )
    rows = []
    for batch_size in args.batch:
        rows.append(bench(examples, batch_size, args))
        print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| objective | B | d × layers | mean length | padded tok/s | packed tok/s | packed / padded | "
        "real share padded → packed | rows per packed batch | other CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['objective']} | {r['batch']} | {r['d']} × {r['layers']} | {r['mean_length']} | "
            f"{r['padded_tok_s']:.0f} | {r['packed_tok_s']:.0f} | {r['packed_over_padded']}× | "
            f"{r['real_share_padded']:.0%} → {r['real_share_packed']:.0%} | {r['rows_packed']} | "
            f"{r['other_cpu']:.0%} |"
        )


if __name__ == "__main__":
    main()
