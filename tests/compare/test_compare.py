"""`spt-hf compare`: the plan, running it (each phase its own `spt-hf` process), running nothing the second time,
reporting a changed recipe instead of mixing it in, the report equal to the phases' results.json, a killed compare
resumed, and the submitit (local cluster) and Ray (local instance) launchers giving the local launcher's table."""

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TINY_PHASE
from interrupts import sigint_ignored

from spt_hf.cli import main as cli_main
from spt_hf.compare import CompareSpec, run_compare
from spt_hf.training.run_folder import RecipeChangedError

TINY = TINY_PHASE
LISTOPS = {
    "generate_data": {"num_train": 64, "num_val": 16, "num_test": 16, "min_length": 8, "max_length": 40, "max_depth": 3}
}


def spec(root: Path, **changes) -> CompareSpec:
    values = {
        "tasks": ["digits"],
        "architectures": ["transformer", "dlr"],
        "seeds": [0],
        "recipes_dir": "recipes/cpu",
        "output_dir": str(root / "cmp"),
        "max_parallel": 2,
        "overrides": dict(TINY),
    }
    return CompareSpec(**{**values, **changes})


def phase_results(root: Path) -> dict[str, dict]:
    return {
        str(p.parent.relative_to(root)): json.loads(p.read_text())
        for p in root.rglob("*/results.json")
        if p.parent.name in ("spt", "finetune", "scratch")
    }


def assert_report_equals_results(out: Path) -> None:
    """Every per-seed row of runs.csv is the test metric its phase's results.json holds."""
    with open(out / "runs.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    for row in rows:
        results = json.loads((Path(row["path"]) / "results.json").read_text())
        assert float(row["test"]) == results["metrics"]["test"][f"test_{row['metric']}"]
        assert int(row["steps"]) == results["budget"]["steps"]


def test_a_comparison_runs_then_runs_nothing_then_refuses_other_recipe_keys_writing_nothing(tmp_path, capsys):
    result = run_compare(spec(tmp_path))
    assert result.ok and len(result.plan) == 6 and set(result.states.values()) == {"finished"} and len(result.ran) == 6
    out = tmp_path / "cmp"
    written = phase_results(out)
    assert len(written) == 6
    tied = written["digits/transformer/full/seed0/scratch"]["budget"]["steps"]
    assert tied == 4 and written["digits/transformer/full/seed0/spt"]["budget"]["steps"] == 2  # the recipe ties budgets
    assert_report_equals_results(out)
    text = (out / "report.md").read_text()
    assert "| digits | spt_rotary_transformer |" in text and "| digits | spt_dlr |" in text
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    capsys.readouterr()

    again = run_compare(spec(tmp_path))  # the same command: every phase is finished
    assert set(again.states.values()) == {"finished"} and again.ok and again.ran == []
    assert "compare: 0 phase(s) to run" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.rglob("results.json") if p in stamps} == stamps

    # Other options: refused before the plan table, a launch or the report, naming the keys per group of phases.
    report_md = out / "report.md"
    before = (report_md.read_bytes(), report_md.stat().st_mtime_ns, sorted(out.rglob("*")))
    capsys.readouterr()
    changed = spec(tmp_path, seeds=[0, 1], overrides={**TINY, "learning_rate": 0.5})
    with pytest.raises(RecipeChangedError) as refusal:
        run_compare(changed)
    assert str(refusal.value).splitlines() == [
        f"{out} holds phases trained with other recipe keys; nothing was run or written:",
        "  digits/transformer spt, finetune, scratch (3 phases): training.learning_rate 0.001 → 0.5",
        "  digits/dlr spt, finetune, scratch (3 phases): training.learning_rate 0.005 → 0.5",
        "Use another --output_dir for these settings, or restore the options (or recipe files) it was run with; "
        "--dry_run shows every phase's state.",
    ]
    assert capsys.readouterr().out == ""
    assert (report_md.read_bytes(), report_md.stat().st_mtime_ns, sorted(out.rglob("*"))) == before
    dry = run_compare(changed, dry_run=True)  # the dry run still shows each phase's state and why
    assert set(dry.states.values()) == {"changed", "new", "waiting"} and len(dry.problems) == 6
    assert all(re.search(r"training.learning_rate: 0.00[15] -> 0.5", why) for why in dry.problems.values())


def test_a_finished_phase_whose_files_changed_is_reported_while_the_others_run(tmp_path, capsys):
    """Not a refusal: a phase changed for its files, not its recipe keys, is left alone and named; the new seed runs
    and the report is written."""
    assert run_compare(spec(tmp_path, architectures=["dlr"], with_scratch=False)).ok
    weights = tmp_path / "cmp/digits/dlr/full/seed0/finetune/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    result = run_compare(spec(tmp_path, architectures=["dlr"], with_scratch=False, seeds=[0, 1]))
    assert result.states == {
        "digits/dlr/full/seed0/spt": "finished",
        "digits/dlr/full/seed0/finetune": "changed",
        "digits/dlr/full/seed1/spt": "finished",
        "digits/dlr/full/seed1/finetune": "finished",
    }
    assert "model.safetensors" in result.problems["digits/dlr/full/seed0/finetune"]
    assert "compare: digits/dlr/full/seed0/finetune:" in capsys.readouterr().out and result.report


def test_a_missing_recipe_pair_is_an_error_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No recipe pair for task 'digits' and architecture 'gru'.*digits/s4"):
        run_compare(spec(tmp_path, architectures=["transformer", "gru"]))
    assert not (tmp_path / "cmp").exists()
    with pytest.raises(ValueError, match="`budget: tied` needs `total_steps`"):
        run_compare(spec(tmp_path, architectures=["dlr"], budget="tied", overrides={"max_steps": 2}))
    with pytest.raises(
        ValueError, match="--max_steps 2 would be ignored: digits-transformer-spt.yaml ties .* total_steps=4"
    ):
        run_compare(spec(tmp_path, overrides={**TINY, "max_steps": 2}))  # tied by total_steps: refused, not ignored
    with pytest.raises(ValueError, match=r"^--total_steps 4 ties .* `budget: equal` .* would ignore it: pass --budget"):
        run_compare(spec(tmp_path, budget="equal", overrides=TINY))  # the same for a total the budget would drop


def test_the_yaml_form_and_a_dry_run_print_the_plan_and_run_nothing(tmp_path, capsys):
    config = tmp_path / "compare.yaml"
    config.write_text(
        json.dumps(
            {
                "tasks": ["digits", "listops"],
                "architectures": ["s4"],
                "seeds": [0, 1],
                "recipes_dir": "recipes/cpu",
                "output_dir": str(tmp_path / "cmp"),
                "num_train_examples": [100, None],
                "task_overrides": {"listops": LISTOPS},
            }
        )
    )
    assert cli_main(["compare", "--config", str(config), "--dry-run", "--max_steps", "3"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("| listops/s4/n100/seed1/finetune | spt | waiting | 3 steps (equal) |") == 1
    )  # from its SPT checkpoint
    assert "| digits/s4/full/seed0/scratch | scratch | new |" in out and "listops/s4/full/seed1/spt |" in out
    assert not (tmp_path / "cmp").exists()


def test_the_graph_runs_a_phase_after_its_dependency_and_blocks_it_when_that_one_failed(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from spt_hf.compare import launchers
    from spt_hf.compare.plan import PhaseJob

    def job(name, depends_on=None):
        return PhaseJob(name, "spt", "t", "a", "full", 0, Path("r.yaml"), {}, tmp_path / name, "", depends_on)

    # d/spt exits 0 without a finished phase in its folder (the folder decides, as the phase itself would)
    asked = []
    monkeypatch.setattr(launchers, "phase_finished", lambda j, world_size: asked.append(world_size) or j.id != "d/spt")
    order, events, exits = [], [], {"a/spt": 0, "b/spt": 3}
    jobs = [job("a/spt"), job("a/ft", "a/spt"), job("b/spt"), job("b/ft", "b/spt"), job("c/ft", "c/spt")]
    jobs += [job("d/spt"), job("d/ft", "d/spt")]
    with ThreadPoolExecutor(2) as pool:
        states = launchers.run_graph(
            jobs,
            lambda j: pool.submit(lambda: order.append(j.id) or exits.get(j.id, 0)),
            2,
            lambda j, state, detail: events.append((j.id, state, detail)),
            world_size=2,
        )
    # c/spt finished in an earlier run (it is not in the plan), so c/ft runs at once
    assert states == {
        "a/spt": "finished",
        "a/ft": "finished",
        "b/spt": "failed",
        "b/ft": "blocked",
        "c/ft": "finished",
        "d/spt": "failed",
        "d/ft": "blocked",
    }
    assert order.index("a/spt") < order.index("a/ft") and "b/ft" not in order and "d/ft" not in order
    assert ("b/ft", "blocked", "b/spt did not finish") in events
    assert len(events) == 5 + 7  # a "running" per started job, one end per job
    assert any(
        j == "d/spt" and "exit status 0, but" in detail and "holds no finished phase" in detail
        for j, _, detail in events
    )
    assert set(asked) == {2}  # the launcher's processes per phase, which the fingerprint records


@pytest.mark.slow
def test_two_tasks_two_architectures_two_seeds_killed_then_resumed(tmp_path):
    args = [
        "compare",
        "--tasks",
        "digits",
        "listops",
        "--architectures",
        "transformer",
        "dlr",
        "--seeds",
        "0",
        "1",
        "--recipes-dir",
        "recipes/cpu",
        "--output-dir",
        str(tmp_path / "cmp"),
        "--max-parallel",
        "2",
    ]
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"task_overrides": {"listops": LISTOPS}}))
    args += ["--config", str(config)] + [f"--{k}={v}" for k, v in TINY.items()]
    process = subprocess.Popen(
        [sys.executable, "-m", "spt_hf", *args],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while len(phase_results(tmp_path / "cmp")) < 5 and process.poll() is None:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)  # the compare and the phases it was running
    process.wait()
    assert 5 <= len(phase_results(tmp_path / "cmp")) < 24
    assert cli_main(args) == 0
    assert len(phase_results(tmp_path / "cmp")) == 24
    assert_report_equals_results(tmp_path / "cmp")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["submitit", "ray"])
def test_submitit_and_ray_give_the_table_of_the_local_launcher(launcher, tmp_path):
    pytest.importorskip(launcher)
    local = run_compare(spec(tmp_path / "local", architectures=["dlr"], seeds=[0, 1]))
    options = (
        {"submitit": {"cluster": "local", "timeout_min": 30}} if launcher == "submitit" else {"ray": {"num_cpus": 1}}
    )
    other = run_compare(spec(tmp_path / launcher, architectures=["dlr"], seeds=[0, 1], launcher=launcher, **options))
    assert local.ok and other.ok
    tables = [r.report.split("## Architectures")[0].split("\n\n", 2)[-1] for r in (local, other)]
    # the wall times vary from run to run
    tables = [re.sub(r" · [\d.]+ (s|min|h) \|", " · (wall time) |", table) for table in tables]
    assert tables[0] == tables[1] and "| digits | spt_dlr |" in tables[0]


def test_the_phase_and_compare_decide_a_phase_state_with_one_function(tmp_path):
    """A phase trained by its own command is finished in compare's dry run, with and without an accelerate config
    of the same number of processes; a changed recipe is "changed" with the keys named, in compare (both ways) and
    in the phase itself (the same message); 2 processes are a changed recipe too (the phase records world_size)."""
    from spt_hf.compare import build_plan
    from spt_hf.training import pipeline
    from spt_hf.training.run_folder import RecipeChangedError

    one = {"architectures": ["transformer"], "with_scratch": False}
    spt_job, finetune_job = build_plan(spec(tmp_path, **one)).jobs
    pipeline.pretrain(spt_job.load_recipe())  # the SPT phase as `spt-hf spt` runs it
    single, double = tmp_path / "one.yaml", tmp_path / "two.yaml"
    single.write_text("distributed_type: 'NO'\nnum_processes: 1\n")
    double.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    for accelerate in (None, str(single)):
        dry = run_compare(spec(tmp_path, **one, accelerate_config=accelerate), dry_run=True)
        assert dry.states == {spt_job.id: "finished", finetune_job.id: "new"} and not dry.problems

    changed = {**one, "overrides": {**TINY, "learning_rate": 0.5}}
    for accelerate in (None, str(single)):
        dry = run_compare(spec(tmp_path, **changed, accelerate_config=accelerate), dry_run=True)
        assert dry.states[spt_job.id] == "changed" and "training.learning_rate" in dry.problems[spt_job.id]
    with pytest.raises(RecipeChangedError) as error:
        pipeline.pretrain(build_plan(spec(tmp_path, **changed)).jobs[0].load_recipe())
    assert str(error.value) == dry.problems[spt_job.id]

    dry = run_compare(spec(tmp_path, **one, accelerate_config=str(double)), dry_run=True)
    assert dry.states[spt_job.id] == "changed" and "world_size: 1 -> 2" in dry.problems[spt_job.id]


def test_the_baseline_phase_of_a_text_pretrained_pair_is_its_own_kind(tmp_path):
    """The baseline phase (folder scratch/, finetuning without an SPT checkpoint) is "scratch" from random
    initialisation and "text-pretrained" when its recipe loads Pythia's weights; the plan table shows what each phase
    starts from (`StartKind`: the finetuning phase from its SPT checkpoint)."""
    from spt_hf.compare import build_plan
    from spt_hf.compare.state import describe_plan, plan_states

    plan = build_plan(
        CompareSpec(
            tasks=["text"], architectures=["pythia70m-pretrained", "s4"], seeds=[0], output_dir=str(tmp_path / "c")
        )
    )
    kinds = {job.id.split("/", 1)[1]: (job.phase, job.kind) for job in plan.jobs}
    assert kinds["pythia70m-pretrained/full/seed0/scratch"] == ("scratch", "text-pretrained")
    assert kinds["s4/full/seed0/scratch"] == ("scratch", "scratch")
    assert kinds["s4/full/seed0/finetune"] == ("finetune", "spt")  # from its SPT checkpoint
    assert kinds["pythia70m-pretrained/full/seed0/spt"] == ("spt", "text-pretrained")
    assert kinds["s4/full/seed0/spt"] == ("spt", "scratch")
    table = describe_plan(plan, plan_states(plan))
    assert "| text/pythia70m-pretrained/full/seed0/scratch | text-pretrained | new |" in table
    assert "| text/s4/full/seed0/finetune | spt | waiting |" in table
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("trailing", "yaml_overrides", "option"),
    [
        (["--seed", "3"], {}, "--seeds"),
        (["--model_name_or_path", "runs/x"], {}, "compare sets it per phase"),
        ([], {"num_train_examples": 100}, "--num_train_examples N"),
        ([], {"output_dir": "elsewhere"}, "--output_dir"),
    ],
    ids=["cli-seed", "cli-model", "yaml-num-train-examples", "yaml-output-dir"],
)
def test_keys_compare_owns_are_refused_as_recipe_overrides_before_anything_runs(
    trailing, yaml_overrides, option, tmp_path, capsys, monkeypatch
):
    """A trailing `--seed 3` (which argparse would otherwise take for `--seeds 3`), or `num_train_examples` /
    `output_dir` among the YAML's recipe overrides (the plan would train 100 examples in a folder named `full`, or
    replace them) fail in one line naming compare's option, before anything is written."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "compare.yaml"
    values = {"tasks": ["digits"], "architectures": ["transformer"], "seeds": [0], "recipes_dir": "recipes/cpu"}
    config.write_text(json.dumps({**values, "output_dir": "cmp", "overrides": yaml_overrides}))
    assert cli_main(["compare", "--config", str(config), "--dry_run", *trailing]) == 1
    error = capsys.readouterr().err
    assert "is compare's own key" in error and option in error and len(error.strip().splitlines()) == 2  # + hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.yaml"]


def test_the_papers_whole_table_plans_every_pair_that_exists_with_the_option(tmp_path, capsys):
    """DLR has recipes for four of the six LRA tasks: without the option the error names it; with it, every other pair
    is planned and the missing ones are listed in the plan and in the report."""
    from spt_hf.compare import build_plan
    from spt_hf.report.comparison import report

    tasks = ["listops", "text", "retrieval", "image", "pathfinder", "pathx"]
    architectures = ["transformer", "s4", "dlr", "mega", "spade", "linformer", "performer", "pythia70m"]
    args = ["compare", "--tasks", *tasks, "--architectures", *architectures, "--output_dir", str(tmp_path / "c")]
    assert cli_main([*args, "--dry_run"]) == 1
    assert "No recipe pair for task 'retrieval' and architecture 'dlr'" in capsys.readouterr().err
    assert cli_main([*args, "--dry_run", "--skip_missing_pairs"]) == 0
    out = capsys.readouterr().out
    assert "Not planned (no recipe pair): retrieval/dlr, pathfinder/dlr." in out
    assert "| pathx/dlr/full/seed0/spt |" in out and "| retrieval/performer/full/seed2/finetune |" in out
    assert not (tmp_path / "c").exists()
    plan = build_plan(CompareSpec(tasks=tasks, architectures=architectures, skip_missing_pairs=True))
    assert plan.missing_pairs == [("retrieval", "dlr"), ("pathfinder", "dlr")]
    assert len(plan.jobs) == (6 * 8 - 2) * 3 * 3  # pairs x seeds x (SPT, finetune, baseline)
    (tmp_path / "runs").mkdir()
    text = report([tmp_path / "runs"], missing_pairs=plan.missing_pairs)
    assert "## Not in this comparison\n\nNo recipe pair, so not planned: retrieval/dlr, pathfinder/dlr." in text


def test_an_spt_switch_among_the_overrides_reaches_the_spt_phases_alone(tmp_path):
    """`packed_sequences` is read by the SPT phase and refused by finetuning (a classifier pools a packed row into
    one prediction): compare gives it to the SPT phases and leaves it out of the finetuning and baseline phases."""
    from spt_hf.compare import build_plan

    spec = CompareSpec(
        tasks=["digits"],
        architectures=["transformer"],
        seeds=[0],
        recipes_dir="recipes/cpu",
        output_dir=str(tmp_path),
        overrides={"packed_sequences": True},
    )
    jobs = {job.phase: job for job in build_plan(spec).jobs}
    assert sorted(jobs) == ["finetune", "scratch", "spt"]
    assert jobs["spt"].load_recipe().spt.packed_sequences is True
    for phase in ("finetune", "scratch"):
        assert "packed_sequences" not in jobs[phase].overrides
        assert jobs[phase].load_recipe().spt.packed_sequences is False


def test_a_local_recipes_folder_is_used_only_when_named_and_the_plan_says_where_recipes_come_from(
    tmp_path, capsys, monkeypatch
):
    """A `recipes/` folder in the working directory (here an edited copy of the CPU pair, 7 steps) does not replace
    the shipped paper recipes: without --recipes_dir the shipped ones are planned (and the digits pair, which is
    among the CPU recipes only, is missing); named, the copy is planned; the plan's first line names the folder."""
    from spt_hf.recipes.loading import RECIPES_DIR

    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").mkdir()
    for phase in ("spt", "finetune"):
        text = (RECIPES_DIR / "cpu" / f"digits-s4-{phase}.yaml").read_text()
        (tmp_path / "recipes" / f"digits-s4-{phase}.yaml").write_text(text.replace("max_steps: 600", "max_steps: 7"))
    argv = ["compare", "--tasks", "digits", "--architectures", "s4", "--seeds", "0", "--dry_run"]
    assert cli_main(argv) == 1
    assert "in the recipes shipped with spt_hf (recipes) (looked for" in capsys.readouterr().err
    assert cli_main([*argv, "--recipes_dir", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Recipes: the recipes shipped with spt_hf (recipes/cpu).\n")
    assert "| digits/s4/full/seed0/spt | scratch | new | 600 steps (equal) | cpu/digits-s4-spt.yaml |" in out
    assert cli_main([*argv, "--recipes_dir", "recipes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Recipes: your folder recipes ({tmp_path.resolve() / 'recipes'}), not the shipped recipes.")
    assert "| digits/s4/full/seed0/spt | scratch | new | 7 steps (equal) | recipes/digits-s4-spt.yaml |" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipes"]


@pytest.mark.parametrize("seeds, shown", [(["-1"], "-1"), (["0", "4294967296"], "4294967296"), (["1", "-3"], "-3")])
def test_a_seed_outside_numpys_range_is_refused_in_one_line_before_anything_is_written(
    seeds, shown, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    argv = [
        "compare",
        "--tasks",
        "digits",
        "--architectures",
        "s4",
        "--recipes_dir",
        "cpu",
        "--dry_run",
        "--seeds",
        *seeds,
    ]
    assert cli_main(argv) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert (
        error[0] == f"spt-hf compare: error: `seeds` holds {shown}; each seed must be an integer from 0 to 4294967295."
    )
    assert len(error) == 2 and not list(tmp_path.iterdir())  # (+ the --debug hint)


# A phase long enough to be interrupted, with a checkpoint every 2 steps to resume from (DLR's recipes tie no budget).
LONG_PHASE = {**{k: v for k, v in TINY.items() if k != "total_steps"}, "max_steps": 400, "save_steps": 2}


def interrupted(
    words: list[str],
    checkpoint: Path,
    cwd: Path,
    resumed_in: Path | None = None,
    send: int = signal.SIGINT,
    background: bool = False,
) -> tuple[int, str]:
    """`spt-hf WORDS` in a process of its own, sent `send` (to it alone) once `checkpoint` exists, or once
    `resumed_in` says it resumed from one; its exit status and stderr. `background`: started with SIGINT ignored, as
    a script's `spt-hf ... &` starts."""
    with sigint_ignored() if background else contextlib.nullcontext():
        process = subprocess.Popen(
            [sys.executable, "-m", "spt_hf", *words],
            cwd=cwd,
            env={**os.environ, "TQDM_DISABLE": "1"},  # (no progress bars on stderr, as in compare's phases)
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        log = resumed_in.read_text() if resumed_in is not None and resumed_in.exists() else ""
        if (resumed_in is None and checkpoint.is_dir()) or "resuming spt from" in log:
            break
        time.sleep(0.2)
    process.send_signal(send)
    _, err = process.communicate(timeout=300)  # (a bound on a hung process, not a timing)
    return process.returncode, err


def test_ctrl_c_on_compare_stops_its_running_phase_in_one_line_and_the_same_command_resumes(tmp_path):
    """SIGINT to compare alone (no terminal sends it to the phase too): the running phase is interrupted, not left
    to finish unseen; compare says in one line what it stopped and the command that resumes, exits 130; run again,
    the phase resumes from its checkpoint."""
    from spt_hf.training.run_folder import live_lock_owner

    words = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "--recipes_dir", "cpu"]
    words += ["--no_scratch", "--output_dir", "cmp", *[f"--{k}={v}" for k, v in LONG_PHASE.items()]]
    run = tmp_path / "cmp" / "digits" / "dlr" / "full" / "seed0"
    status, err = interrupted(words, run / "spt" / "checkpoint-2", tmp_path)
    assert status == 130 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        "spt-hf compare: interrupted: stopped 1 running phase(s): digits/dlr/full/seed0/spt; the same command resumes "
        f"from the last checkpoint: spt-hf {' '.join(words)}"
    ]
    assert live_lock_owner(run / "spt") is None  # the phase process is gone
    assert (run / "logs" / "spt.log").read_text().strip().splitlines()[-1].startswith("spt-hf spt: interrupted: ")
    status, err = interrupted(words, run / "spt" / "checkpoint-2", tmp_path, resumed_in=run / "logs" / "spt.log")
    assert status == 130 and "Traceback" not in err, err


def test_kill_of_a_compare_run_in_the_background_stops_its_phase_as_ctrl_c_does(tmp_path):
    """A script's `spt-hf compare ... &` ignores SIGINT, and so would its phases: `kill` (SIGTERM) stops compare as
    Ctrl-C does, exit status 143, and the phase still answers compare's SIGINT (it stops with its own line, before
    compare's 60 s would kill it)."""
    from spt_hf.training.run_folder import live_lock_owner

    words = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", "0", "--recipes_dir", "cpu"]
    words += ["--no_scratch", "--output_dir", "cmp", *[f"--{k}={v}" for k, v in LONG_PHASE.items()]]
    run = tmp_path / "cmp" / "digits" / "dlr" / "full" / "seed0"
    status, err = interrupted(words, run / "spt" / "checkpoint-2", tmp_path, send=signal.SIGTERM, background=True)
    assert status == 143 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        "spt-hf compare: interrupted by SIGTERM: stopped 1 running phase(s): digits/dlr/full/seed0/spt; the same "
        f"command resumes from the last checkpoint: spt-hf {' '.join(words)}"
    ]
    assert live_lock_owner(run / "spt") is None
    # the phase's own line: it answered compare's SIGINT (a phase that ignored it would be killed without one)
    assert (run / "logs" / "spt.log").read_text().strip().splitlines()[-1].startswith("spt-hf spt: interrupted: ")


def test_ctrl_c_on_a_phase_says_in_one_line_that_the_same_command_resumes_it(tmp_path):
    words = ["spt", "--config", "cpu/digits-dlr-spt.yaml", "--output_dir", "run"]
    words += [f"--{k}={v}" for k, v in LONG_PHASE.items()]
    status, err = interrupted(words, tmp_path / "run" / "spt" / "checkpoint-2", tmp_path)
    assert status == 130, err[-3000:]  # (0: it trained on to its end; tests/reliability/test_dropped_interrupt.py)
    assert "Traceback" not in err and err.strip().splitlines()[-1:] == [
        "spt-hf spt: interrupted: the phase stopped; the same command resumes from the last checkpoint: "
        f"spt-hf {' '.join(words)}"
    ]
