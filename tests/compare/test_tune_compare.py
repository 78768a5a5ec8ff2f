"""A tuned comparison for real (slow: about 5 min on 2 CPU cores): 2 architectures x 2 arms x 3 trials of the tiny
digits phases, a second driver refused while the first runs, the first killed mid-search and the same command
resuming it without a repeated trial, the seeds trained with each study's best trial, and the report's tuning part."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TINY_PHASE

from spt_hf.cli import main as cli_main

optuna = pytest.importorskip("optuna")


def trial_results(out: Path) -> list[Path]:
    return sorted(out.glob("*/*/tune/*/trial*/*/results.json"))


@pytest.mark.slow
def test_a_tuned_comparison_killed_mid_search_resumes_without_repeating_a_trial(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--tasks", "digits", "--architectures", "transformer", "dlr", "--seeds", "0"]
    args += ["--recipes-dir", "recipes/cpu", "--output-dir", str(out), "--max-parallel", "2"]
    args += ["--tune", "--tune_trials", "3", "--tune_max_steps", "3"] + [f"--{k}={v}" for k, v in TINY_PHASE.items()]
    first = subprocess.Popen([sys.executable, "-m", "spt_hf", *args], start_new_session=True, stderr=subprocess.PIPE)
    try:
        while len(trial_results(out)) < 5 and first.poll() is None:  # round 1 (4 trials) and part of round 2
            time.sleep(0.5)
        assert cli_main(args) == 1  # a second driver on the same comparison and study database
        assert "error: Another `spt-hf compare --tune` is driving" in capsys.readouterr().err
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and the trial phases it was running
        first.wait()
    url = f"sqlite:///{out / 'tuning.db'}"
    states = [t.state for s in optuna.get_all_study_summaries(url) for t in optuna.load_study(
        study_name=s.study_name, storage=url).trials]  # fmt: skip
    assert states.count(optuna.trial.TrialState.COMPLETE) >= 4 and optuna.trial.TrialState.RUNNING in states

    assert cli_main(args) == 0
    summary = json.loads((out / "tuning.json").read_text())["studies"]
    assert sorted(s["name"] for s in summary) == [
        f"digits/{a}/{m}" for a in ("dlr", "transformer") for m in ("scratch", "spt")
    ]
    for entry in summary:
        study = optuna.load_study(study_name=entry["name"], storage=url)
        assert [t.number for t in study.trials] == [0, 1, 2]  # no repeated trial after the kill
        assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
        top = max(t.value for t in study.trials)
        chosen = next(t for t in study.trials if t.value == top)  # a tie: the lowest trial number
        assert entry["best"]["params"] == chosen.params
        phase = "finetune" if entry["arm"] == "spt" else "scratch"
        seeded = json.loads(
            (out / "digits" / entry["architecture"] / "full" / "seed0" / phase / "results.json").read_text()
        )
        assert seeded["recipe"]["training"]["learning_rate"] == pytest.approx(chosen.params["learning_rate"])
        for trial in study.trials:  # each trial's value is its phase's validation metric
            result = json.loads(Path(out, "digits", entry["architecture"], "tune", entry["arm"], f"trial{trial.number}",
                                     phase, "results.json").read_text())  # fmt: skip
            assert trial.value == result["metrics"]["validation"]["eval_accuracy"]
            assert result["budget"]["steps"] == 3
    report = (out / "report.md").read_text()
    assert "## Tuning" in report and "(tuned, 3 trials)" in report and "+ search: 9 steps" in report
    assert (out / "tuning.png").is_file()
    with open(out / "runs.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 4  # the seeded runs only: 2 architectures x 2 sides
    capsys.readouterr()
    assert cli_main([*args, "--dry_run"]) == 0  # finished: the plan reads the chosen values the seeded phases ran
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| digits/")]
    assert len(table) == 6 and all("| finished |" in line for line in table)


@pytest.mark.slow
def test_the_trials_of_a_tuned_comparison_run_as_submitit_jobs(tmp_path):
    pytest.importorskip("submitit")
    out = tmp_path / "cmp"
    args = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "--recipes-dir", "recipes/cpu"]
    args += ["--output-dir", str(out), "--launcher", "submitit", "--submitit_cluster", "local"]
    args += ["--submitit_timeout_min", "30", "--tune", "--tune_trials", "2", "--tune_max_steps", "3"]
    assert cli_main(args + [f"--{k}={v}" for k, v in TINY_PHASE.items()]) == 0
    submitted = [p.read_bytes() for p in (out / "submitit").rglob("*_submitted.pkl")]
    assert len(submitted) == 7  # 2 arms x 2 trials, the SPT phase, the seed's finetuning and baseline
    url = f"sqlite:///{out / 'tuning.db'}"
    for arm in ("scratch", "spt"):
        study = optuna.load_study(study_name=f"digits/dlr/{arm}", storage=url)
        assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
        for k in (0, 1):  # each trial was a submitit job
            assert sum(f"tune/{arm}/trial{k}".encode() in job for job in submitted) == 1
