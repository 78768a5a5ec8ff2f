"""Threads per phase under load: the demo's training step with 1 and 2 OpenMP threads, while other work runs.

Each sample is a fresh process (OMP_NUM_THREADS is read when torch starts, as in a phase that `spt-hf compare`
launches) that builds the demo's model (`cpu/digits-transformer-spt.yaml`: rotary Transformer, hidden 64, 2 layers,
masked-LM head, B = 32, L = 64) and times `--steps` training steps (forward, backward, AdamW); it reports the median
step. A setting is a thread count, optionally with OpenMP's wait policy (`2-passive`: OMP_WAIT_POLICY=PASSIVE, idle
threads sleep at the end of a parallel region instead of spinning, as the local launcher sets it; `2-active`: spinning,
OpenMP's default). The settings alternate (A, B, A, B, ...) for `--rounds` rounds, with `--busy` CPU-bound competitor
processes (`while True: pass`) running throughout, so that every setting sees the same load. It also reports
torch's inter-op thread count (idle in a training step: no `torch.jit.fork`/inter-op work is queued).

    python benchmarks/bench_threads.py --busy 1           # one competing process on the 2-core machine
    python benchmarks/bench_threads.py --busy 0 --settings 1 2-passive
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import torch
from transformers import AutoConfig, AutoModelForMaskedLM
import spt_hf  # noqa: F401

steps = int(sys.argv[1])
config = AutoConfig.for_model(
    "spt_rotary_transformer", vocab_size=20, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=128, max_position_embeddings=64,
)
torch.manual_seed(0)
model = AutoModelForMaskedLM.from_config(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(4, 20, (32, 64))
labels = torch.where(torch.rand(32, 64) < 0.5, ids, -100)
times = []
for step in range(steps + 3):
    start = time.perf_counter()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step >= 3:
        times.append(time.perf_counter() - start)
print(json.dumps({"intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                  "median_s": statistics.median(times)}))
"""


def sample(setting: str, steps: int) -> dict:
    threads, _, policy = setting.partition("-")
    env = {**os.environ, "OMP_NUM_THREADS": threads, "TRANSFORMERS_VERBOSITY": "error"}
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy.upper()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=["1", "2-passive", "2-active"], help="threads[-wait policy]")
    parser.add_argument("--busy", type=int, default=1, help="CPU-bound competitor processes during the run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        times = {setting: [] for setting in args.settings}
        for _ in range(args.rounds):
            for setting in args.settings:
                result = sample(setting, args.steps)
                times[setting].append(result["median_s"])
                print(json.dumps({"setting": setting, "busy": args.busy, **result, "load": os.getloadavg()[0]}))
    finally:
        for process in busy:
            process.kill()
    base = args.settings[0]
    print(f"\n| OMP threads[-wait policy] | busy processes | median step s | vs {base} (medians; per round) |")
    print("|---|---|---|---|")
    for setting, values in times.items():
        pairs = statistics.median(v / b for v, b in zip(values, times[base]))
        ratio = statistics.median(values) / statistics.median(times[base])
        print(f"| {setting} | {args.busy} | {statistics.median(values):.4f} | {ratio:.2f}× ({pairs:.2f}×) |")


if __name__ == "__main__":
    main()
