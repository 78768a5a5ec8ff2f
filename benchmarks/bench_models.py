"""Whole-model speed: forward+backward tokens/s and peak memory of embedding -> N blocks -> head with loss.

For every (model, d, L, layers) it prints one JSON line and, at the end, a Markdown table. Our rotary Transformer is
timed interleaved (A, B, A, B, ...) in the same process against transformers' `LlamaModel` of the same width, depth,
heads and intermediate size with SDPA, and our block-local attention at long L against full SDPA attention at the
same shape (`--window`, default 512: full attention costs L/(3w) times the attention FLOPs of block-local attention,
5.3x at w=1024 and L=16384 before the projections and feed-forward are counted, so the 5x target needs w <= 512;
`--window 512 1024` times both). Peak memory is measured in a separate process per configuration: on CPU the peak
RSS over setup (VmHWM minus the RSS before the first step), on CUDA the peak allocated memory.

    python benchmarks/bench_models.py --quick                      # a small subset, a few minutes
    python benchmarks/bench_models.py --models transformer --d 128 --lengths 16384 --layers 2 --window 512 1024
    python benchmarks/bench_models.py --models transformer s4d --d 128 --lengths 1024 4096
    python benchmarks/bench_models.py --device cuda --dtype bf16   # on a GPU (see gpu_check.sh)
    python benchmarks/bench_models.py --models mega mega-chunk spade linformer performer --d 128 --lengths 1024 4096

The baselines (MEGA full or chunked by 128, SPADE with blocks of 128, Linformer with k = 256, Performer with 256
features) have no reference in this script: their rows give tokens/s and peak memory at the same shapes.

    python benchmarks/bench_models.py --models mamba llama s4d dlr --d 128 --lengths 1024 --layers 2  # spt_backbone

spt_backbone models (`--models mamba mamba2 llama gpt_neox bert`) are timed against the bare transformers `AutoModel`
of the same backbone config with the same head work (mean pooling, a linear layer, cross-entropy), interleaved.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from common import DTYPES, status_mib

MODELS = {
    "transformer": ("spt_rotary_transformer", {"num_attention_heads": 4}),
    "s4": ("spt_s4", {"kernel": "nplr", "state_size": 64}),
    "s4d": ("spt_s4", {"kernel": "diag", "state_size": 64}),
    "dlr": ("spt_dlr", {"state_size": 1024}),
    "mega": ("spt_mega", {"chunk_size": None}),
    "mega-chunk": ("spt_mega", {"chunk_size": 128}),
    "spade": ("spt_spade", {"num_attention_heads": 4, "attention_window": 128}),
    "linformer": ("spt_linformer", {"num_attention_heads": 4, "projected_length": 256}),
    "performer": ("spt_performer", {"num_attention_heads": 4, "num_random_features": 256}),
}
# Baselines with attention and a GELU feed-forward block (FF x4 as our Transformer); MEGA: hidden and FFN x2.
ATTENTION_BASELINES = ("spt_spade", "spt_linformer", "spt_performer")
# spt_backbone around a transformers backbone (the width and depth of the run are added); each is timed against the
# bare transformers AutoModel of the same backbone config with the same head work (mean pooling, linear, loss).
# Decoders run causal (one pass, like the bare model); encoders bidirectional.
BACKBONES = {
    "mamba": {"model_type": "mamba", "state_size": 16},
    "mamba2": {"model_type": "mamba2", "state_size": 64, "head_dim": 32, "n_groups": 1, "chunk_size": 256},
    "llama": {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 4},
    "gpt_neox": {"model_type": "gpt_neox", "num_attention_heads": 4},
    "bert": {
        "model_type": "bert",
        "num_attention_heads": 4,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
}


def backbone_values(name: str, d: int, length: int, layers: int, vocab: int = 32, **switches) -> dict:
    """The backbone config of `--models NAME` as a dict (spt_backbone's fast-path defaults apply to what it leaves
    unset; `switches`, e.g. use_mambapy=False, set them)."""
    values = {**BACKBONES[name], "hidden_size": d, "num_hidden_layers": layers, "vocab_size": vocab, **switches}
    if name == "mamba2":
        values["num_heads"] = 2 * d // values["head_dim"]  # expand 2
    if name in ("llama", "gpt_neox", "bert"):
        values.update(intermediate_size=4 * d, max_position_embeddings=max(length, 512))
    return values


def build_backbone(name: str, d: int, length: int, layers: int, device, vocab: int = 32, **switches):
    """spt_backbone's classifier of the backbone (causal for decoders)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import spt_hf  # noqa: F401
    from spt_hf.modeling.configuration_backbone import backbone_direction

    inner = backbone_values(name, d, length, layers, vocab, **switches)
    causal = backbone_direction(AutoConfig.for_model(**inner))[0] == "decoder"
    config = AutoConfig.for_model(
        "spt_backbone", vocab_size=vocab, backbone_config=inner, num_labels=10, bidirectional=not causal
    )
    return AutoModelForSequenceClassification.from_config(config).to(device)


class BareBackboneClassifier(torch.nn.Module):
    """The bare transformers AutoModel of a backbone config (its own embedding and final norm) with spt_hf's
    classification head work: mean pooling, a linear layer, cross-entropy."""

    def __init__(self, backbone_config, d: int):
        from transformers import AutoModel

        super().__init__()
        self.backbone = AutoModel.from_config(backbone_config)
        self.classifier = torch.nn.Linear(d, 10)

    def forward(self, input_ids, labels):
        from transformers.modeling_outputs import SequenceClassifierOutput

        hidden = self.backbone(input_ids=input_ids).last_hidden_state  # (B, L, H)
        logits = self.classifier(hidden.mean(1))  # (B, 10)
        return SequenceClassifierOutput(loss=torch.nn.functional.cross_entropy(logits, labels), logits=logits)


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
    if model_type in ATTENTION_BASELINES:
        kwargs.update(intermediate_size=4 * d)
    elif model_type == "spt_mega":
        kwargs.update(intermediate_size=2 * d, nffn_hidden_size=2 * d, shared_representation_size=min(64, d))
    config = AutoConfig.for_model(model_type, **kwargs)
    attention = {"attn_implementation": "sdpa"} if model_type == "spt_rotary_transformer" else {}
    return AutoModelForSequenceClassification.from_config(config, **attention).to(device)


def build_llama(d: int, layers: int, device, vocab: int = 32):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=4 * d,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=65536,
        num_labels=10,
        pad_token_id=0,
    )
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
        return loss.item()

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
    command = [sys.executable, __file__, "--memory_probe", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PEAK ")]
    return float(lines[-1].split()[1]) if lines else None


def memory_probe(argv: list[str]) -> None:
    name, d, length, layers, batch, device, dtype = argv
    device, dtype = torch.device(device), DTYPES[dtype]
    d, length, layers, batch = int(d), int(length), int(layers), int(batch)
    window = int(name.rsplit("-", 1)[1]) if name.startswith("transformer-local-") else None
    if name == "llama":
        model = build_llama(d, layers, device)
    elif name.startswith("backbone-"):
        model = build_backbone(name.removeprefix("backbone-"), d, length, layers, device)
    elif name.startswith("loop-"):
        model = build_backbone(name.removeprefix("loop-"), d, length, layers, device, use_mambapy=False)
    elif name.startswith("bare-"):
        inner = build_backbone(name.removeprefix("bare-"), d, length, layers, "cpu").config.backbone_config
        model = BareBackboneClassifier(inner, d).to(device)
    else:
        base = name if name in MODELS else name.split("-")[0]  # transformer-causal, transformer-local-<w>
        model = build(base, d, length, layers, window, device, causal=name == "transformer-causal")
    step = make_step(model, batch, length, device, dtype)
    before = status_mib("VmRSS")
    step()
    step()
    if device.type == "cuda":
        print(f"PEAK {torch.cuda.max_memory_allocated() / 2**30:.3f}")
    else:  # peak over setup: what the training steps added to the process (imports and weights excluded)
        print(f"PEAK {(status_mib('VmHWM') - before) / 1024:.3f}")


def compare(steps: dict, tokens: int, repeats: int, warmup: int = 2) -> dict[str, dict]:
    """Interleaved timing of every step function; tokens/s of each and, when there is a "reference", each one's
    speed relative to it (ratio of medians and median of the per-round ratios)."""
    times = interleaved(steps, repeats, warmup)
    medians = {name: statistics.median(t) for name, t in times.items()}
    rows = {
        name: {"tokens_per_s": round(tokens / medians[name]), "median_s": round(medians[name], 4)} for name in steps
    }
    if "reference" in steps:
        for name in steps:
            if name != "reference":
                pairs = [ref / ours for ours, ref in zip(times[name], times["reference"])]
                rows[name]["over_reference"] = round(medians["reference"] / medians[name], 3)
                rows[name]["over_reference_pairwise_median"] = round(statistics.median(pairs), 3)
    if "loop" in steps:  # a Mamba-like backbone: its parallel scan ("ours") against its loop over positions
        pairs = [loop / ours for ours, loop in zip(times["ours"], times["loop"])]
        rows["ours"]["over_loop"] = round(medians["loop"] / medians["ours"], 3)
        rows["ours"]["over_loop_pairwise_median"] = round(statistics.median(pairs), 3)
        rows["ours"]["loop_median_s"] = rows["loop"]["median_s"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS) + list(BACKBONES))
    parser.add_argument("--d", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--layers", nargs="+", type=int, default=[2, 6])
    parser.add_argument("--window", nargs="+", type=int, default=[512], help="block-local attention block size(s)")
    parser.add_argument(
        "--local_from",
        "--local-from",
        type=int,
        default=8192,
        help="above this length the Transformer uses block-local attention",
    )
    parser.add_argument(
        "--full_attention_max_layers",
        "--full-attention-max-layers",
        type=int,
        default=2,
        help="time full SDPA attention against block-local attention only up to this depth (a 6-layer full step "
        "at L=16384 takes minutes on 2 cores)",
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds before the timed ones")
    parser.add_argument("--threads", type=int, default=2, help="intra-op CPU threads")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    parser.add_argument(
        "--no_memory", "--no-memory", action="store_true", help="skip the per-configuration memory processes"
    )
    parser.add_argument("--quick", action="store_true", help="d=128, L=1024 and 4096, 2 layers, 3 repeats")
    parser.add_argument("--memory_probe", "--memory-probe", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe)
        return
    if args.quick:
        args.d, args.lengths, args.layers, args.repeats = [128], [1024, 4096], [2], 3
    torch.set_num_threads(args.threads) if args.device == "cpu" else None
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    run = {"torch": torch.__version__, "device": args.device, "dtype": args.dtype, "batch": args.batch}
    print(json.dumps({**run, "threads": torch.get_num_threads()}))
    rows = []
    for d in args.d:
        for length in args.lengths:
            for layers in args.layers:
                rows += bench_one_shape(args, d, length, layers, device, dtype)
    print("\n| model | d | L | layers | tokens/s | reference | reference tokens/s | ours / reference | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        cells = [row["model"], row["d"], row["L"], row["layers"], f"{row['tokens_per_s']:,}"]
        if "reference" in row:
            cells += [row["reference"], f"{row['reference_tokens_per_s']:,}", f"{row['over_reference']:.2f}"]
        else:
            cells += ["—", "—", "—"]
        cells.append(row.get("peak_gib", "—"))
        print("| " + " | ".join(str(cell) for cell in cells) + " |")
    print_scan_table(rows)


def backbone_steps(name: str, d: int, length: int, layers: int, args, device, dtype) -> tuple[dict, dict, dict]:
    """Step functions, memory-probe names and labels of spt_backbone ("ours") and the bare model of the same backbone
    config ("reference"); for a backbone with a `use_mambapy` switch also spt_backbone with it off ("loop")."""
    ours = build_backbone(name, d, length, layers, device)
    torch.manual_seed(0)
    bare = BareBackboneClassifier(ours.config.backbone_config, d).to(device)
    models = {"ours": ours, "reference": bare}
    probes = {"ours": f"backbone-{name}", "reference": f"bare-{name}"}
    labels = {"ours": f"{name} (spt_backbone)", "reference": f"{name} (transformers AutoModel + head)"}
    if getattr(ours.config.backbone_config, "use_mambapy", None):
        torch.manual_seed(0)
        models["loop"] = build_backbone(name, d, length, layers, device, use_mambapy=False)
        probes["loop"], labels["loop"] = f"loop-{name}", f"{name} (spt_backbone, use_mambapy=False)"
    steps = {key: make_step(model, args.batch, length, device, dtype) for key, model in models.items()}
    return steps, probes, labels


def print_scan_table(rows: list[dict]) -> None:
    """Mamba-like backbones: the parallel scan against the loop over positions, and how each step time grows with L
    (the ratio to the step time at the next shorter length of the same model, width and depth)."""
    scans = [row for row in rows if "over_loop" in row]
    if not scans:
        return
    print(
        "\n| backbone | d | layers | L | parallel scan s/step | loop s/step | scan / loop (median; per pair) | "
        "growth from L/2: scan; loop |"
    )
    print("|---|---|---|---|---|---|---|---|")
    previous = {}
    for row in sorted(scans, key=lambda r: (r["model"], r["d"], r["layers"], r["L"])):
        key = (row["model"], row["d"], row["layers"])
        growth = "—"
        if key in previous and previous[key]["L"] * 2 == row["L"]:
            before = previous[key]
            growth = (
                f"{row['median_s'] / before['median_s']:.2f}×; {row['loop_median_s'] / before['loop_median_s']:.2f}×"
            )
        previous[key] = row
        print(
            f"| {row['model']} | {row['d']} | {row['layers']} | {row['L']} | {row['median_s']} | "
            f"{row['loop_median_s']} | **{row['over_loop']:.1f}×** ({row['over_loop_pairwise_median']:.1f}×) | "
            f"{growth} |"
        )


def bench_one_shape(args, d: int, length: int, layers: int, device, dtype) -> list[dict]:
    """One JSON line per model at this shape. The Transformer is timed against Llama (causal, both) up to
    --local_from, and as block-local attention (each --window) against full SDPA attention (bidirectional) above."""
    rows, tokens = [], args.batch * length
    shape = {"d": d, "L": length, "layers": layers, "B": args.batch, "device": args.device, "dtype": args.dtype}

    def model_step(name: str, window: int | None, causal: bool):
        torch.manual_seed(0)
        return make_step(
            build(name, d, length, layers, window, device, causal=causal), args.batch, length, device, dtype
        )

    for name in args.models:
        torch.manual_seed(0)
        steps, probes, labels = {}, {}, {}
        if name in BACKBONES:  # spt_backbone against the bare transformers model, same config and head work
            steps, probes, labels = backbone_steps(name, d, length, layers, args, device, dtype)
        elif name != "transformer":
            steps[name], probes[name], labels[name] = model_step(name, None, False), name, name
        elif length <= args.local_from:  # against Llama (a causal decoder): ours runs causal too, same keys per query
            steps["ours"] = model_step(name, None, True)
            probes["ours"], labels["ours"] = "transformer-causal", "transformer (causal)"
            steps["reference"] = make_step(build_llama(d, layers, device), args.batch, length, device, dtype)
            probes["reference"], labels["reference"] = "llama", "Llama (transformers, SDPA)"
        else:
            for window in args.window:
                key = f"local-{window}"
                steps[key] = model_step(name, window, False)
                probes[key], labels[key] = f"transformer-local-{window}", f"transformer, block-local w={window}"
            if layers <= args.full_attention_max_layers:
                steps["reference"] = model_step(name, None, False)
                probes["reference"], labels["reference"] = "transformer", "full SDPA attention"
        timing = compare(steps, tokens, args.repeats, args.warmup)
        peaks = {}
        if not args.no_memory:
            for key, kind in probes.items():
                peaks[key] = peak_memory_gib(
                    [kind, str(d), str(length), str(layers), str(args.batch), args.device, args.dtype]
                )
        for key in steps:
            if key == "reference":
                continue
            row = {"model": labels[key], **shape, **timing[key]}
            if "reference" in steps:
                row.update(reference=labels["reference"], reference_tokens_per_s=timing["reference"]["tokens_per_s"])
            if peaks:
                row["peak_gib"] = f"{peaks[key]}" + (f" / {peaks['reference']}" if "reference" in peaks else "")
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
