"""Long sequences within memory: forward+backward at L=16384, batch 1, for S4 (NPLR and S4D), DLR and the
Transformer with block-local attention (`--window`, default 512), with and without gradient checkpointing, and the
linear-memory baselines: MEGA with chunks of 128, SPADE (blocks of 128), Linformer (k = 256) and Performer (256
features). Each configuration runs in its own process; the figures are the peak RSS over setup (VmHWM minus the RSS
before the first step), that peak per 1,000 tokens (constant when memory is linear in L) and the step time.

    python benchmarks/bench_long.py                      # d=128, 6 layers, L=16384
    python benchmarks/bench_long.py --lengths 16384 65536 --models s4d dlr transformer-local
    python benchmarks/bench_long.py --lengths 4096 16384 --models mega-chunk linformer performer spade
"""

import argparse
import json
import subprocess
import sys
import time

import torch
from common import status_mib

MODELS = {
    "s4": ("spt_s4", {"kernel": "nplr"}),
    "s4d": ("spt_s4", {"kernel": "diag"}),
    "dlr": ("spt_dlr", {}),
    "transformer-local": ("spt_rotary_transformer", {"num_attention_heads": 4}),
    "mega-chunk": ("spt_mega", {"chunk_size": 128}),
    "spade": ("spt_spade", {"num_attention_heads": 4, "attention_window": 128}),
    "linformer": ("spt_linformer", {"num_attention_heads": 4, "projected_length": 256}),
    "performer": ("spt_performer", {"num_attention_heads": 4, "num_random_features": 256}),
}


def probe(name: str, d: int, layers: int, length: int, checkpointing: bool, window: int) -> dict:
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import spt_hf  # noqa: F401

    torch.set_num_threads(2)
    model_type, extra = MODELS[name]
    if model_type == "spt_rotary_transformer":
        extra = {**extra, "attention_window": window}
    config = AutoConfig.for_model(
        model_type,
        vocab_size=32,
        hidden_size=d,
        num_hidden_layers=layers,
        num_labels=2,
        max_position_embeddings=length,
        **extra,
    )
    model = AutoModelForSequenceClassification.from_config(config).train()
    if checkpointing:
        model.activation_checkpointing_enable()
    ids, labels = torch.randint(4, 32, (1, length)), torch.tensor([1])
    before = status_mib("VmRSS")
    times = []
    for _ in range(2):
        start = time.perf_counter()
        model(input_ids=ids, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    peak_gib = (status_mib("VmHWM") - before) / 1024
    return {
        "model": name,
        "d": d,
        "layers": layers,
        "length": length,
        "checkpointing": checkpointing,
        "window": extra.get("attention_window"),
        "peak_gib_over_setup": round(peak_gib, 3),
        "mib_per_1k_tokens": round(peak_gib * 2**10 / length * 1e3, 1),
        "step_s": round(min(times), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--lengths", nargs="+", type=int, default=[16384])
    parser.add_argument("--window", type=int, default=512, help="block size of the Transformer's local attention")
    parser.add_argument("--probe", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        name, d, layers, length, checkpointing, window = args.probe
        row = probe(name, int(d), int(layers), int(length), checkpointing == "1", int(window))
        print("RESULT " + json.dumps(row))
        return
    rows = []
    for name in args.models:
        for length in args.lengths:
            for checkpointing in (False, True):
                command = [
                    sys.executable,
                    __file__,
                    "--probe",
                    name,
                    str(args.d),
                    str(args.layers),
                    str(length),
                    "1" if checkpointing else "0",
                    str(args.window),
                ]
                out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
                lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
                row = json.loads(lines[-1][7:]) if lines else {"model": name, "error": out.stderr[-500:]}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| model | L | layers | gradient checkpointing | peak GiB over setup | MiB per 1k tokens | step s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" not in r:
            print(
                f"| {r['model']} | {r['length']} | {r['layers']} | {r['checkpointing']} | "
                f"{r['peak_gib_over_setup']} | {r['mib_per_1k_tokens']} | {r['step_s']} |"
            )


if __name__ == "__main__":
    main()
