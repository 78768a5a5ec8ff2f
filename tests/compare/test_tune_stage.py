"""`spt-hf compare --tune` runs its search as a stage before the plan, which reads the chosen values from
`tuning.json`: a dry run tells the truth before, during and after the search (a fake search, then the seeded phases
trained for real, tiny), and `--estimate` costs the seeded phases with the chosen values once there are some."""

import json
import re

import pytest
from helpers import TINY_PHASE
from test_tune_space import Killed, fake_launcher, spec, untuned, write_space

from spt_hf.cli import main as cli_main
from spt_hf.compare import PhaseState, build_plan, run_compare
from spt_hf.compare.tune import run_tuning
from spt_hf.tuning import SUMMARY_FILE

pytest.importorskip("optuna")

SEEDED = ("digits/dlr/full/seed0/finetune", "digits/dlr/full/seed0/scratch")  # the phases the search chooses for


def test_before_the_search_a_dry_run_shows_the_seeded_phases_waiting_for_it_and_writes_nothing(tmp_path, capsys):
    config = spec(tmp_path, architectures=["dlr"])
    result = run_compare(config, dry_run=True)
    out = capsys.readouterr().out
    assert "tune: 2 studies x 3 trials" in out and "not started: the seeded phases wait for the values" in out
    assert {job_id: result.states[job_id] for job_id in SEEDED} == dict.fromkeys(SEEDED, PhaseState.WAITING)
    assert result.states["digits/dlr/full/seed0/spt"] == PhaseState.NEW  # the `spt` arm's trials start from it
    assert "| search digits/dlr/scratch (not started) |" in out
    assert not result.problems and not (tmp_path / "cmp").exists()


def test_during_the_search_a_dry_run_counts_each_studys_trials_and_claims_no_change(tmp_path, capsys):
    config = spec(tmp_path, architectures=["dlr"])
    with pytest.raises(Killed):  # round 1 (a trial of each study) told; round 2 dies after its first trial phase
        run_tuning(config, untuned(config), fake_launcher([], {}, die_after=3))
    capsys.readouterr()
    result = run_compare(config, dry_run=True)
    out = capsys.readouterr().out
    assert "trials ended so far: digits/dlr/spt 1/3, digits/dlr/scratch 1/3;" in out
    assert {job_id: result.states[job_id] for job_id in SEEDED} == dict.fromkeys(SEEDED, PhaseState.WAITING)
    assert "digits/dlr/full/seed0/spt, search digits/dlr/spt (1/3 trials)" in out
    assert PhaseState.CHANGED not in result.states.values() and not result.problems


def test_after_the_search_and_the_seeded_phases_a_dry_run_shows_them_finished(tmp_path, capsys):
    config = spec(tmp_path, architectures=["dlr"])
    best = run_tuning(config, untuned(config), fake_launcher([], {}))  # the search (fake trials)
    plan = build_plan(config)
    for job in plan.jobs:  # the plan reads the chosen values: each seeded phase of an arm trains with them
        arm = {"finetune": "spt", "scratch": "scratch"}.get(job.phase)
        assert job.awaits is None
        if arm:
            assert best[f"digits/dlr/{arm}"].items() <= job.overrides.items()
    assert run_compare(config).ok  # the search is done: the stage runs no trial; the seeded phases train (tiny)
    capsys.readouterr()
    dry = run_compare(config, dry_run=True)
    out = capsys.readouterr().out
    assert set(dry.states.values()) == {PhaseState.FINISHED} and not dry.problems
    assert f"done: the seeded phases train with its chosen values ({SUMMARY_FILE})" in out
    more = run_compare(spec(tmp_path, architectures=["dlr"], tune_trials=4), dry_run=True)  # more trials later
    assert {job_id: more.states[job_id] for job_id in SEEDED} == dict.fromkeys(SEEDED, PhaseState.WAITING)
    assert more.states["digits/dlr/full/seed0/spt"] == PhaseState.FINISHED and not more.problems


def batch_column(text: str, phase: str) -> str:
    """The `batch x accum` cell of a seeded phase's row of the estimate table."""
    row = rf"\| digits/dlr/full/seed0/{phase} \| \w+ \| [\d.]+M \| [^|]+ \| [^|]+ \| ([^|]+) \|"  # (not the plan's row)
    return re.search(row, text).group(1).strip()


def test_the_estimate_costs_the_seeded_phases_with_the_chosen_values_once_the_search_chose_them(tmp_path, capsys):
    space = "learning_rate: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
    space = write_space(tmp_path, space + "per_device_train_batch_size: {type: categorical, choices: [5]}")
    args = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "--recipes-dir", "recipes/cpu"]
    args += ["--output-dir", str(tmp_path / "cmp"), "--tune", "--tune_trials", "3", "--tune_space", space]
    args += [f"--{key}={value}" for key, value in TINY_PHASE.items()] + ["--dry_run", "--estimate"]
    assert cli_main(args) == 0
    before = capsys.readouterr().out
    assert "costed with their recipes' values: the search has not chosen its values yet" in before
    assert batch_column(before, "scratch") != "5 x 1"
    config = spec(tmp_path, architectures=["dlr"], tune_space=space)
    run_tuning(config, untuned(config), fake_launcher([], {}))
    assert json.loads((tmp_path / "cmp" / SUMMARY_FILE).read_text())["studies"][0]["best"]
    capsys.readouterr()
    assert cli_main(args) == 0
    after = capsys.readouterr().out
    assert "costed with the values the search chose (tuning.json)" in after
    assert batch_column(after, "scratch") == batch_column(after, "finetune") == "5 x 1"


def test_the_yaml_keys_of_a_search_still_configure_it(tmp_path, capsys):
    config = tmp_path / "compare.yaml"
    config.write_text(
        "tasks: [digits]\narchitectures: [dlr]\nseeds: [0]\nrecipes_dir: recipes/cpu\n"
        f"output_dir: {tmp_path / 'cmp'}\ntune: true\ntune_trials: 2\ntune_max_steps: 3\ntune_pruner: median\n"
    )
    assert cli_main(["compare", "--config", str(config), "--dry_run", "--total_steps=4"]) == 0
    out = capsys.readouterr().out
    assert "tune: 2 studies x 2 trials (3 steps each; at most: the pruner stops some early)" in out
