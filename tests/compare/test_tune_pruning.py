"""`spt-hf compare --tune --tune_pruner median`: a trial's phase reports each evaluation to its study as an
intermediate value and stops where the median pruner prunes it (a real tiny phase against a SQLite study); the driver
tells such a trial PRUNED, passes the database URL to the phases in their environment only while they run, refuses a
rerun with another pruner, and the report counts the pruned trials and flags the arm."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_tune_space import fake_launcher, spec, study_trials, untuned

from spt_hf.cli import main as cli_main
from spt_hf.compare.tune import run_tuning, tell
from spt_hf.report.tuning import read_tuning, tuning_section
from spt_hf.training.tune_trial import ReportToStudy
from spt_hf.tuning import (
    PRUNER_STARTUP_TRIALS,
    SUMMARY_FILE,
    TRIAL_FILE,
    TUNE_STORAGE,
    TrialRecord,
    make_pruner,
)

optuna = pytest.importorskip("optuna")

PHASE = ["--max_steps", "6", "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1"]
PHASE += ["--hidden_size", "16", "--num_hidden_layers", "1", "--per_device_eval_batch_size", "64"]


def study_with_good_trials(url: str, name: str, pruner: str = "median"):
    """A study whose first trials reached validation 0.99 at every evaluation (steps 2, 4, 6), and its next trial
    asked (RUNNING): the one a phase then runs."""
    study = optuna.create_study(storage=url, study_name=name, direction="maximize", pruner=make_pruner(pruner))
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for _ in range(PRUNER_STARTUP_TRIALS):
        study.add_trial(
            optuna.trial.create_trial(
                params={"learning_rate": 1e-3},
                distributions={"learning_rate": lr},
                value=0.99,
                intermediate_values={2: 0.99, 4: 0.99, 6: 0.99},
            )
        )
    return study, study.ask({"learning_rate": lr})


def write_record(run_dir: Path, study: str, number: int, url: str, pruner: str = "median", phase: str = "scratch"):
    TrialRecord(study, number, phase, pruner, url).write(run_dir)


def test_a_trial_phase_reports_its_evaluations_and_the_median_pruner_stops_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    study, trial = study_with_good_trials(url, "digits/dlr/scratch")
    write_record(tmp_path / "trial", "digits/dlr/scratch", trial.number, url)
    args = ["finetune", "--config", "cpu/digits-dlr-finetune.yaml", "--output_dir", "trial", *PHASE]
    assert cli_main(args) == 0
    result = json.loads((tmp_path / "trial" / "scratch" / "results.json").read_text())
    # a tiny model after 2 steps is far below the earlier trials' 0.99: stopped at its first evaluation
    assert result["tune_pruned"]["step"] == 2 and result["budget"]["steps"] == 2
    reported = study.trials[trial.number].intermediate_values
    assert list(reported) == [2] and reported[2] == pytest.approx(result["tune_pruned"]["value"])
    job = SimpleNamespace(phase_dir=tmp_path / "trial" / "scratch", log="log")
    tell(SimpleNamespace(study=study, name="digits/dlr/scratch"), trial.number, job)
    assert study.trials[trial.number].state == optuna.trial.TrialState.PRUNED


def test_another_phase_beside_a_trial_record_does_not_report(tmp_path, monkeypatch):
    """A pair's SPT phase shares the trial folder; only the phase the record names is the trial's objective."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    study, trial = study_with_good_trials(url, "digits/dlr/spt_pair")
    write_record(tmp_path / "trial", "digits/dlr/spt_pair", trial.number, url, phase="finetune")
    assert cli_main(["finetune", "--config", "cpu/digits-dlr-finetune.yaml", "--output_dir", "trial", *PHASE]) == 0
    result = json.loads((tmp_path / "trial" / "scratch" / "results.json").read_text())
    assert "tune_pruned" not in result and result["budget"]["steps"] == 6
    assert study.trials[trial.number].intermediate_values == {}


def evaluate(callback: ReportToStudy, step: int, accuracy: float):
    args = SimpleNamespace(world_size=1, device="cpu")
    state = SimpleNamespace(is_world_process_zero=True, global_step=step, max_steps=6)
    control = SimpleNamespace(should_training_stop=False)
    callback.on_train_begin(args, state, control)
    return callback.on_evaluate(args, state, control, metrics={"eval_loss": 1.0, "eval_accuracy": accuracy})


def test_without_a_pruner_a_trial_reports_every_evaluation_and_trains_on(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    study, trial = study_with_good_trials(url, "digits/s4/spt", pruner="none")
    callback = ReportToStudy(TrialRecord("digits/s4/spt", trial.number, "finetune", "none", url))
    assert not any(evaluate(callback, step, 0.1).should_training_stop for step in (2, 4, 6))
    assert study.trials[trial.number].intermediate_values == {2: 0.1, 4: 0.1, 6: 0.1}
    assert callback.pruned is None
    callback.on_train_end(None, None, None)  # the phase's final evaluations: not a point of the learning curve
    callback.on_evaluate(None, SimpleNamespace(global_step=8), None, metrics={"eval_accuracy": 0.9})
    assert 8 not in study.trials[trial.number].intermediate_values


def test_a_trial_below_the_median_at_its_last_step_has_run_its_course_and_is_not_pruned(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    study, trial = study_with_good_trials(url, "digits/s4/spt")
    callback = ReportToStudy(TrialRecord("digits/s4/spt", trial.number, "finetune", "median", url))
    assert not evaluate(callback, 6, 0.1).should_training_stop and callback.pruned is None
    assert evaluate(callback, 4, 0.1).should_training_stop and callback.pruned == {"step": 4, "value": 0.1}


def test_a_trial_phase_that_cannot_open_its_study_is_one_line_naming_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(TUNE_STORAGE, f"sqlite:///{tmp_path / 'missing' / 'no.db'}")
    record = TrialRecord("digits/s4/spt", 0, "finetune", "median", "mysql+pymysql://u:***@db/x")
    with pytest.raises(ValueError, match=rf"^tune trial 0 of digits/s4/spt: cannot open its study .*{TUNE_STORAGE}"):
        evaluate(ReportToStudy(record), 2, 0.5)


def pruning_launcher(launched: list, values: dict, seen_urls: list):
    """The fake launcher of test_tune_space, but trial 2 of each study is pruned at step 2 (as its phase would
    record), and the storage URL each launch sees in its environment is kept."""
    inner = fake_launcher(launched, values)

    def launch(jobs):
        seen_urls.append(os.environ.get(TUNE_STORAGE))
        inner(jobs)
        for job in jobs:
            record = TrialRecord.read(job.run_dir)
            path = job.phase_dir / "results.json"
            if path.is_file() and record is not None and record.number == 2:
                result = json.loads(path.read_text())
                path.write_text(json.dumps({**result, "tune_pruned": {"step": 2, "value": 0.01}}))
        return {}

    return launch


def test_the_driver_tells_pruned_trials_and_the_report_counts_and_flags_them(tmp_path):
    config = spec(tmp_path, architectures=["dlr"], tune_pruner="median")
    seen: list = []
    run_tuning(config, untuned(config), pruning_launcher([], {}, seen))
    url = f"sqlite:///{(tmp_path / 'cmp' / 'tuning.db').resolve()}"
    assert seen == [url] * 3 and TUNE_STORAGE not in os.environ  # given to the phases only while they run
    for trials in study_trials(config).values():
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "cmp").glob(f"*/*/tune/*/*/{TRIAL_FILE}"))]
    assert {(r["pruner"], r["phase"]) for r in records} == {("median", "scratch"), ("median", "finetune")}
    studies = read_tuning([tmp_path / "cmp"])
    assert [[t["pruned_at"] for t in s["trials"]] for s in studies] == [[None, None, 2]] * 2
    section, _plot = tuning_section(studies, tmp_path)
    assert "pruner median" in section and "| 2 / 1 / 3 ⚠ |" in section and "or was pruned" in section
    assert json.loads((tmp_path / "cmp" / SUMMARY_FILE).read_text())["studies"][0]["pruner"] == "median"


def test_a_rerun_with_another_pruner_is_refused_in_one_line(tmp_path):
    config = spec(tmp_path, architectures=["dlr"], tune_trials=1)
    run_tuning(config, untuned(config), fake_launcher([], {}))
    changed = spec(tmp_path, architectures=["dlr"], tune_trials=2, tune_pruner="median")
    with pytest.raises(ValueError, match=r"^The study digits/dlr/\w+ ran its trials with --tune_pruner none; rerun"):
        run_tuning(changed, untuned(changed), fake_launcher([], {}))
