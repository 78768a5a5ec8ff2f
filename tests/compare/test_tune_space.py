"""`spt-hf compare --tune` without training: the space YAML (checked in one line per problem), the studies' names,
the driver's ask/tell rounds and their resume with a fake launcher, one driver per comparison, and the one-line error
without Optuna."""

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
from helpers import TINY_PHASE

from spt_hf.compare import CompareSpec, build_plan
from spt_hf.compare.tune import run_tuning, searches
from spt_hf.compare.tune_space import DEFAULT_SPACE, DriverLock, load_space
from spt_hf.tuning import SUMMARY_FILE, TuneSpec, require_optuna, study_name

optuna = pytest.importorskip("optuna")


def spec(root: Path, **changes) -> CompareSpec:
    """A tuned comparison of the fast CPU recipes; `tune_*` keys as the command line and YAML give them."""
    values = dict(tasks=["digits"], architectures=["transformer", "dlr"], seeds=[0], recipes_dir="recipes/cpu")
    values.update(output_dir=str(root / "cmp"), overrides=dict(TINY_PHASE), tune=True, tune_trials=3)
    values.update(changes)
    values["tune"] = TuneSpec.from_options(values)
    return CompareSpec(**values)


def untuned(config: CompareSpec):
    """The comparison planned without the search's values: what the search stage copies its trials from."""
    return build_plan(dataclasses.replace(config, tune=None))


def write_space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_the_default_space_searches_learning_rate_weight_decay_warmup_and_dropout():
    space = load_space(None)
    assert DEFAULT_SPACE.is_file()
    assert set(space) == {"learning_rate", "weight_decay", "warmup_steps", "hidden_dropout_prob"}
    assert space["learning_rate"]["log"] is True and space["warmup_steps"]["high"] < 1  # a ratio of the steps


@pytest.mark.parametrize(
    "text, message",
    [
        ("seed: {type: int, low: 0, high: 3}", "`seed` is compare's own key"),
        ("max_steps: {type: int, low: 5, high: 9}", "the trial budget is --tune_max_steps"),
        ("output_dir: {type: categorical, choices: [a]}", "compare's own key"),
        ("learning_rate: {type: uniform, low: 0.1, high: 1}", "needs `type:` one of"),
        ("learning_rate: {type: float, low: 1, high: 0.1}", "needs low < high"),
        ("learning_rate: {type: float, low: 0, high: 0.1, log: true}", "low > 0 with log: true"),
        ("learning_rate: {type: float, low: 0.1, hihg: 1}", "unknown field(s) ['hihg']"),
        ("dropout: {type: categorical, choices: []}", "non-empty list `choices:`"),
        ("[1, 2]", "expected a mapping"),
    ],
)
def test_a_bad_space_entry_is_refused_in_one_line(tmp_path, text, message):
    with pytest.raises(ValueError) as info:
        load_space(write_space(tmp_path, text))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_space_key_that_is_not_a_recipe_key_is_refused_before_anything_runs(tmp_path):
    config = spec(tmp_path, tune_space=write_space(tmp_path, "learning_rat: {type: float, low: 0.1, high: 1}"))
    with pytest.raises(ValueError, match=r"^--tune_space: Unknown recipe key --learning_rat.*learning_rate") as info:
        searches(config, untuned(config).jobs)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cmp" / "tuning.db").exists()


def test_one_study_per_task_architecture_and_arm():
    config = spec(Path("/nonexistent"))
    names = sorted(s.name for s in searches(config, untuned(config).jobs))
    assert names == [study_name("digits", a, arm) for a in ("dlr", "transformer") for arm in ("scratch", "spt")]
    assert names[0] == "digits/dlr/scratch"
    with pytest.raises(ValueError, match="Unknown tuning arm"):
        study_name("digits", "dlr", "finetune")


class Killed(Exception):
    """The driver dies while its round runs."""


def fake_launcher(launched: list[str], values: dict, die_after: int | None = None):
    """A launcher that 'trains' each trial phase: it writes the results.json a phase would (validation metric from
    `values` by the trial's learning rate), and raises Killed after `die_after` trial phases."""

    def launch(jobs):
        for job in jobs:
            if "/trial" not in job.id or job.phase == "spt":
                continue  # the SPT phase the spt arm's trials start from (or, with --tune_spt, a pair's own)
            if die_after is not None and len(launched) >= die_after:
                raise Killed(job.id)
            launched.append(job.id)
            value = values.setdefault(job.overrides["learning_rate"], len(values) / 10)
            job.phase_dir.mkdir(parents=True, exist_ok=True)
            result = {
                "phase": job.phase,
                "task": job.task,
                "metrics": {"validation": {"eval_accuracy": value}, "test": {"test_accuracy": 0.5}},
                "budget": {"steps": 3, "wall_time_s": 1.0},
                "compute": {"flops": 10.0},
            }
            (job.phase_dir / "results.json").write_text(json.dumps(result))
        return {}

    return launch


def study_trials(config: CompareSpec) -> dict[str, list]:
    url = f"sqlite:///{Path(config.output_dir).resolve() / 'tuning.db'}"
    return {
        s.study_name: optuna.load_study(study_name=s.study_name, storage=url).trials
        for s in optuna.get_all_study_summaries(url)
    }


def test_a_killed_driver_resumes_without_repeating_a_finished_trial_and_the_seeds_get_the_best_values(tmp_path):
    config = spec(tmp_path)
    first: list[str] = []
    values: dict = {}
    with pytest.raises(Killed):  # round 1 (4 trials) finished; round 2 dies after 2 of its 4 trial phases
        run_tuning(config, untuned(config), fake_launcher(first, values, die_after=6))
    states = {name: [t.state.name for t in trials] for name, trials in study_trials(config).items()}
    assert sorted(sum(states.values(), [])) == ["COMPLETE"] * 4 + ["RUNNING"] * 4
    second: list[str] = []
    best = run_tuning(config, untuned(config), fake_launcher(second, values))
    assert not set(first[:4]) & set(second)  # round 1's trials are never run again
    assert set(first[4:]) <= set(second)  # the killed round's trials are re-attached in their folders
    trials = study_trials(config)
    for name, found in trials.items():
        assert [t.number for t in found] == [0, 1, 2] and {t.state.name for t in found} == {"COMPLETE"}
        top = max(found, key=lambda t: t.value)
        assert best[name] == top.params
    for job in build_plan(config).jobs:  # the plan gives each seeded phase of an arm its study's best values
        arm = {"finetune": "spt", "scratch": "scratch"}.get(job.phase)
        if arm:
            assert best[f"{job.task}/{job.architecture}/{arm}"].items() <= job.overrides.items()
    summary = json.loads((tmp_path / "cmp" / SUMMARY_FILE).read_text())
    assert [len(s["trials"]) for s in summary["studies"]] == [3, 3, 3, 3]
    assert all(s["best"]["params"] == best[s["name"]] for s in summary["studies"])
    again: list[str] = []
    run_tuning(config, untuned(config), fake_launcher(again, values))
    assert again == []  # a finished search runs nothing


def test_a_second_driver_on_the_same_comparison_is_refused_in_one_line(tmp_path):
    config = spec(tmp_path)
    with DriverLock(tmp_path / "cmp"), pytest.raises(ValueError, match=r"^Another `spt-hf compare --tune` is driving"):
        run_tuning(config, untuned(config), fake_launcher([], {}))
    other = spec(tmp_path / "other", tune_storage=f"sqlite:///{tmp_path / 'shared.db'}", tune_trials=1)
    run_tuning(other, untuned(other), fake_launcher([], {}))
    mine = spec(tmp_path, tune_storage=f"sqlite:///{tmp_path / 'shared.db'}", tune_trials=1)
    with pytest.raises(ValueError, match=r"belongs to the comparison in .*other.*give this one its own --tune_storage"):
        run_tuning(mine, untuned(mine), fake_launcher([], {}))


def test_tune_without_optuna_names_the_extra_in_one_line(monkeypatch):
    real = importlib.import_module

    def without_optuna(name, *args):
        if name == "optuna":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_optuna)
    with pytest.raises(ValueError, match=r"^--tune needs Optuna: pip install 'spt_hf\[tune\]'"):
        require_optuna()


def test_tune_spt_makes_each_spt_trial_a_pair_and_the_seeded_spt_phases_get_the_chosen_spt_values(tmp_path):
    config = spec(tmp_path, architectures=["dlr"], tune_spt=True, tune_trials=2, tune_max_steps=3)
    launched: list = []
    originals = []

    def launch(jobs):
        originals.extend(jobs)
        return fake_launcher(launched, {})(jobs)

    best = run_tuning(config, untuned(config), launch)
    plan = build_plan(config)
    pairs = [job for job in originals if job.id.startswith("tune/digits/dlr/spt_pair/")]
    assert [job.phase for job in pairs] == ["spt", "finetune"] * 2
    spt, finetune = pairs[:2]
    assert finetune.depends_on == spt.id and finetune.overrides["model_name_or_path"] == str(spt.phase_dir)
    assert spt.overrides["max_steps"] == 3 and "spt.learning_rate" not in spt.overrides
    chosen = best["digits/dlr/spt_pair"]
    assert {"spt.learning_rate", "spt.weight_decay", "spt.warmup_steps", "learning_rate"} <= set(chosen)
    seeded_spt = next(job for job in plan.jobs if job.phase == "spt")
    assert seeded_spt.overrides["learning_rate"] == chosen["spt.learning_rate"]
    seeded = next(job for job in plan.jobs if job.phase == "finetune")
    assert seeded.overrides["learning_rate"] == chosen["learning_rate"]


def test_an_spt_key_in_the_space_needs_tune_spt(tmp_path):
    config = spec(tmp_path, tune_space=write_space(tmp_path, "spt.mask_rate: {type: float, low: 0.1, high: 0.3}"))
    with pytest.raises(ValueError, match=r"^--tune_space: \['spt.mask_rate'\] search the SPT phase.*--tune_spt"):
        searches(config, untuned(config).jobs)
    with pytest.raises(ValueError, match="go with --tune"):
        spec(tmp_path, tune=False, tune_spt=True)


@pytest.mark.parametrize(
    "url, reason",
    [
        ("nonsense://x", "NoSuchModuleError"),
        ("mysql+pymysql://user:secret@127.0.0.1:1/spt", "ImportError|OperationalError"),
        ("sqlite:////nonexistent/folder/tuning.db", "OperationalError"),
    ],
)
def test_a_study_database_that_cannot_be_opened_is_one_line_without_its_password(tmp_path, url, reason):
    config = spec(tmp_path, tune_storage=url, architectures=["dlr"])
    with pytest.raises(ValueError, match=rf"^--tune_storage .*: cannot open the study database \(({reason})") as info:
        run_tuning(config, untuned(config), fake_launcher([], {}))
    assert "\n" not in str(info.value) and "secret" not in str(info.value)


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(tune=True, tune_pruner="mean"), "`tune_pruner`='mean'; expected one of ['none', 'median']"),
        (dict(tune=True, tune_trials=0), "`tune_trials` must be a positive integer, got 0"),
        (dict(tune=True, tune_max_steps=2.5), "`tune_max_steps` must be a positive integer, got 2.5"),
        (dict(tune_spt=True), "go with --tune"),
        (dict(tune=False, tune_pruner="median"), "go with --tune"),
    ],
)
def test_the_search_options_are_one_tune_spec_checked_in_one_line(values, message):
    with pytest.raises(ValueError) as info:
        TuneSpec.from_options(dict(values))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_search_options_leave_the_comparison_keys_and_without_tune_there_is_no_search():
    values = {"tasks": ["digits"], "tune": True, "tune_trials": 4, "tune_pruner": "median", "tune_max_steps": None}
    assert TuneSpec.from_options(values) == TuneSpec(trials=4, pruner="median")
    assert values == {"tasks": ["digits"]}
    assert TuneSpec.from_options({"tune_trials": 5}) is None
    with pytest.raises(ValueError, match=r"^`tune`=True; give a spt_hf.tuning.TuneSpec"):
        CompareSpec(tasks=["digits"], architectures=["dlr"], tune=True)


def test_a_trial_budget_derives_its_evaluation_cadence_and_keeps_the_one_the_user_set(tmp_path):
    """`--tune_max_steps 40`: about ten evaluations a trial (the seeded phases' rule) unless `--eval_steps` is set."""
    from spt_hf.compare.tune import budget

    derived = budget(spec(tmp_path, tune_max_steps=40, overrides={}))
    assert derived["max_steps"] == 40 and derived["total_steps"] is None
    assert derived["eval_steps"] == derived["save_steps"] == 4 and derived["eval_strategy"] == "steps"
    given = budget(spec(tmp_path, tune_max_steps=40, overrides={"eval_steps": 10}))
    assert "eval_steps" not in given and given["save_steps"] == 4
    assert budget(spec(tmp_path, overrides={})) == {}
