"""Start-up of spt_hf: `import spt_hf`, the `spt-hf` command's `--help` and argument errors, and a one-step phase,
against `import torch, transformers`.

Each command runs as a fresh subprocess (`python -m spt_hf ...`, what the `spt-hf` console script runs: `spt_hf.cli`
with the package imported first), with this checkout's `src/` first on the path, `--runs` times, interleaved with
the references: `python -c "pass"` (the interpreter alone) and `python -c "import torch, transformers"`. One JSON
line per command (every run's seconds, the median, the median over the reference's), then a Markdown table.
`import spt_hf` registers the Auto classes without importing transformers' modeling code: its target is at most
1.3x the reference. A `--help` that costs about as much as the reference has imported torch before answering.
`--phase` adds a phase's time to its first step: `spt-hf spt --config cpu/digits-s4-spt.yaml` run through
`spt_hf.cli.main` in a process that ends as soon as the first training step returns (`FIRST_STEP`, which wraps
transformers' `Trainer.training_step` in the benchmark's own process), so its wall time is the start-up a phase pays
before training: imports, recipe, data, model.

    python benchmarks/bench_cli.py                # 5 runs of each
    python benchmarks/bench_cli.py --runs 9 --phase
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
REFERENCE = "python -c 'import torch, transformers'"
COMMANDS = {
    "python -c 'pass'": ["-c", "pass"],
    REFERENCE: ["-c", "import torch, transformers"],
    "spt-hf --help": ["-m", "spt_hf", "--help"],
    "spt-hf compare --help": ["-m", "spt_hf", "compare", "--help"],
    "spt-hf no-such-command": ["-m", "spt_hf", "no-such-command"],  # an argument error: one line, exit status 2
    "python -c 'import spt_hf'": ["-c", "import spt_hf"],  # the package's own import (what a script pays)
}
PHASE = "spt-hf spt --config cpu/digits-s4-spt.yaml, to its first step"
FIRST_STEP = """
import os, sys
import transformers
training_step = transformers.Trainer.training_step
def first_step(self, *args, **kwargs):
    training_step(self, *args, **kwargs)
    os._exit(0)  # the first step has run: the time to it is what is measured
transformers.Trainer.training_step = first_step
from spt_hf.cli import main
sys.exit(main(sys.argv[1:]))
"""
PHASE_ARGUMENTS = ["-c", FIRST_STEP, "spt", "--config", "cpu/digits-s4-spt.yaml", "--output_dir"]


def wall_time(arguments: list[str], env: dict) -> float:
    """Seconds from starting `python ARGUMENTS` to its exit (its output discarded)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (interleaved)")
    parser.add_argument("--phase", action="store_true", help=f"also time `{PHASE}` (a fresh output folder each run)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    env.setdefault("HF_HUB_OFFLINE", "1")
    commands = dict(COMMANDS)
    times = {name: [] for name in [*commands, *([PHASE] if args.phase else [])]}
    with tempfile.TemporaryDirectory() as work:
        for run in range(args.runs):
            for name, arguments in commands.items():
                times[name].append(wall_time(arguments, env))
            if args.phase:
                times[PHASE].append(wall_time([*PHASE_ARGUMENTS, os.path.join(work, f"run{run}")], env))
    reference = statistics.median(times[REFERENCE])
    rows = []
    for name, runs in times.items():
        median = statistics.median(runs)
        rows.append({"command": name, "runs_s": [round(t, 3) for t in runs], "median_s": round(median, 3)})
        rows[-1]["over_reference"] = round(median / reference, 3)
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n| command | median wall time (s), {args.runs} runs | over `import torch, transformers` |")
    print("|---|---|---|")
    for row in rows:
        print(f"| `{row['command']}` | {row['median_s']:.2f} | {row['over_reference']:.2f}× |")


if __name__ == "__main__":
    main()
