"""Whole-model speed: forward+backward tokens/s and peak memory of embedding -> N blocks -> head with loss.

For every (model, d, L, layers) it prints one JSON line and, at the end, a Markdown table. Our rotary Transformer is
timed interleaved (A, B, A, B, ...) in the same process against transformers' `LlamaModel` of the same width, depth,
heads and intermediate size with SDPA, and our block-local attention at long L against full SDPA attention at the
same shape. Peak memory is measured in a separate process per configuration: on CPU the peak RSS over setup
(`ru_maxrss` minus the RSS before the first step), on CUDA the peak allocated memory.

    python benchmarks/bench_models.py --quick                      # a small subset, a few minutes
    python benchmarks/bench_models.py --models transformer s4d --d 128 --lengths 1024 4096
    python benchmarks/bench_models.py --device cuda --dtype bf16   # on a GPU (see gpu_check.sh)
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

MODELS = {
    "transformer": ("spt_rotary_transformer", {"num_attention_heads": 4}),
    "s4": ("spt_s4", {"kernel": "nplr", "state_size": 64}),
    "s4d": ("spt_s4", {"kernel": "diag", "state_size": 64}),
    "dlr": ("spt_dlr", {"state_size": 1024}),
}
LOCAL_WINDOW = 1024  # block-local attention for the longest sequences


def build(name: str, d: int, length: int, layers: int, window: int | None, device, vocab: int = 32, causal=False):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import spt_hf  # noqa: F401

    model_type, extra = MODELS[name]
    kwargs = {"vocab_size": vocab, "hidden_size": d, "num_hidden_layers": layers, "num_labels": 10, **extra}
    kwargs["bidirectional"] = not causal
    if model_type == "spt_rotary_transformer":
        kwargs.update(intermediate_size=4 * d, attention_window=window)
    else:
        kwargs.update(max_position_embeddings=length)
    config = AutoConfig.for_model(model_type, **kwargs)
    attention = {"attn_implementation": "sdpa"} if model_type == "spt_rotary_transformer" else {}
    return AutoModelForSequenceClassification.from_config(config, **attention).to(device)


def build_llama(d: int, layers: int, device, vocab: int = 32):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=4 * d, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=65536, num_labels=10, pad_token_id=0,
    )  # fmt: skip
    return LlamaForSequenceClassification(config).to(device)


def make_step(model, batch: int, length: int, device, dtype):
    ids = torch.randint(4, 32, (batch, length), device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    autocast = torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32)

    def step():
        with autocast:
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return float(loss)

    return step


def interleaved(steps: dict, repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Time each step function, alternating between them after `warmup` untimed rounds."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return times


def peak_memory_gib(args: list[str]) -> float | None:
    """Peak RSS of one configuration in a fresh process (CPU), or peak CUDA memory when run on a GPU."""
    command = [sys.executable, __file__, "--memory-probe", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PEAK ")]
    return float(lines[-1].split()[1]) if lines else None


def memory_probe(argv: list[str]) -> None:
    name, d, length, layers, batch, device, dtype = argv
    device, dtype = torch.device(device), {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    d, length, layers, batch = int(d), int(length), int(layers), int(batch)
    window = LOCAL_WINDOW if name == "transformer-local" else None
    if name == "llama":
        model = build_llama(d, layers, device)
    else:
        model = build(name.split("-")[0], d, length, layers, window, device, causal=name == "transformer-causal")
    step = make_step(model, batch, length, device, dtype)
    before = current_rss_gib()
    step()
    step()
    if device.type == "cuda":
        print(f"PEAK {torch.cuda.max_memory_allocated() / 2**30:.3f}")
    else:  # peak over setup: what the training steps added to the process (imports and weights excluded)
        print(f"PEAK {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 - before:.3f}")


def current_rss_gib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 2**20


def compare(label: str, steps: dict, tokens: int, repeats: int) -> dict:
    times = interleaved(steps, repeats)
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {"config": label, **{f"{n}_tokens_per_s": round(tokens / m) for n, m in medians.items()}}
    names = list(steps)
    if len(names) == 2:
        a, b = names
        pair_ratios = [tb / ta for ta, tb in zip(times[a], times[b])]  # speed of a relative to b
        result[f"{a}_over_{b}"] = round(medians[b] / medians[a], 3)
        result[f"{a}_over_{b}_pairwise_median"] = round(statistics.median(pair_ratios), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--d", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--layers", nargs="+", type=int, default=[2, 6])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--no-memory", action="store_true", help="skip the per-configuration memory processes")
    parser.add_argument("--quick", action="store_true", help="d=128, L=1024 and 4096, 2 layers, 3 repeats")
    parser.add_argument("--memory-probe", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe)
        return
    if args.quick:
        args.d, args.lengths, args.layers, args.repeats = [128], [1024, 4096], [2], 3
    torch.set_num_threads(2) if args.device == "cpu" else None
    device, dtype = torch.device(args.device), {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    rows = []
    for d in args.d:
        for length in args.lengths:
            for layers in args.layers:
                rows += bench_one_shape(args, d, length, layers, device, dtype)
    print("\n| config | tokens/s | reference tokens/s | ratio | peak GiB over setup (ours / reference) |")
    print("|---|---|---|---|---|")
    for row in rows:
        ours, ref = row.get("ours_tokens_per_s"), row.get("reference_tokens_per_s", "")
        ratio = row.get("ours_over_reference", "")
        print(f"| {row['config']} | {ours} | {ref} | {ratio} | {row.get('peak_gib', '')} |")


def bench_one_shape(args, d: int, length: int, layers: int, device, dtype) -> list[dict]:
    rows, tokens = [], args.batch * length
    for name in args.models:
        torch.manual_seed(0)
        window = LOCAL_WINDOW if name == "transformer" and length > 4096 else None
        # Against Llama (a causal decoder) ours runs causal too, so both attend to the same number of keys.
        causal = name == "transformer" and window is None
        model = build(name, d, length, layers, window, device, causal=causal)
        ours = make_step(model, args.batch, length, device, dtype)
        label = f"{name}{'-causal' if causal else ''}{'-local' if window else ''} d={d} L={length} layers={layers}"
        label += f" {args.dtype}"
        if name == "transformer" and window is None:
            reference = make_step(build_llama(d, layers, device), args.batch, length, device, dtype)
            reference_name, reference_label = "llama", "llama"
        elif name == "transformer":
            reference = make_step(build(name, d, length, layers, None, device), args.batch, length, device, dtype)
            reference_name, reference_label = "transformer", "full SDPA"
        else:
            reference = None
        steps = {"ours": ours} if reference is None else {"ours": ours, "reference": reference}
        row = compare(label, steps, tokens, args.repeats)
        if reference is not None:
            row["reference"] = reference_label
        if not args.no_memory:
            kind = name + ("-local" if window else "-causal" if causal else "")
            probe = [kind, str(d), str(length), str(layers), str(args.batch)]
            ours_peak = peak_memory_gib([*probe, args.device, args.dtype])
            ref_peak = None
            if reference is not None:
                ref_probe = ["llama" if reference_name == "llama" else name, *probe[1:]]
                ref_peak = peak_memory_gib([*ref_probe, args.device, args.dtype])
            row["peak_gib"] = f"{ours_peak} / {ref_peak}" if reference is not None else f"{ours_peak}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
