"""The life of a run folder: exact resume inside an epoch, finished phases left alone, changed recipes refused, one
writer per phase folder, crash-safe checkpoints, a full disk. Each case ends in an exact model or one clear error.

Tiny masked SPT on generated ListOps (96 training examples, batch 16: 6 steps per epoch) so that checkpoints fall
inside epochs.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from helpers import KillAfter
from safetensors.torch import load_file

from spt_hf.training import load_recipe
from spt_hf.training.pipeline import finetune, pretrain

ARCH = {"model_type": "spt_rotary_transformer", "num_attention_heads": 2, "intermediate_size": 32}
LISTOPS = {
    "task": "listops",
    "generate_data": {
        "num_train": 96,
        "num_val": 16,
        "num_test": 16,
        "min_length": 8,
        "max_length": 40,
        "max_depth": 3,
    },
}
TRAINING = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "hidden_dropout_prob": 0.1,  # dropout draws from the global RNG: resuming must restore it too
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "learning_rate": 3e-3,
    "max_steps": 9,
    "eval_strategy": "steps",
    "eval_steps": 2,
    "save_strategy": "steps",
    "save_steps": 2,
    "save_total_limit": 3,
    "load_best_model_at_end": False,  # the exported model is the last one: every step must match
    "logging_steps": 1,
    "seed": 0,
}


def write_recipe(path: Path, **values) -> Path:
    path.write_text(json.dumps({**LISTOPS, **ARCH, **TRAINING, **values}))  # JSON is YAML
    return path


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_same_model(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not different, f"tensors differ: {different}"


def losses(result: dict) -> list[tuple[int, float]]:
    return [(e["step"], e["loss"]) for e in result["learning_curve"] if "loss" in e]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run (no data-loader workers)."""
    root = tmp_path_factory.mktemp("reference")
    result = pretrain(load_recipe(write_recipe(root / "r.yaml", output_dir=str(root / "run"))))
    return root / "run" / "spt", result


@pytest.mark.parametrize(
    "workers, kills",
    [(0, [3]), (0, [5]), (2, [3]), (2, [7, 8])],
    ids=["workers0-kill3", "workers0-kill5", "workers2-kill3", "workers2-kill7-then-8"],
)
def test_a_run_killed_inside_an_epoch_resumes_to_the_same_model(reference, workers, kills, tmp_path):
    """Checkpoints every 2 steps, 6 steps per epoch: steps 3, 5 and 7 are inside an epoch. The resumed run ends with
    the uninterrupted run's tensors, losses and metrics, whatever the number of data-loader workers."""
    ref_dir, ref_result = reference
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"), dataloader_num_workers=workers)
    for step in kills:
        with pytest.raises(KeyboardInterrupt):
            pretrain(load_recipe(recipe), callbacks=[KillAfter(step)])
        assert not (tmp_path / "run" / "spt" / "results.json").exists()
    result = pretrain(load_recipe(recipe))
    assert_same_model(tmp_path / "run" / "spt", ref_dir)
    assert result["budget"]["steps"] == 9
    assert losses(result) == losses(ref_result)
    for key in ("eval_loss", "eval_masked_accuracy"):
        assert result["metrics"]["validation"][key] == ref_result["metrics"]["validation"][key]


SIGKILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from transformers import TrainerCallback
    from spt_hf.training import load_recipe
    from spt_hf.training.pipeline import pretrain

    class Slow(TrainerCallback):  # slow enough for the parent to kill it between steps
        def on_step_end(self, args, state, control, **kwargs):
            print(f"step {state.global_step}", flush=True)
            time.sleep(0.3)

    pretrain(load_recipe(sys.argv[1]), callbacks=[Slow()])
    """
)


def test_kill_9_inside_an_epoch_then_the_same_command_gives_the_same_model(reference, tmp_path):
    ref_dir, _ = reference
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"), dataloader_num_workers=2)
    script = tmp_path / "train.py"
    script.write_text(SIGKILL_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, str(script), str(recipe)], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    for line in process.stdout:
        if line.strip() == "step 5":  # checkpoint-4 is complete, the run is inside its first epoch
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert (tmp_path / "run" / "spt" / "checkpoint-4").is_dir()
    assert (tmp_path / "run" / "spt" / ".spt_hf.lock").is_file()  # left behind by the killed process
    pretrain(load_recipe(recipe))  # takes over the stale lock, resumes from checkpoint-4
    assert_same_model(tmp_path / "run" / "spt", ref_dir)


def test_a_finished_phase_is_left_alone(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"), max_steps=4)
    first = pretrain(load_recipe(recipe))
    phase = tmp_path / "run" / "spt"
    before = {p.name: p.stat().st_mtime_ns for p in phase.rglob("*") if p.is_file()}
    capsys.readouterr()
    for _ in range(2):
        again = pretrain(load_recipe(recipe))
        assert again["budget"]["steps"] == 4 and again["recipe_fingerprint"] == first["recipe_fingerprint"]
    out = capsys.readouterr().out
    assert out.count("is finished") == 2 and "nothing to do" in out
    after = {p.name: p.stat().st_mtime_ns for p in phase.rglob("*") if p.is_file()}
    assert after == before, "a finished phase must not be written to"
    mask = os.umask(0)
    os.umask(mask)
    assert (phase / "results.json").stat().st_mode & 0o777 == 0o666 & ~mask  # not the 0600 of a temporary file
    assert sorted(p.name for p in phase.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_a_changed_recipe_over_a_finished_or_partial_phase_is_refused(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"), max_steps=4)
    pretrain(load_recipe(recipe))
    with pytest.raises(ValueError, match=r"(?s)recipe differs.*training\.learning_rate: 0\.003 -> 0\.01"):
        pretrain(load_recipe(recipe, {"learning_rate": 0.01}))
    result = pretrain(load_recipe(recipe, {"learning_rate": 0.01, "overwrite_output_dir": True}))
    assert result["recipe"]["training"]["learning_rate"] == 0.01 and result["budget"]["steps"] == 4
    # a partial phase (killed) is protected the same way
    partial = write_recipe(tmp_path / "p.yaml", output_dir=str(tmp_path / "partial"))
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(partial), callbacks=[KillAfter(3)])
    with pytest.raises(ValueError, match=r"(?s)recipe differs.*model_config\.hidden_size: 16 -> 32"):
        pretrain(load_recipe(partial, {"hidden_size": 32}))


CONCURRENT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from transformers import TrainerCallback
    from spt_hf.training import load_recipe
    from spt_hf.training.pipeline import pretrain

    class Hold(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            print("training", flush=True)
            time.sleep(30)

    pretrain(load_recipe(sys.argv[1]), callbacks=[Hold()])
    """
)


def test_a_second_run_into_the_same_folder_fails_at_once_naming_the_first(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"), max_steps=2)
    script = tmp_path / "hold.py"
    script.write_text(CONCURRENT_SCRIPT)
    first = subprocess.Popen([sys.executable, str(script), str(recipe)], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        while "training" not in lines and len(lines) < 5:  # (the phase's notices, such as a validation warning, first)
            lines.append(next(first.stdout).strip())
        assert "training" in lines
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"is in use by process {first.pid} on host"):
            pretrain(load_recipe(recipe))
        assert time.monotonic() - start < 10
    finally:
        first.kill()
        first.wait()


def test_a_half_written_last_checkpoint_is_skipped_and_the_run_resumes_exactly(reference, tmp_path, capsys):
    ref_dir, _ = reference
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(recipe), callbacks=[KillAfter(7)])
    phase = tmp_path / "run" / "spt"
    # a kill during the save of checkpoint-6: its files exist but one is cut short
    optimizer = phase / "checkpoint-6" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    pretrain(load_recipe(recipe))
    out = capsys.readouterr().out
    assert "checkpoint-6" in out and "optimizer.pt" in out and "resuming from checkpoint-4" in out
    assert_same_model(phase, ref_dir)


def test_a_corrupted_file_in_a_checkpoint_is_found_and_skipped(reference, tmp_path, capsys):
    ref_dir, _ = reference
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(recipe), callbacks=[KillAfter(5)])
    weights_file = tmp_path / "run" / "spt" / "checkpoint-4" / "model.safetensors"
    data = bytearray(weights_file.read_bytes())
    data[-5] ^= 0x10  # one bit of one weight: still a valid file, silently different
    weights_file.write_bytes(bytes(data))
    pretrain(load_recipe(recipe))
    out = capsys.readouterr().out
    assert "checkpoint-4" in out and "sha256" in out and "resuming from checkpoint-2" in out
    assert_same_model(tmp_path / "run" / "spt", ref_dir)


def test_a_full_disk_gives_a_clear_error_and_keeps_earlier_checkpoints(tmp_path, monkeypatch):
    import transformers.trainer

    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "run"))
    original = transformers.trainer.Trainer._save_optimizer_and_scheduler
    calls = {"n": 0}

    def fill_the_disk(self, output_dir):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint
            raise OSError(28, "No space left on device", str(Path(output_dir) / "optimizer.pt"))
        return original(self, output_dir)

    monkeypatch.setattr(transformers.trainer.Trainer, "_save_optimizer_and_scheduler", fill_the_disk)
    with pytest.raises(
        OSError,
        match=r"No space left .* checkpoint-4 .*run/spt.*needs about [\d.]+ [KMG]iB and [\d.]+ [KMG]iB are free",
    ):
        pretrain(load_recipe(recipe))
    phase = tmp_path / "run" / "spt"
    assert sorted(p.name for p in phase.iterdir() if p.name.startswith(("checkpoint", ".checkpoint"))) == [
        "checkpoint-2"
    ]
    monkeypatch.undo()
    assert pretrain(load_recipe(recipe))["budget"]["steps"] == 9  # resumes from the intact checkpoint-2


def test_finetune_names_what_a_folder_that_is_not_a_checkpoint_holds(tmp_path):
    spt = write_recipe(tmp_path / "s.yaml", output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_recipe(spt), callbacks=[KillAfter(3)])
    finetune_recipe = tmp_path / "f.yaml"
    finetune_recipe.write_text(json.dumps({**LISTOPS, **ARCH, **{k: v for k, v in TRAINING.items()}}))
    cases = {
        str(tmp_path / "run" / "spt"): r"holds Trainer checkpoints .* but no exported model .*did not finish",
        str(tmp_path / "run"): r"is a run folder .* spt/",
        str(tmp_path / "nothing" / "here"): r"does not exist",
        "runs/typo/spt": r"does not exist",
    }
    for source, message in cases.items():
        with pytest.raises((FileNotFoundError, ValueError), match=message):
            finetune(load_recipe(finetune_recipe, {"model_name_or_path": source, "output_dir": str(tmp_path / "ft")}))
