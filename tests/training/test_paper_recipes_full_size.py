"""Every paper recipe pair trains at full model size and the task's full length through `spt-hf spt` and
`spt-hf finetune` (two optimiser steps and the final evaluation each), from data files in the task's real format, with
the per-device batch reduced to fit a CPU; each step's FLOPs and saved activations are compared with the dry run's
estimate of the same phase at the same batch (FLOPs within 10%, activations within 25%). The PathX recipes of the
SSMs and the linear-memory baselines also take their steps on PathX-256 (65,536 positions). Each phase's peak RSS is
in the output (`-s`). Slow: minutes per pair.

    pytest -m slow tests/training/test_paper_recipes_full_size.py -k "pathx and s4" -s
"""

import time
from pathlib import Path

import pytest
from paper_data import write_pythia70m_stand_in, write_task_data
from transformers import TrainerCallback

from spt_hf.cli import main
from spt_hf.cost.flops import flop_counter
from spt_hf.cost.measure import SavedActivations
from spt_hf.recipes.loading import list_recipes, load_recipe
from spt_hf.training.estimate import GIB, estimate_phase

PAIRS = sorted(
    name.removesuffix("-spt.yaml")
    for name in list_recipes()
    if name.endswith("-spt.yaml") and not name.startswith(("cpu/", "accelerate/"))
)
BATCH = 2
# The longest tasks at batch 1: one example of PathX-256 (65,536 steps) or MEGA's full attention at 16K is gigabytes.
BATCH_ONE = ("pathx256/", "pathx/mega", "pathx/transformer", "pathx/performer", "pathx/pythia70m")


# PathX recipes whose memory grows linearly with the length, stepped on PathX-256 too (with their overrides: MEGA
# with the chunks of MEGA-chunk, as its full attention over 65,536 positions is quadratic in compute)
LINEAR_MEMORY_AT_65K = {
    "pathx/s4": {},
    "pathx/dlr": {},
    "pathx/linformer": {},
    "pathx/performer": {},
    "pathx/spade": {},
    "pathx/mega": {"chunk_size": 128},
}


def reset_peak_rss() -> None:
    """Start a new peak: Linux resets the process's VmHWM to its current RSS when 5 is written to clear_refs."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_gib(field: str = "VmHWM") -> float:
    """The process's peak RSS since the last `reset_peak_rss` (VmHWM), or its RSS now (VmRSS), in GiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 2**20
    raise KeyError(f"{field} is not in /proc/self/status")


class StepMeter(TrainerCallback):
    """FLOPs and saved activation bytes (distinct storages held when a forward pass ends, parameters excluded) of each
    optimiser step, counted as the estimate counts them (`SavedActivations`)."""

    def __init__(self):
        self.steps: list[tuple[float, float]] = []

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.saved = SavedActivations(model)
        self.forward_ends = model.register_forward_hook(self.forward_ended)
        self.counter = flop_counter()
        self.counter.__enter__()
        self.saved.__enter__()

    def forward_ended(self, *_) -> None:  # returns None: a forward hook's return value replaces the output
        self.saved.snapshot()

    def on_step_end(self, args, state, control, **kwargs):
        self.saved.__exit__(None, None, None)
        self.counter.__exit__(None, None, None)
        self.forward_ends.remove()
        self.steps.append((self.counter.get_total_flops(), self.saved.peak_bytes))


def run_phase(command: str, recipe_name: str, overrides: dict, meter: StepMeter, monkeypatch) -> float:
    """`spt-hf <command>` with the meter in the phase's callbacks; the seconds it took."""
    from spt_hf.training import pipeline

    phase_fn = pipeline.pretrain if command == "spt" else pipeline.finetune
    monkeypatch.setattr(pipeline, phase_fn.__name__, lambda recipe, callbacks=None: phase_fn(recipe, [meter]))
    words = [command, "--config", recipe_name]
    for key, value in overrides.items():
        words += [f"--{key}", str(value)]
    start = time.perf_counter()
    assert main(words) == 0, f"{recipe_name}: spt-hf {command} failed"
    return time.perf_counter() - start


def phase_overrides(task: str, tmp_path, batch: int) -> dict:
    """The overrides of a full-size test phase: the task's data in its real format, two optimiser steps at `batch`,
    no checkpoints, the final evaluation."""
    data_dir, overrides = write_task_data(task, tmp_path / "data")
    overrides.update(
        data_dir=data_dir,
        output_dir=tmp_path / "run",
        max_steps=2,
        total_steps="null",
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch,
        gradient_accumulation_steps=1,
        eval_strategy='"no"',  # quoted: YAML reads a bare no as false
        save_strategy='"no"',
        logging_steps=1,
        warmup_steps=0,
        dataloader_num_workers=0,
        use_cpu="true",
    )
    return overrides


def run_pair(pair: str, overrides: dict, tmp_path, monkeypatch) -> list[tuple[str, str, StepMeter, float, str]]:
    """`spt-hf spt` then `spt-hf finetune` of the pair from its SPT model: (recipe, phase, meter, seconds, its peak
    RSS as text) of each, after checking that each took two optimiser steps and wrote its results."""
    phases = []
    for command, phase in (("spt", "spt"), ("finetune", "finetune")):
        name = f"{pair}-{command}.yaml"
        words = dict(overrides)
        if command == "finetune":
            words["model_name_or_path"] = tmp_path / "run" / "spt"
            words.pop("total_steps")  # an SPT key
        if load_recipe(name, phase=phase).training.lr_scheduler_type == "reduce_lr_on_plateau":
            # the scheduler reads an evaluation; load_best_model_at_end then needs checkpoints at the same steps
            words.update(eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2)
        meter = StepMeter()
        reset_peak_rss()
        before = rss_gib("VmRSS")  # what earlier phases of this process left allocated
        seconds = run_phase(command, name, words, meter, monkeypatch)
        assert len(meter.steps) == 2, f"{name}: {len(meter.steps)} optimiser steps"
        assert (tmp_path / "run" / phase / "results.json").is_file(), f"{name}: no results.json (no evaluation)"
        phases.append((name, phase, meter, seconds, f"peak RSS {rss_gib():.1f} GiB ({before:.1f} at its start)"))
    return phases


@pytest.mark.slow
@pytest.mark.parametrize("pair", PAIRS)
def test_paper_recipe_pair_trains_at_full_size(pair, tmp_path, monkeypatch, capsys):
    task = pair.split("/")[0]
    batch = 1 if pair.startswith(BATCH_ONE) else BATCH
    overrides = phase_overrides(task, tmp_path, batch)
    shape = {"per_device_train_batch_size": batch}
    if "pythia70m-pretrained" in pair:  # the Hub checkpoint cannot be downloaded here: a local stand-in of its size
        stand_in = write_pythia70m_stand_in(tmp_path / "pythia-70m", f"{pair}-spt.yaml")
        overrides["backbone_name_or_path"] = shape["backbone_name_or_path"] = stand_in
    report = []
    for name, phase, meter, seconds, peak in run_pair(pair, overrides, tmp_path, monkeypatch):
        recipe = load_recipe(name, shape, phase=phase)
        estimate = estimate_phase(recipe, phase, device="cpu")
        flops, saved = meter.steps[-1]
        expected_flops = estimate.flops_per_batch + batch * estimate.flops_per_example
        expected_saved = estimate.activations_at(batch)
        report.append(
            f"{name}: {seconds:.0f} s, step FLOPs {flops:.3g} (estimate {expected_flops:.3g}), saved activations "
            f"{saved / GIB:.2f} GiB (estimate {expected_saved / GIB:.2f}), {peak}"
        )
        if "pythia70m-pretrained" in pair:  # read through a tokenizer: the estimate's length is an upper bound
            assert 0 < flops <= 1.1 * expected_flops, f"{name}: FLOPs {flops:.3g} vs at most {expected_flops:.3g}"
            assert 0 < saved <= 1.25 * expected_saved, f"{name}: saved {saved:.3g} vs at most {expected_saved:.3g}"
            continue
        assert flops == pytest.approx(expected_flops, rel=0.10), f"{name}: FLOPs {flops:.3g} vs {expected_flops:.3g}"
        if recipe.training.gradient_checkpointing:  # the meter sees what is kept, not the layer recomputed
            assert saved <= expected_saved, f"{name}: saved {saved:.3g} vs {expected_saved:.3g}"
        else:
            assert saved == pytest.approx(expected_saved, rel=0.25), (
                f"{name}: saved {saved:.3g} vs {expected_saved:.3g}"
            )
    with capsys.disabled():
        print("\n" + "\n".join(report))


@pytest.mark.slow
@pytest.mark.parametrize("pair", sorted(LINEAR_MEMORY_AT_65K))
def test_pathx_recipe_pair_trains_on_pathx256(pair, tmp_path, monkeypatch, capsys):
    """The PathX recipe pairs of the SSMs and the linear-memory baselines at 65,536 positions (PathX-256), batch 1:
    two optimiser steps and the evaluation per phase finish on this machine, their peak RSS in the output."""
    overrides = phase_overrides("pathx256", tmp_path, 1) | {"task": "pathx256", **LINEAR_MEMORY_AT_65K[pair]}
    report = [
        f"{name} on pathx256: {seconds:.0f} s, saved activations {meter.steps[-1][1] / GIB:.2f} GiB, {peak}"
        for name, _, meter, seconds, peak in run_pair(pair, overrides, tmp_path, monkeypatch)
    ]
    with capsys.disabled():
        print("\n" + "\n".join(report))
