"""Data at scale: the task cache on disk, building and loading it, and reading batches through the SPT collator.

For each task it builds the cache with `load_task` (its own process: peak RSS of the build), loads it again (peak
RSS, anonymous vs file-backed: memory-mapped Arrow pages are file-backed and reclaimable), and collates batches of
masked SPT. The reference is the format spt_hf used before (continuous values as an `Array2D` of float32, (L, C) per
example), written from the same examples in the same run: its size on disk, its load and its collation, and a check
that both give bit-identical batches.

    python benchmarks/bench_data.py                                      # fashion_mnist (Image-sized, L = 1024)
    python benchmarks/bench_data.py --tasks pathx --data_dir pathx=data/pathx   # generated PathX (L = 16384)

With ``--rows N`` it measures a custom task's source instead (``task: custom``, issue 36 item 6): a Parquet file of
N variable-length int sequences (lengths 16-192, values 0-999) is generated in a temporary folder; then, each arm in
its own process (peak RSS from ``wait4``), the same encoding (ids + 1, truncated to 128, and the length) is built
(a) the custom way: ``read_source`` (the ``datasets`` Parquet builder into an Arrow cache, memory-mapped) and a
batched ``map`` over Arrow tables (``pyarrow.compute``: no row becomes a Python list), and (b) the plain way: the
same Parquet builder and ``datasets.map(batched=True)`` over Python lists. Both arms' outputs are checked equal.

    python benchmarks/bench_data.py --rows 1000000
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from common import status_mib
def memory():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields
import hashlib, datasets, numpy as np, torch
from spt_hf.data import MaskedSPTCollator, fit_normalization, get_task_spec, load_task
task, data_dir, mode, reference, batches = sys.argv[2], sys.argv[3] or None, sys.argv[4], sys.argv[5], int(sys.argv[6])
before = memory()
start = time.perf_counter()
if mode == "reference":
    train = datasets.load_from_disk(reference).with_format("numpy", columns=["input_values"], output_all_columns=True)
else:
    train = load_task(task, data_dir)["train"]
load_s = time.perf_counter() - start
loaded = memory()
spec = fit_normalization(get_task_spec(task), train)
collate = MaskedSPTCollator(spec, seed=0)
n = min(len(train), 32 * batches) // 32 * 32
start = time.perf_counter()
digest = hashlib.sha256()
for i in range(0, n, 32):
    batch = collate([{**train[j], "spt_epoch": 0, "spt_index": j} for j in range(i, i + 32)])
    for key in ("input_values", "mask_positions", "labels", "attention_mask"):
        digest.update(batch[key].numpy().tobytes())
collate_s = time.perf_counter() - start
end = memory()
print(json.dumps({"load_s": load_s, "rss_anon_mib_loaded": loaded["RssAnon"] - before["RssAnon"],
                  "rss_file_mib_loaded": loaded["RssFile"] - before["RssFile"], "peak_mib": end["VmHWM"],
                  "peak_over_start_mib": end["VmHWM"] - before["VmHWM"], "examples_per_s": n / collate_s,
                  "batches_digest": digest.hexdigest(), "examples": n}))
"""

BUILD_REFERENCE = r"""
import sys, datasets, numpy as np
from spt_hf.data import get_task_spec, load_task
task, data_dir, out = sys.argv[1], sys.argv[2] or None, sys.argv[3]
spec = get_task_spec(task)
train = load_task(task, data_dir)["train"]
features = datasets.Features({"input_values": datasets.Array2D(shape=(None, spec.num_channels), dtype="float32"),
                              "label": train.features["label"]})
def rows():
    for row in train.with_format("numpy", columns=["input_values"], output_all_columns=True):
        yield {"input_values": row["input_values"].astype(np.float32).reshape(-1, spec.num_channels),
               "label": row["label"]}
datasets.Dataset.from_generator(rows, features=features, cache_dir=out + ".build").save_to_disk(out)
"""


CUSTOM_ARM = r"""
import json, sys, time
import datasets, pyarrow as pa, pyarrow.compute as pc
from pathlib import Path
arm, data, cache, max_length = sys.argv[1], sys.argv[2], sys.argv[3], 128
datasets.disable_progress_bars()
from spt_hf.data.custom.sources import read_source  # both arms: the same modules loaded before the clock starts
FEATURES = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                              "length": datasets.Value("int32")})
def rss_mib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":")) / 1024
def encode_arrow(table):
    sliced = pc.list_slice(table.column("sequence").combine_chunks(), 0, max_length)
    lengths = pc.list_value_length(sliced).cast(pa.int32())
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths)])
    ids = pa.ListArray.from_arrays(offsets, pc.add(pc.list_flatten(sliced), 1).cast(pa.int32()))
    return pa.table({"input_ids": ids, "length": lengths})
def encode_python(batch):
    ids = [[v + 1 for v in seq[:max_length]] for seq in batch["sequence"]]
    return {"input_ids": ids, "length": [len(s) for s in ids]}
import threading
peak_anon = [0.0]
def sample():  # RssAnon has no kernel peak: poll it (memory-mapped Arrow pages are file-backed, not anonymous)
    while True:
        peak_anon[0] = max(peak_anon[0], rss_mib("RssAnon"))
        time.sleep(0.02)
before, before_anon = rss_mib("VmRSS"), rss_mib("RssAnon")
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
if arm == "custom":
    train = read_source({"data_files": data}, Path(cache)).splits["train"]
    read_s = time.perf_counter() - start
    out = train.with_format("arrow").map(encode_arrow, batched=True, batch_size=10_000, features=FEATURES,
                                         remove_columns=train.column_names)
else:
    train = datasets.load_dataset("parquet", data_files=data, split="train", cache_dir=cache)
    read_s = time.perf_counter() - start
    out = train.map(encode_python, batched=True, features=FEATURES, remove_columns=train.column_names)
total_s = time.perf_counter() - start
peak_over_start, anon_over_start = rss_mib("VmHWM") - before, peak_anon[0] - before_anon
table = out.with_format("arrow")[:]
checksum = [pc.sum(pc.list_flatten(table["input_ids"])).as_py(), pc.sum(table["length"]).as_py()]
print(json.dumps({"arm": arm, "rows": len(out), "read_s": read_s, "total_s": total_s, "rows_per_s": len(out) / total_s,
                  "peak_over_start_mib": peak_over_start, "peak_anon_over_start_mib": anon_over_start,
                  "checksum": checksum, "cache_files": len(out.cache_files)}))
"""


def write_sequences(path: Path, rows: int, seed: int = 0) -> None:
    """``rows`` int32 sequences of lengths 16-192 into one Parquet file, 100k rows per row group (little memory)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([("sequence", pa.list_(pa.int32())), ("label", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            lengths = rng.integers(16, 193, n)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            values = pa.array(rng.integers(0, 1000, int(offsets[-1]), dtype=np.int32))
            sequences = pa.ListArray.from_arrays(pa.array(offsets), values)
            writer.write_table(pa.table({"sequence": sequences, "label": rng.integers(0, 2, n)}, schema=schema))


def bench_custom(rows: int) -> None:
    """The custom-source arm against a plain ``datasets.map(batched=True)``, each in its own process (docstring)."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="bench_data-") as tmp:
        data = Path(tmp) / "sequences.parquet"
        write_sequences(data, rows)
        results = {}
        for arm in ("custom", "plain"):
            out, wall_s, peak = run(["-c", CUSTOM_ARM, arm, str(data), str(Path(tmp) / f"cache-{arm}")], env)
            results[arm] = {**out, "wall_s": round(wall_s, 1), "peak_rss_mib": round(peak)}
            print(json.dumps(results[arm]), flush=True)
    custom, plain = results["custom"], results["plain"]
    assert custom["checksum"] == plain["checksum"], (custom["checksum"], plain["checksum"])
    print(f"\nParquet of {rows} variable-length sequences (lengths 16-192): build + encode, each arm its own process")
    print("| arm | rows/s | total s | peak RSS MiB | peak RSS over start MiB | of which anonymous MiB |")
    print("|---|---|---|---|---|---|")
    for arm, r in results.items():
        print(
            f"| {arm} | {r['rows_per_s']:.0f} | {r['total_s']:.1f} | {r['peak_rss_mib']} | "
            f"{r['peak_over_start_mib']:.0f} | {r['peak_anon_over_start_mib']:.0f} |"
        )
    speed, memory = custom["rows_per_s"] / plain["rows_per_s"], custom["peak_rss_mib"] / plain["peak_rss_mib"]
    growth = custom["peak_over_start_mib"] / max(plain["peak_over_start_mib"], 1.0)
    anon = custom["peak_anon_over_start_mib"] / max(plain["peak_anon_over_start_mib"], 1.0)
    print(f"| custom / plain | {speed:.2f}x | | {memory:.2f}x | {growth:.2f}x | {anon:.2f}x |")


def run(code: list[str], env: dict) -> tuple[dict | None, float, float]:
    """Run a probe; its JSON line, its wall time and its own peak RSS (MiB, from /usr/bin/time-like wait4)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    _, status, usage = os.wait4(process.pid, 0)
    out, err = process.stdout.read(), process.stderr.read()
    if status != 0:
        raise RuntimeError(f"{code[:3]} failed:\n{err[-3000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if lines else None), time.perf_counter() - start, usage.ru_maxrss / 1024


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_task(task: str, data_dir: str, batches: int, root: Path) -> dict:
    here = str(Path(__file__).resolve().parent)
    cache = root / f"cache-{task}"
    env = {**os.environ, "SPT_HF_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    _, build_s, build_peak = run(["-c", PROBE, here, task, data_dir, "ours", "", str(batches)], env)  # builds
    ours, _, _ = run(["-c", PROBE, here, task, data_dir, "ours", "", str(batches)], env)
    reference_dir = root / f"reference-{task}"
    run(["-c", BUILD_REFERENCE, task, data_dir, str(reference_dir)], env)
    reference, _, _ = run(["-c", PROBE, here, task, data_dir, "reference", str(reference_dir), str(batches)], env)
    train_cache = next(p for p in cache.rglob("train") if p.is_dir())
    row = {
        "task": task,
        "build_s": round(build_s, 1),
        "build_peak_rss_mib": round(build_peak),
        "cache_train_mib": round(folder_bytes(train_cache) / 2**20, 1),
        "reference_train_mib": round(folder_bytes(reference_dir) / 2**20, 1),
        "ours": ours,
        "reference": reference,
        "identical_batches": ours["batches_digest"] == reference["batches_digest"],
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["fashion_mnist"])
    parser.add_argument(
        "--data_dir", "--data-dir", nargs="*", default=[], help="TASK=FOLDER pairs (generated PathX, ...)"
    )
    parser.add_argument("--batches", type=int, default=50, help="batches of 32 collated per measurement")
    parser.add_argument("--rows", type=int, help="measure a custom task's source of this many rows instead")
    args = parser.parse_args()
    if args.rows is not None:
        return bench_custom(args.rows)
    folders = dict(item.split("=", 1) for item in args.data_dir)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_data-") as tmp:
        for task in args.tasks:
            rows.append(bench_task(task, folders.get(task, ""), args.batches, Path(tmp)))
    print(
        "\n| task | train cache MiB (ours / float32 Array2D) | build peak RSS MiB | loaded: anon / file MiB "
        "(ours) | loaded: anon / file MiB (reference) | examples/s collated (ours / reference) | identical batches |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        o, ref = r["ours"], r["reference"]
        print(
            f"| {r['task']} | {r['cache_train_mib']} / {r['reference_train_mib']} | {r['build_peak_rss_mib']} | "
            f"{o['rss_anon_mib_loaded']:.0f} / {o['rss_file_mib_loaded']:.0f} | "
            f"{ref['rss_anon_mib_loaded']:.0f} / {ref['rss_file_mib_loaded']:.0f} | "
            f"{o['examples_per_s']:.0f} / {ref['examples_per_s']:.0f} | {r['identical_batches']} |"
        )


if __name__ == "__main__":
    main()
