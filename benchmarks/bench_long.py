"""Long sequences within memory: forward+backward at L=16384, batch 1, for S4 (NPLR and S4D), DLR and the
Transformer with block-local attention, with and without gradient checkpointing. Each configuration runs in its own
process; the figure is the peak RSS over setup (ru_maxrss minus the RSS before the first step) and the step time.

    python benchmarks/bench_long.py                      # d=128, 6 layers, L=16384
    python benchmarks/bench_long.py --length 65536 --models s4d dlr
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

MODELS = {
    "s4": ("spt_s4", {"kernel": "nplr"}),
    "s4d": ("spt_s4", {"kernel": "diag"}),
    "dlr": ("spt_dlr", {}),
    "transformer-local": ("spt_rotary_transformer", {"num_attention_heads": 4, "attention_window": 1024}),
}


def rss_gib() -> float:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 2**20


def probe(name: str, d: int, layers: int, length: int, checkpointing: bool) -> dict:
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import spt_hf  # noqa: F401

    torch.set_num_threads(2)
    model_type, extra = MODELS[name]
    config = AutoConfig.for_model(
        model_type, vocab_size=32, hidden_size=d, num_hidden_layers=layers, num_labels=2,
        max_position_embeddings=length, **extra,
    )  # fmt: skip
    model = AutoModelForSequenceClassification.from_config(config).train()
    if checkpointing:
        model.activation_checkpointing_enable()
    ids, labels = torch.randint(4, 32, (1, length)), torch.tensor([1])
    before = rss_gib()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        model(input_ids=ids, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"model": name, "d": d, "layers": layers, "length": length, "checkpointing": checkpointing,
            "peak_gib_over_setup": round(peak - before, 3), "step_s": round(min(times), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--probe", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        name, d, layers, length, checkpointing = args.probe
        print("RESULT " + json.dumps(probe(name, int(d), int(layers), int(length), checkpointing == "1")))
        return
    rows = []
    for name in args.models:
        for checkpointing in (False, True):
            command = [sys.executable, __file__, "--probe", name, str(args.d), str(args.layers), str(args.length),
                       "1" if checkpointing else "0"]  # fmt: skip
            out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            row = json.loads(lines[-1][7:]) if lines else {"model": name, "error": out.stderr[-500:]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| model | L | layers | gradient checkpointing | peak GiB over setup | step s |\n|---|---|---|---|---|---|")
    for r in rows:
        if "error" not in r:
            print(f"| {r['model']} | {r['length']} | {r['layers']} | {r['checkpointing']} | "
                  f"{r['peak_gib_over_setup']} | {r['step_s']} |")  # fmt: skip


if __name__ == "__main__":
    main()
