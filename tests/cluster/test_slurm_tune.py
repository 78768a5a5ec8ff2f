"""`spt-hf compare --tune --launcher submitit` on a real Slurm cluster (the `slurm` fixture), its studies in the
MariaDB server the cluster already runs for slurmdbd (`--tune_storage mysql+pymysql://...`, the fixture's
info["optuna_url"]): every trial, the SPT phase and the seeded phases are Slurm jobs; each study holds exactly the
trials asked for, each told the validation metric its trial job wrote into results.json, each with the intermediate
values the trial job itself reported to MariaDB; the seeded phases train with the best trial's values; tuning.json
shows the URL without its password and no file holds it; a second comparison on the same studies is refused in one
line.

Each driver is `python -m spt_hf compare ...` in its own process, with a deadline: a hang fails the test."""

import json
import os
import re
import time
from pathlib import Path

import pytest
from cluster.slurm_cluster import DB_PASSWORD, create_optuna_database
from cluster.test_slurm import compare_args, driver, finish, recorded_jobs, slurm_state
from helpers import TINY_PHASE

optuna = pytest.importorskip("optuna")
pytest.importorskip("pymysql")

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

TRIALS = 2
ARCHITECTURES = ("dlr", "transformer")
ARMS = {"scratch": "scratch", "spt": "finetune"}  # arm -> the phase its trials and seeded runs train


def tuned_args(out: Path, storage: str) -> list[str]:
    """A tuned comparison on digits, both arms, tiny phases, run as Slurm jobs, its studies in `storage`, with the
    median pruner (with TRIALS=2 its startup trials prune nothing; each trial job still loads the study with it and
    asks it after every evaluation)."""
    search = ["--max-parallel", "2", "--tune", "--tune_trials", str(TRIALS), "--tune_max_steps", "3"]
    search += ["--tune_storage", storage, "--tune_pruner", "median"]
    return compare_args(out, TINY_PHASE, *search, architectures=ARCHITECTURES, scratch=True)


@pytest.fixture
def optuna_url(slurm) -> str:
    """The cluster's Optuna database, emptied for each test (its studies are named by task, architecture, arm)."""
    url = create_optuna_database(dict(os.environ))
    assert url == slurm["optuna_url"]
    return url


def studies(url: str) -> dict:
    """{(architecture, arm): the study in `url`} of every study the comparison has."""
    names = [(a, m) for a in ARCHITECTURES for m in ARMS]
    return {(a, m): optuna.load_study(study_name=f"digits/{a}/{m}", storage=url) for a, m in names}


def check_studies(out: Path, url: str) -> None:
    """Each study: trials 0..TRIALS-1, all complete, each valued with its trial job's validation metric; tuning.json's
    best trial is the lowest-numbered of the highest value (a tie is likely with 3 steps, and MySQL's answer to
    `best_trial` among ties is any of them), and the seeded phase trained with its learning rate."""
    summary = {entry["name"]: entry for entry in json.loads((out / "tuning.json").read_text())["studies"]}
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(url)) == sorted(
        f"digits/{a}/{m}" for a in ARCHITECTURES for m in ARMS
    )
    for (arch, arm), study in studies(url).items():
        phase = ARMS[arm]
        assert [t.number for t in study.trials] == list(range(TRIALS)), study.study_name
        assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}, study.study_name
        for trial in study.trials:
            folder = out / "digits" / arch / "tune" / arm / f"trial{trial.number}"
            named = json.loads((folder / "tune_trial.json").read_text())
            assert (named["study"], named["number"]) == (study.study_name, trial.number)
            result = json.loads((folder / phase / "results.json").read_text())
            assert trial.value == result["metrics"]["validation"]["eval_accuracy"], (study.study_name, trial.number)
            assert result["budget"]["steps"] == 3
            # the trial job itself wrote its evaluations into the study (it reached MariaDB from inside Slurm)
            assert trial.intermediate_values and max(trial.intermediate_values) <= 3, trial.intermediate_values
        top = max(t.value for t in study.trials)
        best = min(t.number for t in study.trials if t.value == top)
        assert summary[study.study_name]["best"]["number"] == best, summary[study.study_name]
        seeded = json.loads((out / "digits" / arch / "full" / "seed0" / phase / "results.json").read_text())
        chosen = study.trials[best].params["learning_rate"]
        assert seeded["recipe"]["training"]["learning_rate"] == pytest.approx(chosen), study.study_name


def check_slurm_jobs(out: Path) -> None:
    """Every phase (the trials, the SPT phase, the seeded phases) ran as its own Slurm job, which completed and
    which its phase log names."""
    jobs = recorded_jobs(out)
    trials = sorted(phase for phase in jobs if phase.startswith("tune/"))
    expected = [f"tune/digits/{a}/{m}/trial{k}" for a in ARCHITECTURES for m in ARMS for k in range(TRIALS)]
    assert trials == sorted(expected), jobs
    assert len(jobs) == len(ARCHITECTURES) * (2 * TRIALS + 3), jobs  # + SPT, the seed's finetuning and baseline
    assert len({entry["job_id"] for entry in jobs.values()}) == len(jobs), jobs
    named = {}
    for log in out.rglob("logs/*.log"):
        for job_id in re.findall(r"# Slurm job (\d+)", log.read_text()):
            named[job_id] = log
    for phase, entry in jobs.items():
        assert slurm_state(entry["job_id"]) == "COMPLETED", phase
        assert entry["job_id"] in named, f"{phase}: no phase log names Slurm job {entry['job_id']}"


def test_a_tuned_comparisons_trials_are_slurm_jobs_sharing_a_study_in_mariadb(optuna_url, tmp_path):
    url, out = optuna_url, tmp_path / "cmp"
    shown = url.replace(f":{DB_PASSWORD}@", ":***@")
    began = time.monotonic()
    rc, text = finish(driver(tuned_args(out, url)), deadline_s=420)
    print(f"tuned compare on Slurm: {time.monotonic() - began:.0f} s")
    assert rc == 0 and "Traceback" not in text, text[-3000:]
    check_studies(out, url)
    check_slurm_jobs(out)
    recorded = json.loads((out / "tuning.json").read_text())["studies"]
    assert {(s["storage"], s["pruner"]) for s in recorded} == {(shown, "median")}
    # the password reaches the trial jobs in their environment only: no file of the comparison holds it
    assert not [p for p in out.rglob("*") if p.is_file() and DB_PASSWORD.encode() in p.read_bytes()]

    # Another comparison folder on the same studies: refused in one line, before any job, the studies untouched.
    other = tmp_path / "other"
    rc, text = finish(driver(tuned_args(other, url)), deadline_s=120)
    errors = [line for line in text.splitlines() if "error:" in line]
    assert rc == 1 and "Traceback" not in text and len(errors) == 1, text
    assert f"belongs to the comparison in {out.resolve()}" in errors[0] and shown in errors[0], text
    assert not recorded_jobs(other)
    assert {len(study.trials) for study in studies(url).values()} == {TRIALS}
