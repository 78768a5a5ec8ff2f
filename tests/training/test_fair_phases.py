"""Fair by default: which checkpoint a phase exports, when it stops, how often it evaluates, and which validation
splits it warns about. Each default could favour one arm; each test here would catch it doing so."""

import json
import shutil
import time
from pathlib import Path

import datasets
import pytest
from helpers import KillAfter
from safetensors.torch import load_file
from transformers import TrainerCallback

from spt_hf.compare.plan import CompareSpec, build_plan
from spt_hf.data.custom.splits import MIN_VALIDATION_EXAMPLES, validation_warnings
from spt_hf.recipes.arguments import EVALUATIONS_PER_PHASE, evaluation_cadence
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import finetune, pretrain, run
from spt_hf.training.run_folder import MANIFEST_FILE, commit_checkpoint
from spt_hf.training.task_data import validation_report

TRANSFORMER = {
    "model_type": "spt_rotary_transformer",
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "hidden_size": 16,
    "num_hidden_layers": 1,
}
LISTOPS = {
    "task": "listops",
    "generate_data": {"num_train": 48, "num_val": 16, "num_test": 16, "min_length": 8, "max_length": 40},
}
TRAINING = {
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 64,
    "eval_strategy": "steps",
    "save_strategy": "steps",
    "logging_steps": 2,
    "seed": 0,
}


def write_recipe(path: Path, **values) -> Path:
    path.write_text(json.dumps(values))  # JSON is YAML
    return path


def evaluations(result: dict, key: str) -> list[tuple[int, float]]:
    return [(entry["step"], entry[key]) for entry in result["learning_curve"] if key in entry]


def test_spt_exports_its_lowest_validation_loss_checkpoint_even_when_token_accuracy_is_flat(tmp_path):
    """A tiny masked SPT run predicts the most frequent token at every evaluation (flat masked accuracy) while its
    loss falls: choosing by accuracy would keep the first evaluation's checkpoint; the objective's loss keeps the
    lowest-loss one, and that is the model exported."""
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "learning_rate": 1e-3, "max_steps": 12, "eval_steps": 2}
    recipe = load_recipe(write_recipe(tmp_path / "x-spt.yaml", **values, output_dir=str(tmp_path / "run")))
    result = pretrain(recipe)
    metrics = result["metrics"]
    assert metrics["metric_for_best_model"] == "loss" and metrics["greater_is_better"] is False
    losses = evaluations(result, "eval_loss")
    accuracy = evaluations(result, "eval_masked_accuracy")
    assert len(losses) == 6
    lowest = min(losses, key=lambda entry: entry[1])[0]  # min keeps the first of equal values, as the Trainer does
    assert metrics["exported_step"] == metrics["best_step"] == lowest
    by_accuracy = max(accuracy, key=lambda entry: entry[1])[0]
    assert by_accuracy != lowest, (accuracy, losses)  # the run this test needs: accuracy would pick another step
    exported = load_file(tmp_path / "run" / "spt" / "model.safetensors")
    chosen = load_file(tmp_path / "run" / "spt" / f"checkpoint-{lowest}" / "model.safetensors")
    assert exported.keys() == chosen.keys() and all(exported[k].equal(chosen[k]) for k in exported)


def _oracle_stop(curve: list[tuple[int, float]], patience: int, greater: bool) -> int | None:
    """The step early stopping must stop at, read off the learning curve: the evaluation after which `patience`
    evaluations in a row did not strictly improve on the best so far."""
    best, waited = None, 0
    for step, value in curve:
        if best is None or (value > best if greater else value < best):
            best, waited = value, 0
        else:
            waited += 1
            if waited >= patience:
                return step
    return None


def test_every_phase_stops_after_patience_evaluations_without_improvement(tmp_path):
    """Learning rate 0: no evaluation improves on the first, so every phase of both arms stops at the evaluation
    `patience` after it; results.json records the patience, the cap and the stop, each matching the curve."""
    patience, every, cap = 2, 2, 20
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "learning_rate": 0.0, "eval_steps": every, "save_steps": every}
    values |= {"early_stopping_patience": patience, "output_dir": str(tmp_path / "run")}
    spt = load_recipe(write_recipe(tmp_path / "x-spt.yaml", **values, total_steps=2 * cap), phase="spt")
    finetune = load_recipe(write_recipe(tmp_path / "x-finetune.yaml", **values), phase="finetune")
    summary = run(spt, finetune, with_scratch=True)
    arms = (("spt", "eval_loss", False, cap), ("finetune", "eval_accuracy", True, cap))
    for phase, key, greater, steps in (*arms, ("scratch", "eval_accuracy", True, 2 * cap)):  # the baseline: all
        result = summary["phases"][phase]
        budget, curve = result["budget"], evaluations(result, key)
        stop = _oracle_stop(curve, patience, greater)
        assert stop == (patience + 1) * curve[0][0], phase  # the first evaluation is never beaten
        assert budget["stopped_early_at"] == budget["steps"] == stop, phase
        assert budget["early_stopping_patience"] == patience and budget["max_steps"] == steps, phase


def test_early_stopping_is_refused_where_it_cannot_work_and_off_keeps_old_fingerprints(tmp_path):
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "eval_steps": 2, "max_steps": 4}
    with pytest.raises(ValueError, match="`early_stopping_patience` must be at least 1 evaluation, got 0"):
        load_recipe(None, {**values, "early_stopping_patience": 0})
    with pytest.raises(ValueError, match="`eval_strategy: no` makes none: set eval_strategy: steps"):
        load_recipe(
            None, {**values, "eval_strategy": "no", "early_stopping_patience": 3, "load_best_model_at_end": False}
        )
    assert "early_stopping_patience" not in load_recipe(None, values).to_dict()["training"]  # runs from before resume
    assert load_recipe(None, {**values, "early_stopping_patience": 3}).to_dict()["training"]["early_stopping_patience"]


@pytest.mark.parametrize("max_steps", [5, 37, 50, 100, 1200])
def test_derived_steps_get_about_ten_evaluations_and_a_recipes_own_steps_keep_its_cadence(max_steps):
    cadence = evaluation_cadence(max_steps)
    assert cadence["eval_steps"] == cadence["save_steps"] == cadence["logging_steps"]
    count = max_steps // cadence["eval_steps"]
    assert min(max_steps, 8) <= count <= EVALUATIONS_PER_PHASE
    own = load_recipe(None, {**LISTOPS, **TRANSFORMER, **TRAINING, "max_steps": max_steps, "eval_steps": 1}).training
    assert evaluation_cadence(max_steps, own) == {}  # the recipe's own steps: its own cadence


@pytest.mark.parametrize("rule, keys", [("tied", {"total_steps": 100}), ("equal", {"max_steps": 50})])
def test_a_comparisons_derived_steps_evaluate_about_ten_times_per_phase(rule, keys, tmp_path):
    """The CPU recipes evaluate every 100 steps: under --total_steps 100 each phase would evaluate once (or never)
    if the cadence were not derived with the steps; an --eval_steps of the comparison's own is kept."""
    spec = CompareSpec(tasks=["digits"], architectures=["transformer", "s4"], seeds=[0], recipes_dir="cpu", budget=rule)
    for job in build_plan(CompareSpec(**{**spec.__dict__, "overrides": keys, "output_dir": str(tmp_path)})).jobs:
        training = job.load_recipe().training
        steps = training.max_steps
        assert 8 <= steps // training.eval_steps <= EVALUATIONS_PER_PHASE, (job.id, steps, training.eval_steps)
        assert training.save_steps == training.eval_steps and f"({rule})" in job.steps
    own = {**keys, "eval_steps": 5, "save_steps": 5}
    for job in build_plan(CompareSpec(**{**spec.__dict__, "overrides": own, "output_dir": str(tmp_path)})).jobs:
        assert job.load_recipe().training.eval_steps == 5, job.id


def test_compares_early_stopping_reaches_every_phase_of_every_arm(tmp_path):
    spec = CompareSpec(
        tasks=["digits"],
        architectures=["s4"],
        seeds=[0],
        recipes_dir="cpu",
        output_dir=str(tmp_path),
        early_stopping_patience=3,
    )
    jobs = build_plan(spec).jobs
    assert {job.phase for job in jobs} == {"spt", "finetune", "scratch"}
    assert all(job.load_recipe().training.early_stopping_patience == 3 for job in jobs)
    assert all("early stopping 3" in job.steps for job in jobs)


def test_validation_warnings_name_the_fix():
    assert validation_warnings(MIN_VALIDATION_EXAMPLES, [0, 1, 1], [1, 0]) == []
    few = validation_warnings(10, list(range(52)) * 2, list(range(10)))
    assert len(few) == 2 and all("validation_size" in line and "validation_from: test" in line for line in few)
    assert "holds 10 examples (fewer than 20)" in few[0]
    assert "misses 42 of the 52 classes of train (10, 11, 12, 13, 14, ...)" in few[1]
    assert validation_warnings(500) == []  # regression: no classes to miss
    train = datasets.Dataset.from_dict({"label": [0, 1, 2] * 10})
    splits = datasets.DatasetDict({"train": train, "validation": train.select(range(3))})
    spec = type("Spec", (), {"problem_type": "single_label_classification"})()
    assert validation_report(spec, splits) == validation_warnings(3, train["label"], [0, 1, 2])


def test_a_resumed_phase_chooses_its_best_again_by_its_own_metric(tmp_path):
    """A checkpoint written while SPT chose by masked accuracy records an accuracy as its best; resumed under the loss
    rule, the best is chosen again by the loss among the checkpoints on disk (never comparing a loss with an
    accuracy), and a state that already agrees is left alone."""
    from transformers import TrainerState, TrainingArguments

    from spt_hf.training.trainer import ResumedBestByMetric

    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    curve = [(2, 3.0, 0.2), (4, 2.5, 0.2), (6, 2.7, 0.2), (8, 2.0, 0.2)]  # step 8's checkpoint was rotated away
    history = [{"step": step, "eval_loss": loss, "eval_masked_accuracy": accuracy} for step, loss, accuracy in curve]
    state = TrainerState(log_history=history, best_metric=0.2, best_global_step=2)
    state.best_model_checkpoint = str(tmp_path / "checkpoint-2")
    args = TrainingArguments(str(tmp_path), metric_for_best_model="loss", greater_is_better=False, report_to="none")
    ResumedBestByMetric().on_train_begin(args, state, None)
    assert (state.best_metric, state.best_global_step) == (2.5, 4)
    assert state.best_model_checkpoint == str(tmp_path / "checkpoint-4")
    ResumedBestByMetric().on_train_begin(args, state, None)  # already by its metric: unchanged
    assert state.best_global_step == 4


def test_a_killed_and_resumed_phase_stops_early_at_the_step_an_uninterrupted_one_does(tmp_path):
    """Early stopping makes the budget: a phase killed part-way counts on from its checkpoint's evaluations without
    improvement. At learning rate 0 every evaluation ties the first, so patience 3 stops at the fourth (step 8);
    killed at step 5, the checkpoint of step 4 holds one evaluation without improvement, and the resumed phase must
    stop at step 8 too (counting from 0 again it went on to step 10)."""
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "learning_rate": 0.0, "max_steps": 40, "eval_steps": 2}
    values |= {"save_steps": 2, "early_stopping_patience": 3}
    straight = finetune(
        load_recipe(write_recipe(tmp_path / "a-finetune.yaml", **values, output_dir=str(tmp_path / "a")))
    )
    resumed_recipe = write_recipe(tmp_path / "b-finetune.yaml", **values, output_dir=str(tmp_path / "b"))
    with pytest.raises(KeyboardInterrupt):
        finetune(load_recipe(resumed_recipe), callbacks=[KillAfter(5)])
    resumed = finetune(load_recipe(resumed_recipe))
    assert straight["budget"]["stopped_early_at"] == 8
    assert resumed["budget"]["stopped_early_at"] == 8 and resumed["budget"]["steps"] == straight["budget"]["steps"]
    assert resumed["metrics"]["exported_step"] == straight["metrics"]["exported_step"] == 2


class Slow(TrainerCallback):
    """Makes each optimiser step of the process it is passed to `seconds` slower."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def test_a_killed_and_resumed_phase_reports_the_wall_time_of_both_processes(tmp_path):
    """A phase's cost is not cheaper for having been killed: the killed process's time up to its last checkpoint
    (recorded in the checkpoint) is counted with the resumed process's, so the resumed phase's wall time exceeds the
    resumed process's alone (counting only the resumed process, an interrupted arm looked cheaper)."""
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "max_steps": 12, "eval_steps": 2, "save_steps": 2}
    recipe = write_recipe(tmp_path / "x-finetune.yaml", **values, output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        finetune(load_recipe(recipe), callbacks=[Slow(0.5), KillAfter(5)])
    state = json.loads((tmp_path / "run" / "scratch" / "checkpoint-4" / "trainer_state.json").read_text())
    recorded = state["stateful_callbacks"]["PhaseClock"]["attributes"]
    assert recorded["earlier_s"] >= 4 * 0.5 and recorded["counted_from_step"] == 0
    started = time.perf_counter()
    resumed = finetune(load_recipe(recipe))
    process = time.perf_counter() - started
    budget = resumed["budget"]
    assert recorded["earlier_s"] < budget["wall_time_s"] <= recorded["earlier_s"] + process
    assert budget["wall_time_counted_from_step"] == 0 and budget["steps"] == 12


def test_a_checkpoint_without_a_time_record_resumes_and_says_where_its_time_counts_from(tmp_path):
    """A checkpoint written before checkpoints recorded the time spent (an older spt_hf) still resumes, and the
    phase's wall time says that it counts from that checkpoint's step."""
    values = {**LISTOPS, **TRANSFORMER, **TRAINING, "max_steps": 8, "eval_steps": 2, "save_steps": 2}
    recipe = write_recipe(tmp_path / "x-finetune.yaml", **values, output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        finetune(load_recipe(recipe), callbacks=[KillAfter(5)])
    checkpoint = tmp_path / "run" / "scratch" / "checkpoint-4"
    staging = tmp_path / "staging"  # the checkpoint as an older spt_hf wrote it, committed with its manifest again
    shutil.copytree(checkpoint, staging)
    (staging / MANIFEST_FILE).unlink()
    state = json.loads((staging / "trainer_state.json").read_text())
    del state["stateful_callbacks"]["PhaseClock"]
    (staging / "trainer_state.json").write_text(json.dumps(state))
    commit_checkpoint(staging, checkpoint)
    resumed = finetune(load_recipe(recipe))
    assert resumed["budget"]["wall_time_counted_from_step"] == 4 and resumed["budget"]["steps"] == 8
    saved = json.loads((tmp_path / "run" / "scratch" / "checkpoint-8" / "trainer_state.json").read_text())
    assert saved["stateful_callbacks"]["PhaseClock"]["attributes"]["counted_from_step"] == 4
