"""The benchmark scripts run end to end at tiny sizes and print JSON lines with the fields docs/benchmarks.md tabulates.

They time nothing here (no timed assertions); they only guard against the scripts rotting between measurements.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str, timeout: int = 300) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-2000:]
    assert "|---" in done.stdout  # the Markdown table
    return lines


@pytest.mark.slow  # ~1 min (each layer and side its own process); the bf16 test below stays in the default suite
def test_bench_layers_reports_speed_agreement_and_churn():
    rows = run_script(
        "bench_layers.py",
        "--layers",
        "s4d",
        "attention",
        "--d",
        "16",
        "--L",
        "256",
        "--batch",
        "2",
        "--steps",
        "1",
        "--warmup",
        "1",
    )
    results = [row for row in rows if "layer" in row]
    assert [row["layer"] for row in results] == ["s4d", "attention"]
    for row in results:
        assert row["max_abs_diff"] < 1e-3 and row["ours_tok_s"] > 0 and row["ref_tok_s"] > 0
        for side in ("ours_memory", "ref_memory"):
            assert {"peak_mib", "faults_per_step", "system_share"} <= set(row[side]), row[side]
    ssm_row, attention_row = results
    # the floor: the SSM layer's FFTs and GEMMs alone, a part of its step; attention has none
    assert ssm_row["floor_fft_s"] > 0 and ssm_row["floor_gemm_s"] > 0
    assert ssm_row["floor_s"] < ssm_row["ours_s"]  # the layer does all of that work and more
    assert 0 < ssm_row["kernel_s"] < ssm_row["ours_s"]
    assert "floor_s" not in attention_row and "ours_over_bound" in attention_row


def test_bench_layers_bf16_autocast_runs():
    rows = run_script(
        "bench_layers.py",
        "--layers",
        "dlr64",
        "--d",
        "16",
        "--L",
        "128",
        "--batch",
        "2",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--no-memory",
        "--dtype",
        "bf16",
    )
    assert rows[-1]["dtype"] == "bf16" and rows[-1]["ours_tok_s"] > 0


@pytest.mark.parametrize("length", [256, 512])  # at or below --local-from: against Llama; above: block-local
def test_bench_models_compares_against_its_references(length):
    baselines = ["mega-chunk", "linformer", "performer"] if length > 256 else []  # timed in-process, no reference
    rows = run_script(
        "bench_models.py",
        "--models",
        "transformer",
        "s4d",
        *baselines,
        "--d",
        "16",
        "--lengths",
        str(length),
        "--layers",
        "1",
        "--batch",
        "1",
        "--repeats",
        "1",
        "--window",
        "64",
        "128",
        "--local-from",
        "256",
        *(["--no-memory"] if length > 256 else []),
    )
    models = {row["model"]: row for row in rows if "model" in row}
    if length == 256:
        assert models["transformer (causal)"]["reference"] == "Llama (transformers, SDPA)"
    else:
        assert {"transformer, block-local w=64", "transformer, block-local w=128", *baselines} <= set(models)
        assert models["transformer, block-local w=64"]["reference"] == "full SDPA attention"
    for row in models.values():
        assert row["tokens_per_s"] > 0
        assert ("peak_gib" in row) == (length == 256)
        assert ("over_reference" in row) == (row["model"] not in ("s4d", *baselines))


@pytest.mark.slow  # ~40 s: lengths of 1024 with and without checkpointing, each in its own process
def test_bench_long_reports_memory_per_token():
    rows = run_script(
        "bench_long.py",
        "--models",
        "s4d",
        "transformer-local",
        "--d",
        "16",
        "--layers",
        "1",
        "--lengths",
        "1024",
        "--window",
        "256",
    )
    assert len(rows) == 4 and all("error" not in row for row in rows), rows
    assert {row["checkpointing"] for row in rows} == {False, True}
    assert all(row["mib_per_1k_tokens"] >= 0 for row in rows)


@pytest.mark.slow
def test_bench_compile_compares_compiled_and_eager_steps():
    """Inductor compiles for about 30 s per model on 2 cores: slow (make test-slow)."""
    (row,) = run_script(
        "bench_compile.py",
        *("--models", "s4d", "--d", "16", "--length", "32", "--batch", "2", "--steps", "4"),
        timeout=900,
    )
    assert row["first_compiled_call_s"] > 0 and row["eager_step_s"] > 0 and row["compiled_step_s"] > 0
    assert row["steps"] == 4 and row["last_loss"] != row["first_loss"]  # the copies trained
    assert row["max_loss_diff"] < 1e-4


@pytest.mark.slow
def test_bench_compile_runs_the_tiny_table_and_a_paper_recipe():
    """The tests' table of tiny configs and a recipe's phase model, through AOTAutograd (no code generation)."""
    rows = run_script(
        "bench_compile.py",
        *("--table", "tiny", "--recipes", "listops/mega-finetune.yaml", "--length", "32"),
        *("--backend", "aot_eager", "--steps", "3", "--threads", "1"),
        timeout=900,
    )
    from helpers import TINY_IDS

    assert [row["model"] for row in rows] == [*TINY_IDS, "listops/mega-finetune.yaml"]
    assert rows[-1]["layers"] == 6 and rows[-1]["length"] == 32  # the recipe's size, at the length asked
    # dropout off in both copies (the MEGA recipe's 0.1 would otherwise draw different masks): equal losses
    assert all(row["max_loss_diff"] < 1e-5 for row in rows), [(r["model"], r["max_loss_diff"]) for r in rows]


@pytest.mark.slow
def test_bench_data_compares_the_cache_with_float32_arrays(tmp_path):
    """Generates a small Pathfinder split and measures its cache against the float32 reference (about 1 min)."""
    from spt_hf.data import generate_data

    generate_data("pathfinder", tmp_path / "pf", 40, 8, 8, seed=0)
    (row,) = run_script(
        "bench_data.py",
        "--tasks",
        "pathfinder",
        "--data-dir",
        f"pathfinder={tmp_path / 'pf'}",
        "--batches",
        "1",
        timeout=900,
    )
    assert row["identical_batches"] and row["cache_train_mib"] < row["reference_train_mib"]


def test_bench_models_times_spt_backbone_against_the_bare_transformers_model():
    rows = run_script(
        "bench_models.py",
        "--models",
        "llama",
        "--d",
        "16",
        "--lengths",
        "64",
        "--layers",
        "1",
        "--batch",
        "1",
        "--repeats",
        "1",
        "--no-memory",
    )
    (row,) = [row for row in rows if "model" in row]
    assert row["model"] == "llama (spt_backbone)" and row["reference"] == "llama (transformers AutoModel + head)"
    assert row["tokens_per_s"] > 0 and row["over_reference"] > 0


def test_bench_models_times_every_registered_architecture():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_models
    finally:
        sys.path.remove(str(BENCHMARKS))
    from spt_hf.modeling.architectures import MODEL_TYPES

    timed = {model_type for model_type, _ in bench_models.MODELS.values()}
    if bench_models.BACKBONES:  # spt_backbone is timed around each of these transformers backbones
        timed.add("spt_backbone")
    assert timed == set(MODEL_TYPES), f"benchmarks/bench_models.py MODELS misses {sorted(set(MODEL_TYPES) - timed)}"


def test_bench_models_times_mambas_parallel_scan_against_its_loop():
    pytest.importorskip("mambapy")
    lengths = ["16", "32"]
    rows = run_script(
        "bench_models.py",
        *("--models", "mamba", "--d", "16", "--lengths", *lengths, "--layers", "1", "--batch", "1"),
        *("--repeats", "1", "--no-memory"),
    )
    scans = [row for row in rows if row.get("model") == "mamba (spt_backbone)"]
    loops = [row for row in rows if row.get("model") == "mamba (spt_backbone, use_mambapy=False)"]
    assert [row["L"] for row in scans] == [int(n) for n in lengths] and len(loops) == len(lengths)
    assert all(row["over_loop"] > 0 and row["loop_median_s"] > 0 for row in scans)


def test_bench_estimate_compares_estimate_and_real_steps_on_cpu():
    rows = run_script(
        "bench_estimate.py", "--device", "cpu", "--batch", "2", "--steps", "1", "--recipes", "cpu/digits-s4-spt.yaml"
    )
    (row,) = rows
    assert row["recipe"] == "cpu/digits-s4-spt.yaml" and row["device"] == "cpu" and row["batch"] == 2
    assert abs(row["flops_ratio"] - 1) < 0.10  # the same model, inputs and counter: the estimate's scaling holds
    assert row["measured_peak_bytes"] > 0 and row["estimated_bytes"] > 0


def test_bf16_check_trains_every_architecture_and_backbone_of_bench_models():
    rows = run_script("bf16_check.py", "--device", "cpu", "--steps", "2", "--d", "16", "--length", "64", "--batch", "2")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_models
    finally:
        sys.path.remove(str(BENCHMARKS))
    expected = set(bench_models.MODELS) | {f"{name} (spt_backbone)" for name in bench_models.BACKBONES}
    assert {row["model"] for row in rows} == expected
    assert all(row["finite"] and row["steps"] == 2 for row in rows)


def test_bench_packing_times_packed_against_padded_steps():
    rows = run_script(
        "bench_packing.py",
        *("--batch", "4", "--d", "16", "--layers", "1", "--heads", "2", "--rounds", "1", "--warmup", "1"),
        *("--examples", "8", "--min_length", "20", "--max_length", "80", "--objective", "causal"),
    )
    lengths, row = rows
    assert 20 < lengths["length_min"] <= lengths["length_max"] <= 81  # the end token counts too
    assert row["batch"] == 4 and row["padded_tok_s"] > 0 and row["packed_tok_s"] > 0 and row["packed_over_padded"] > 0
    assert row["rows_packed"] <= 4 and row["real_share_packed"] >= row["real_share_padded"]
    assert row["first_loss_diff"] < 1e-4  # same weights, same examples: the same loss


def test_bench_cli_times_the_commands_against_the_torch_and_transformers_import():
    rows = run_script("bench_cli.py", "--runs", "1")
    by_command = {row["command"]: row for row in rows}
    reference = "python -c 'import torch, transformers'"
    assert {"spt-hf --help", "spt-hf compare --help", "python -c 'import spt_hf'", reference} <= set(by_command)
    assert by_command[reference]["over_reference"] == 1.0
    assert all(row["median_s"] > 0 and len(row["runs_s"]) == 1 for row in rows)
