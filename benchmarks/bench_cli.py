"""Start-up of the `spt-hf` command: wall time of `--help` and of an argument error against `import torch`.

Each command runs as a fresh subprocess (`python -m spt_hf ...`, what the `spt-hf` console script runs: `spt_hf.cli`
with the package imported first), with this checkout's `src/` first on the path, `--runs` times, interleaved with
the references: `python -c "pass"` (the interpreter alone) and `python -c "import torch"`. One JSON line per command
(every run's seconds, the median, the median over the torch import's), then a Markdown table. A `--help` that costs
about as much as the torch import has imported torch (or transformers' models) before answering.

    python benchmarks/bench_cli.py                # 5 runs of each
    python benchmarks/bench_cli.py --runs 9
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
REFERENCE = "python -c 'import torch'"
COMMANDS = {
    "python -c 'pass'": ["-c", "pass"],
    REFERENCE: ["-c", "import torch"],
    "spt-hf --help": ["-m", "spt_hf", "--help"],
    "spt-hf compare --help": ["-m", "spt_hf", "compare", "--help"],
    "spt-hf no-such-command": ["-m", "spt_hf", "no-such-command"],  # an argument error: one line, exit status 2
    "python -c 'import spt_hf'": ["-c", "import spt_hf"],  # the package's own import (what a script pays)
}


def wall_time(arguments: list[str], env: dict) -> float:
    """Seconds from starting `python ARGUMENTS` to its exit (its output discarded)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (interleaved)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    times = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, arguments in COMMANDS.items():
            times[name].append(wall_time(arguments, env))
    reference = statistics.median(times[REFERENCE])
    rows = []
    for name, runs in times.items():
        median = statistics.median(runs)
        rows.append({"command": name, "runs_s": [round(t, 3) for t in runs], "median_s": round(median, 3)})
        rows[-1]["over_torch_import"] = round(median / reference, 3)
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n| command | median wall time (s), {args.runs} runs | over `import torch` |")
    print("|---|---|---|")
    for row in rows:
        print(f"| `{row['command']}` | {row['median_s']:.2f} | {row['over_torch_import']:.2f}× |")


if __name__ == "__main__":
    main()
