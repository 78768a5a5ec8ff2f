"""Data parallelism with 2 CPU processes (gloo) through `accelerate launch`: one DDP step equals one step of a
single process on the same global batch (SSM real-pair parameters and synced BatchNorm statistics included), and
the pipeline trains, checkpoints once, evaluates every example once, and loads."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ddp_step import one_step
from helpers import TINY_CONFIGS

HERE = Path(__file__).resolve().parent
LAUNCH = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """`accelerate launch` 2 gloo processes on a free rendezvous port (the default 29500 may be taken)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "info"}
    for _attempt in range(2):
        command = [*LAUNCH, "--main_process_port", str(free_port()), *args]
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        # On a loaded 2-core machine gloo's teardown occasionally aborts a finished rank ("terminate called without
        # an active exception", SIGABRT): that is the launcher, not the result under test, so it is retried once.
        if result.returncode == 0 or "terminate called without an active exception" not in result.stderr:
            break
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_parallel_step_equals_single_process_step_on_the_global_batch(mode, tmp_path):
    """DDP, and FSDP2 sharding each SequenceLayer (accelerate enables FSDP only on GPUs, so torch's
    `fully_shard` is applied directly here), give the parameters of one process stepping on the global batch."""
    start = time.perf_counter()
    result = launch([str(HERE / "ddp_step.py"), str(tmp_path / "ddp.pt"), mode], cwd=tmp_path)
    ddp_seconds = time.perf_counter() - start
    assert f"rank 0 of 2 ready ({mode})" in result.stdout and f"rank 1 of 2 ready ({mode})" in result.stdout
    distributed = torch.load(tmp_path / "ddp.pt", weights_only=True)
    start = time.perf_counter()
    for entry in TINY_CONFIGS:
        for input_kind in ("tokens", "continuous"):
            single = one_step(entry, input_kind, accelerator=None)
            for name, tensor in single.items():
                torch.testing.assert_close(
                    distributed[f"{entry[0]}/{input_kind}"][name], tensor, rtol=1e-5, atol=1e-6, msg=name
                )
    print(f"2-process launch {ddp_seconds:.1f} s; the same steps in this process {time.perf_counter() - start:.1f} s")


@pytest.mark.slow  # ~1 min: two launched processes train a phase; the DDP/FSDP step tests stay in the default suite
def test_pipeline_trains_on_two_processes(tmp_path):
    recipe = {
        "task": "digits",
        "task_options": {"input_kind": "tokens"},
        "model_type": "spt_rotary_transformer",
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 64,
        "max_steps": 4,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "save_strategy": "steps",
        "save_steps": 2,
        "logging_steps": 2,
        "seed": 0,
        "ddp_find_unused_parameters": False,
        "output_dir": str(tmp_path / "run"),
    }
    (tmp_path / "r.yaml").write_text(json.dumps(recipe))
    start = time.perf_counter()
    result = launch(["-m", "spt_hf", "pretrain", "--config", "r.yaml"], cwd=tmp_path)
    seconds = time.perf_counter() - start
    ranks = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if "spt_hf: spt on" in line]
    assert any("process 0 of 2 (data parallel, MULTI_CPU)" in line for line in ranks)
    assert any("process 1 of 2 (data parallel, MULTI_CPU)" in line for line in ranks)
    assert summary_lines(result, "spt") == 1  # the phase's summary: the main process only
    results = json.loads((tmp_path / "run" / "spt" / "results.json").read_text())
    assert results["budget"]["processes"] == 2 and results["budget"]["global_batch_size"] == 16
    assert sorted(p.name for p in (tmp_path / "run" / "spt").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not list(tmp_path.glob("run/spt/*.tmp*"))
    from transformers import AutoModelForMaskedLM

    AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "spt")
    # Finetune on 2 processes: validation (400 examples, not a multiple of 2 x 64) is scored once per example,
    # so the reported accuracy equals a single-process evaluation of the same saved model.
    finetune = {**recipe, "model_name_or_path": str(tmp_path / "run" / "spt")}
    (tmp_path / "f.yaml").write_text(json.dumps(finetune))
    result = launch(["-m", "spt_hf", "finetune", "--config", "f.yaml"], cwd=tmp_path)
    assert summary_lines(result, "finetune") == 1
    result = launch(["-m", "spt_hf", "finetune", "--config", "f.yaml"], cwd=tmp_path)  # finished: nothing to do
    finished = [line for line in result.stdout.splitlines() if "the finetune phase in" in line]
    assert len(finished) == 1 and "is finished" in finished[0]
    reported = json.loads((tmp_path / "run" / "finetune" / "results.json").read_text())["metrics"]["validation"]
    single = evaluate_single_process(tmp_path / "run" / "finetune", finetune)
    assert reported["eval_accuracy"] == pytest.approx(single, abs=1e-9)
    print(f"2-process pretrain {seconds:.1f} s")


def summary_lines(result: subprocess.CompletedProcess, phase: str) -> int:
    return sum(line.startswith(f"spt_hf: {phase} done in ") for line in (result.stdout + result.stderr).splitlines())


def evaluate_single_process(model_dir: Path, recipe: dict) -> float:
    from transformers import AutoModelForSequenceClassification

    from spt_hf.data import ClassificationCollator
    from spt_hf.training import load_recipe
    from spt_hf.training.task_data import load_task_data

    path = model_dir / "recipe.json"
    path.write_text(json.dumps(recipe))
    task = load_task_data(load_recipe(path))
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    collate = ClassificationCollator(task.spec)
    validation = task.splits["validation"]
    correct = 0
    with torch.no_grad():
        for start in range(0, len(validation), 64):
            batch = collate([validation[i] for i in range(start, min(start + 64, len(validation)))])
            correct += (model(**batch).logits.argmax(-1) == batch["labels"]).sum().item()
    return correct / len(validation)
