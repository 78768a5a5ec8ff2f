"""A phase given several devices runs one process per device: the command each launcher runs (one machine or
several), a 2-process phase (gloo on CPU) through compare's local launcher and through the submitit job command,
its results.json (world size, global batch) and a fingerprint that tells it from a 1-process run; a process seeing
several GPUs is refused instead of using nn.DataParallel."""

import json
import sys
from pathlib import Path

import pytest
from test_compare import TINY

from spt_hf.compare import CompareSpec, run_compare
from spt_hf.compare.processes import PhaseProcesses, job_command, phase_processes, resolve_accelerate_config
from spt_hf.training.run_folder import RecipeChangedError

WORDS = ["spt", "--config", "r.yaml"]
CPU_2PROC = "accelerate/cpu_ddp_2proc.yaml"


def spec(root: Path, **changes) -> CompareSpec:
    values = {
        "tasks": ["digits"],
        "architectures": ["dlr"],
        "seeds": [0],
        "recipes_dir": "recipes/cpu",
        "output_dir": str(root / "cmp"),
        "with_scratch": False,
        "overrides": dict(TINY),
    }
    return CompareSpec(**{**values, **changes})


def test_one_process_runs_spt_hf_and_several_run_under_accelerate_launch():
    assert PhaseProcesses().command(WORDS) == [sys.executable, "-m", "spt_hf", *WORDS]
    two = PhaseProcesses(2).command(WORDS, port=1234)
    assert two[:3] == [sys.executable, "-m", "accelerate.commands.launch"] and two[-5:] == ["-m", "spt_hf", *WORDS]
    flags = " ".join(two[3:-5])
    assert "--multi_gpu" in flags and "--num_processes 2 --num_machines 1 --machine_rank 0" in flags
    assert "--main_process_ip 127.0.0.1 --main_process_port 1234" in flags
    config = resolve_accelerate_config("accelerate/fsdp.yaml")
    fsdp = PhaseProcesses(16, 2, config).command(WORDS, machine_rank=1, address="node3", port=29511)
    assert fsdp[3:5] == ["--config_file", config] and "--multi_gpu" not in fsdp  # the config's distributed type
    assert "--num_processes 16 --num_machines 2 --machine_rank 1 --main_process_ip node3" in " ".join(fsdp)
    with pytest.raises(ValueError, match="positive multiple of 2 processes, got 3"):
        PhaseProcesses(3, 2)


def test_the_processes_of_a_phase_come_from_each_launcher():
    assert phase_processes("local") == PhaseProcesses()
    local = phase_processes("local", CPU_2PROC)
    assert (local.processes, local.machines) == (2, 1) and local.accelerate_config.endswith("cpu_ddp_2proc.yaml")
    slurm = phase_processes("submitit", submitit={"gpus_per_node": 4, "nodes": 2})
    assert (slurm.processes, slurm.machines, slurm.accelerate_config) == (8, 2, None)
    config = {"cluster": "local", "processes_per_node": 2}
    assert phase_processes("submitit", submitit=config).processes == 2
    assert phase_processes("submitit", CPU_2PROC).processes == 2
    assert phase_processes("ray", ray={"num_gpus": 2}).processes == 2
    assert phase_processes("ray", ray={"num_gpus": 0.5}).processes == 1
    with pytest.raises(ValueError, match="spans 2 machines; the local launcher runs on this one"):
        phase_processes("local", "accelerate/multi_node.yaml")
    with pytest.raises(ValueError, match="`submitit: nodes: 2` needs a Slurm cluster"):
        phase_processes("submitit", submitit={"cluster": "local", "nodes": 2})


def test_a_machine_of_a_slurm_job_takes_its_rank_and_rendezvous_from_slurm(monkeypatch):
    """What the second machine of a 2-node job runs, from the variables Slurm sets in its task."""
    pytest.importorskip("submitit")
    environment = {
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": "4321",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "2",
    }
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    command, rank = job_command(WORDS, PhaseProcesses(4, 2))
    assert rank == 1
    assert "--num_processes 4 --num_machines 2 --machine_rank 1 --main_process_ip gpu07 --main_process_port 24321" in (
        " ".join(command)
    )
    monkeypatch.setenv("SLURM_NODEID", "0")
    first, rank = job_command(WORDS, PhaseProcesses(4, 2))
    assert rank == 0 and first[first.index("--main_process_port") + 1] == "24321"  # one port on every machine


def test_a_process_seeing_several_gpus_is_refused_not_wrapped_in_data_parallel(tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from spt_hf.recipes.arguments import PhaseTrainingArguments
    from spt_hf.training.trainer import PhaseTrainer

    args = PhaseTrainingArguments(output_dir=str(tmp_path), eval_strategy="no", load_best_model_at_end=False)
    config = AutoConfig.for_model("spt_dlr", vocab_size=8, hidden_size=8, num_hidden_layers=1, num_labels=2)
    model = AutoModelForSequenceClassification.from_config(config)
    PhaseTrainer(model=model, args=args)  # one device: fine
    args._n_gpu = 2  # what transformers counts in a process that sees two GPUs outside a distributed launch
    with pytest.raises(ValueError, match=r"2 GPUs are visible to one process; .*accelerate launch --num_processes 2"):
        PhaseTrainer(model=model, args=args)


def assert_two_process_results(out: Path) -> dict:
    """Both phases of the run folder trained on 2 processes: world size and global batch as trained."""
    shas = {}
    for phase in ("spt", "finetune"):
        results = json.loads((out / "digits/dlr/full/seed0" / phase / "results.json").read_text())
        budget, entries = results["budget"], results["recipe_fingerprint"]["entries"]
        assert budget["processes"] == 2 and entries["world_size"] == 2
        batch = results["recipe"]["training"]["per_device_train_batch_size"]
        accumulation = results["recipe"]["training"]["gradient_accumulation_steps"]
        assert budget["global_batch_size"] == batch * 2 * accumulation == 64
        shas[phase] = results["recipe_fingerprint"]["sha256"]
    return shas


@pytest.mark.slow
def test_a_two_process_phase_through_the_local_launcher_is_told_from_a_one_process_one(tmp_path, capsys):
    two = spec(tmp_path, accelerate_config=CPU_2PROC)
    assert run_compare(two).ok
    assert_two_process_results(tmp_path / "cmp")
    log = (tmp_path / "cmp/digits/dlr/full/seed0/logs/spt.log").read_text()
    assert "process 1 of 2 (data parallel, MULTI_CPU)" in log
    capsys.readouterr()
    again = run_compare(two, dry_run=True)  # finished 2-process phases are recognised as such
    assert "| digits/dlr/full/seed0/spt | scratch | finished |" in capsys.readouterr().out and not again.problems
    with pytest.raises(RecipeChangedError, match="world_size 2 → 1"):  # 1 process is another phase: refused
        run_compare(spec(tmp_path))
    single = run_compare(spec(tmp_path / "single"))
    assert single.ok
    spt = json.loads((tmp_path / "single/cmp/digits/dlr/full/seed0/spt/results.json").read_text())
    assert spt["budget"]["processes"] == 1 and spt["budget"]["global_batch_size"] == 32
    two_sha = json.loads((tmp_path / "cmp/digits/dlr/full/seed0/spt/results.json").read_text())["recipe_fingerprint"]
    assert spt["recipe_fingerprint"]["sha256"] != two_sha["sha256"]


@pytest.mark.slow
def test_a_two_process_phase_through_a_submitit_job(tmp_path):
    """The job runs `run_in_job`, the same function a Slurm task runs: here on submitit's local cluster."""
    pytest.importorskip("submitit")
    options = {"cluster": "local", "timeout_min": 30, "processes_per_node": 2}
    result = run_compare(spec(tmp_path, launcher="submitit", submitit=options))
    assert result.ok, result.problems
    assert_two_process_results(tmp_path / "cmp")
    log = (tmp_path / "cmp/digits/dlr/full/seed0/logs/finetune.log").read_text()
    assert "accelerate.commands.launch --multi_gpu" in log and "process 1 of 2 (data parallel, MULTI_CPU)" in log
