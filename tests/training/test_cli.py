"""The `spt-hf` command answers a user's mistake in one message saying what is wrong and how to fix it (no
traceback unless --debug or SPT_HF_DEBUG=1), and shows the traceback of internal errors."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import spt_hf
from spt_hf.cli import main as cli_main

PACKAGE = Path(spt_hf.__file__).parent

TINY = {
    "task": "digits",
    "model_type": "spt_rotary_transformer",
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_steps": 2,
}


@pytest.fixture()
def recipes(tmp_path):
    spt = tmp_path / "tiny-spt.yaml"
    spt.write_text(json.dumps({**TINY, "objective": "masked", "output_dir": str(tmp_path / "run")}))
    finetune = tmp_path / "tiny-finetune.yaml"
    finetune.write_text(json.dumps({**TINY, "output_dir": str(tmp_path / "run")}))
    broken = tmp_path / "broken-spt.yaml"
    broken.write_text("task: digits\nmodel_type: [spt_s4\nhidden_size: 16\n")
    return tmp_path, spt, finetune, broken


MISTAKES = {
    "missing recipe": (["spt", "--config", "nowhere.yaml"], "Recipe nowhere.yaml not found"),
    "yaml syntax": (["spt", "--config", "{broken}"], r"broken-spt.yaml:\d+:\d+: YAML syntax error"),
    "unknown key": (
        ["spt", "--config", "{spt}", "--hiden_size", "8"],
        "Unknown recipe key --hiden_size on the command line; did you mean --hidden_size",
    ),
    "negative max_steps": (["spt", "--config", "{spt}", "--max_steps", "-5"], "`max_steps` must be a positive"),
    "wrong phase": (["finetune", "--config", "{spt}"], "is a self-pretraining recipe .*run it with `spt-hf spt`"),
    "typo in a checkpoint path": (
        ["finetune", "--config", "{finetune}", "--model_name_or_path", "runs/typo/spt"],
        "runs/typo/spt does not exist",
    ),
    "report of a missing folder": (["report", "{root}/runs/nothing"], "No such run folder"),
    "max_steps over tied budgets": (
        ["run", "--config", "{spt}", "--total_steps", "10", "--max_steps", "4"],
        r"--max_steps 4 would be ignored: tiny-spt.yaml ties .* total_steps=10",
    ),
    "bad generator size": (
        [
            "generate-data",
            "listops",
            "--output_dir",
            "{root}/lo",
            "--num-train",
            "0",
            "--num-val",
            "1",
            "--num-test",
            "1",
        ],
        "must each be at least 1",
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_is_one_clear_line_without_traceback(mistake, recipes, capsys, monkeypatch):
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    root, spt, finetune, broken = recipes
    argv, message = MISTAKES[mistake]
    argv = [a.format(root=root, spt=spt, finetune=finetune, broken=broken) for a in argv]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first = err.strip().splitlines()[0]
    assert first.startswith(f"spt-hf {argv[0]}: error: ")
    assert re.search(message, err), err
    with pytest.raises(Exception, match=message):
        cli_main([*argv, "--debug"])


def test_the_tied_budget_refusal_is_one_check_for_run_and_compare(tmp_path, capsys, monkeypatch):
    """`spt-hf run` and `spt-hf compare` refuse --max_steps over tied budgets with the same sentence (one check,
    `pipeline.refuse_ignored_max_steps`), before anything is written."""
    monkeypatch.delenv("SPT_HF_DEBUG", raising=False)
    recipe, out = "cpu/digits-transformer-spt.yaml", tmp_path / "out"
    run = ["run", "--config", recipe, "--output_dir", str(out), "--max_steps", "3"]
    compare = ["compare", "--tasks", "digits", "--architectures", "transformer", "--recipes_dir", "cpu"]
    assert cli_main(run) == 1 and cli_main([*compare, "--output_dir", str(out), "--max_steps", "3"]) == 1
    errors = [line.split(": error: ", 1) for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert [command for command, _ in errors] == ["spt-hf run", "spt-hf compare"]
    assert errors[0][1] == errors[1][1]
    assert errors[0][1].startswith("--max_steps 3 would be ignored: digits-transformer-spt.yaml ties the phases'")
    assert not out.exists()
    assert cli_main([*compare, "--output_dir", str(out), "--max_steps", "3", "--budget", "equal", "--dry-run"]) == 0


def test_internal_errors_keep_their_traceback(recipes, monkeypatch):
    root, spt, *_ = recipes
    import spt_hf.training.pipeline as pipeline

    def broken(recipe):
        return {}["not a user error"]  # a bug: a failed lookup, not a diagnosed mistake

    monkeypatch.setattr(pipeline, "pretrain", broken)
    with pytest.raises(KeyError):
        cli_main(["spt", "--config", str(spt)])


def test_help_starts_with_the_usage_and_groups_the_keys(capsys):
    assert cli_main(["pretrain", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spt-hf spt --config RECIPE.yaml [--key value ...]")
    positions = [out.index(f"\n{group}") for group in ("recipe:", "data:", "model:", "SPT objective", "training (")]
    assert positions == sorted(positions)
    assert "--mask_rate" in out and "--learning_rate" in out


SPELLINGS = {  # the one convention (underscores, as the recipe keys), then the hyphenated spelling kept as an alias
    "compare": [
        "compare",
        "--tasks",
        "digits",
        "--architectures",
        "s4",
        "--recipes_dir",
        "cpu",
        "--output_dir",
        "o",
        "--num_train_examples",
        "100",
        "full",
        "--max_parallel",
        "2",
        "--dry_run",
        "--accelerate_config",
        "a.yaml",
        "--submitit_cluster",
        "local",
        "--submitit_partition",
        "p",
        "--submitit_timeout_min",
        "5",
        "--submitit_gpus_per_node",
        "1",
        "--ray_address",
        "auto",
        "--ray_num_cpus",
        "2",
        "--ray_num_gpus",
        "0",
        "--no_scratch",
    ],
    "run": ["run", "--config", "x-spt.yaml", "--finetune_config", "y.yaml", "--with_scratch"],
    "push": ["push", "runs/x", "--repo_id", "me/x", "--commit_message", "m"],
    "demo": ["demo", "--output_dir", "o"],
    "generate-data": [
        *("generate-data", "listops", "--output_dir", "o", "--num_train", "1", "--num_val", "1", "--num_test", "1"),
        *("--min_length", "2", "--max_length", "9", "--max_depth", "2", "--max_args", "3", "--value_p", "0.5"),
    ],
}


@pytest.mark.parametrize("command", list(SPELLINGS))
def test_options_are_underscored_and_the_hyphenated_spellings_are_aliases(command):
    from spt_hf.cli import build_parser

    parser = build_parser()
    underscored = SPELLINGS[command]
    hyphenated = [word.replace("_", "-") if word.startswith("--") else word for word in underscored]
    assert hyphenated != underscored
    new, rest = parser.parse_known_args(underscored)
    old, old_rest = parser.parse_known_args(hyphenated)
    assert rest == old_rest == [] and vars(new) == vars(old)
    if command == "compare":
        assert new.recipes_dir == "cpu" and new.max_parallel == 2 and new.with_scratch is False and new.dry_run
        for flag in ("--no-with-scratch", "--no_with_scratch", "--no-scratch"):
            assert parser.parse_known_args([*underscored[:5], flag])[0].with_scratch is False
        assert parser.parse_known_args([*underscored[:5], "--with-scratch"])[0].with_scratch is True
        assert parser.parse_known_args(underscored[:5])[0].with_scratch is None  # the spec's default decides


def test_recipe_overrides_keep_both_spellings_after_compares_own_options():
    from spt_hf.cli import build_parser
    from spt_hf.recipes.loading import parse_overrides

    args, rest = build_parser().parse_known_args(
        ["compare", "--tasks", "t", "--max-parallel", "2", "--eval-steps", "3"]
    )
    assert args.max_parallel == 2 and parse_overrides(rest) == {"eval_steps": 3}
    args, rest = build_parser().parse_known_args(
        ["compare", "--tasks", "t", "--max_parallel", "2", "--eval_steps", "3"]
    )
    assert args.max_parallel == 2 and parse_overrides(rest) == {"eval_steps": 3}


def test_the_demo_runs_one_phase_per_core_as_far_as_its_graph_allows(monkeypatch):
    """Its phases are too small for two threads to pay: as many at once as cores, each with one thread (the local
    launcher divides the cores), never more than the graph can run (SPT -> finetuning beside scratch, per seed)."""
    from spt_hf import demo

    seen = []

    class Stop(Exception):
        pass

    def capture(spec):
        seen.append(spec)
        raise Stop

    monkeypatch.setattr(demo, "run_compare", capture)
    for cores, seeds, expected in ((2, (0, 1, 2), 2), (16, (0, 1, 2), 6), (1, (0,), 1), (None, (0,), 1)):
        monkeypatch.setattr(demo.os, "cpu_count", lambda cores=cores: cores)
        with pytest.raises(Stop):
            demo.run_demo("unused", seeds=seeds)
        assert seen[-1].max_parallel == expected, (cores, seeds)


# Hyphenated flags of other programs that spt_hf's messages and docstrings legitimately quote.
THIRD_PARTY_FLAGS = {
    "--kill-on-invalid-dep": "Slurm's sbatch",
    "--local-dir": "`hf download`",
    "--s4-local-combine": "SPADE's released code",
}
HYPHENATED_OPTION = re.compile(r"(?<![\w-])--[a-z0-9_]+(?:-[a-z0-9_]+)+")


def hyphenated_options(source: str) -> list[str]:
    """The hyphenated `--option-spellings` in the string literals (messages, docstrings) of Python `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += HYPHENATED_OPTION.findall(node.value)
    return found


@pytest.mark.parametrize(
    "source, expected",
    [
        ('print("pass --submitit-partition NAME")', ["--submitit-partition"]),
        ('raise ValueError(f"use --repo-id {name}")', ["--repo-id"]),
        ('"""Or: spt-hf compare --accelerate-config a.yaml."""', ["--accelerate-config"]),
        ('print("pass --submitit_partition NAME")', []),
        ('print("spt-hf generate-data listops --output_dir d")', []),
        ("x = 1  # --comment-only", []),
    ],
)
def test_the_spelling_scan_finds_hyphenated_options_in_string_literals(source, expected):
    assert hyphenated_options(source) == expected


def test_messages_print_options_in_the_canonical_underscored_spelling():
    """Every option spt_hf names to a user is spelled with underscores, as the recipe keys are (the hyphenated
    spellings stay accepted as aliases, but are never suggested)."""
    found = {
        f"{path.relative_to(PACKAGE.parent)}: {option}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for option in hyphenated_options(path.read_text())
        if option not in THIRD_PARTY_FLAGS
    }
    assert not found


LOADS_NO_TORCH = """
import contextlib, io, sys
from spt_hf.cli import build_parser
for argv in ([], ["compare"], ["estimate"], ["report"], ["push"], ["recipes"], ["demo"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args([*argv, "--help"])
args = build_parser().parse_args(["spt", "--config", "x.yaml", "--help"])
heavy = ("torch", "transformers", "datasets", "accelerate", "spt_hf.training", "spt_hf.compare", "spt_hf.data")
print(sorted(name for name in sys.modules if name.startswith(heavy)), args.handler.__module__)
"""


def test_the_parser_and_the_help_of_the_commands_load_no_torch(tmp_path):
    """The commands import torch, transformers and the training code in their handlers: building the parser and
    printing the commands' help load none of them (generate-data declares its options when it is used). Run as the
    command (a script named spt-hf), whose package import leaves the models' registration for later."""
    (tmp_path / "spt-hf").write_text(LOADS_NO_TORCH)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "spt-hf")], capture_output=True, text=True, check=True, env=env
    )
    assert done.stdout.split() == ["[]", "spt_hf.commands.train"], done.stderr


@pytest.mark.parametrize(
    "argv, help_argv",
    [
        (["report", "runs/a"], ["report", "--help"]),
        (
            ["generate-data", "listops", "--num_train", "1", "--num_val", "1", "--num_test", "1"],
            ["generate-data", "listops", "--help"],
        ),
    ],
)
def test_out_still_names_the_output_folder_but_the_help_shows_output_dir(argv, help_argv, capsys):
    from spt_hf.cli import build_parser

    for flag in ("--output_dir", "--output-dir", "--out"):
        assert build_parser().parse_args([*argv, flag, "o"]).output_dir == "o"
    with pytest.raises(SystemExit):
        build_parser().parse_args(help_argv)
    out = capsys.readouterr().out
    assert "--output_dir" in out and not re.search(r"--out\b", out)


SPEC_VALUES = {  # (the --config YAML, the command line after `compare`, the comparison's keys expected)
    "yaml only": ({"tasks": ["digits"], "seeds": [0]}, [], {"tasks": ["digits"], "seeds": [0]}),
    "command line over yaml": ({"seeds": [0], "budget": "tied"}, ["--seeds", "1", "2"], {"seeds": [1, 2]}),
    "full training set": ({}, ["--num_train_examples", "100", "full"], {"num_train_examples": [100, None]}),
    "launcher options merged": (
        {"submitit": {"timeout_min": 5}},
        ["--submitit_partition", "p", "--ray_num_cpus", "2"],
        {"submitit": {"timeout_min": 5, "partition": "p"}, "ray": {"num_cpus": 2.0}},
    ),
    "recipe overrides merged": (
        {"overrides": {"learning_rate": 0.1}},
        ["--tasks", "digits", "--eval_steps", "3"],
        {"tasks": ["digits"], "overrides": {"learning_rate": 0.1, "eval_steps": 3}},
    ),
}


@pytest.mark.parametrize("case", list(SPEC_VALUES))
def test_compare_reads_its_yaml_then_the_command_line_over_it(case, tmp_path):
    from spt_hf.cli import build_parser
    from spt_hf.commands.compare import spec_values
    from spt_hf.compare import CompareSpec

    yaml_values, argv, expected = SPEC_VALUES[case]
    config = tmp_path / "compare.yaml"
    config.write_text(json.dumps(yaml_values))
    args, rest = build_parser().parse_known_args(["compare", "--config", str(config), *argv])
    values = spec_values(args, rest, CompareSpec.__dataclass_fields__)
    assert {key: values[key] for key in expected} == expected
    assert set(yaml_values) <= set(values) and values["overrides"] == expected.get("overrides", {})


def test_compare_refuses_an_unknown_key_of_its_yaml(tmp_path):
    from spt_hf.cli import build_parser
    from spt_hf.commands.compare import spec_values
    from spt_hf.compare import CompareSpec

    config = tmp_path / "compare.yaml"
    config.write_text("tasks: [digits]\nseed: 3\n")
    args, rest = build_parser().parse_known_args(["compare", "--config", str(config)])
    with pytest.raises(ValueError, match=r"Unknown comparison key\(s\) \['seed'\]"):
        spec_values(args, rest, CompareSpec.__dataclass_fields__)


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--device_memory_gb", "-5", "a positive number such as 80; got '-5'"),
        ("--device_memory_gb", "0", "a positive number such as 80; got '0'"),
        ("--device_memory_gb", "nan", "a positive number such as 80; got 'nan'"),
        ("--device_memory_gb", "inf", "a positive number such as 80; got 'inf'"),
        ("--max_measure_length", "0", "of at least 16 (measured at it, its half and quarter), such as 1024; got '0'"),
        ("--max_measure_length", "2", "of at least 16 (measured at it, its half and quarter), such as 1024; got '2'"),
    ],
)
@pytest.mark.parametrize("command", [["estimate"], ["spt", "--dry_run"], ["run", "--dry_run"]])
def test_estimate_options_out_of_range_are_refused_in_one_line(capsys, command, option, value, expected):
    with pytest.raises(SystemExit) as exit_:
        cli_main([*command, "--config", "cpu/listops-s4-spt.yaml", option, value])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert exit_.value.code == 2 and len(errors) == 1 and expected in errors[0] and option in errors[0]


def test_run_dry_run_estimates_both_phases_and_the_baseline(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--config", "cpu/listops-s4-spt.yaml", "--dry_run", "--with_scratch", "--max_steps", "3"]
    assert cli_main([*argv, "--output_dir", "out"]) == 0
    out = capsys.readouterr().out
    assert "| spt |" in out and "| finetune |" in out and "| scratch |" in out and "Total: 3 phases" in out
    assert out.count("| 3 | 32 x 1 |") == 3 and list(tmp_path.iterdir()) == []


CONSOLE_SCRIPT = "import sys\nfrom spt_hf.cli import main\nsys.exit(main())\n"  # what pip writes as bin/spt-hf


def imported_modules(argv: list[str], cwd: Path) -> tuple[int, set[str]]:
    """The exit status of `python -X importtime ARGV` and the modules it imported (importtime's report)."""
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=cwd, env=env)
    lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done.returncode, set(lines)


@pytest.mark.parametrize(
    "argv, status",
    [
        (["-m", "spt_hf", "--help"], 0),
        (["-m", "spt_hf", "compare", "--help"], 0),
        (["-m", "spt_hf", "no-such-command"], 2),
        (["-m", "spt_hf", "compare", "--seeds", "x"], 2),
        (["-m", "spt_hf.cli", "--help"], 0),
        (["spt-hf", "--help"], 0),  # the console script
    ],
)
def test_help_and_argument_errors_answer_without_importing_torch(argv, status, tmp_path):
    """The package defers registering the models (torch, transformers' models: seconds) in the command's own
    process until a command runs: --help and argument errors answer at once (benchmarks/bench_cli.py)."""
    if argv[0] == "spt-hf":
        (tmp_path / "spt-hf").write_text(CONSOLE_SCRIPT)
    code, modules = imported_modules(argv, tmp_path)
    assert code == status
    assert "spt_hf.commands" in modules and not modules & {"torch", "transformers", "spt_hf.modeling"}


REGISTERED = """
import sys
import spt_hf
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
before = "spt_s4" in CONFIG_MAPPING
print(before, spt_hf.S4Config is CONFIG_MAPPING["spt_s4"], "spt_s4" in CONFIG_MAPPING)
"""


@pytest.mark.parametrize("as_command", [False, True])
def test_importing_the_package_registers_the_models_except_in_the_commands_process(as_command, tmp_path):
    """`import spt_hf` registers (the README's and the model cards' usage); in the command's process the first read of
    a public name does, as `cli.main` does before a command runs."""
    script = tmp_path / ("spt-hf" if as_command else "user_script.py")
    script.write_text(REGISTERED)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.stdout.split() == [str(not as_command), "True", "True"], done.stderr[-2000:]


@pytest.mark.parametrize(
    "command, stopped, expected",
    [
        ("spt", "", "spt-hf spt: interrupted: the phase stopped; the same command resumes from the last checkpoint: "),
        ("run", "", "spt-hf run: interrupted: stopped; the same command resumes from the last checkpoint: "),
        ("compare", "stopped 1 running phase(s): t/a/full/seed0/spt", "spt-hf compare: interrupted: stopped 1 running"),
        ("report", "", "spt-hf report: interrupted."),
    ],
)
def test_an_interrupted_command_says_in_one_line_what_stopped_and_the_command_that_resumes(command, stopped, expected):
    from spt_hf.cli import interrupted_line

    argv = [command, "--config", "my recipe.yaml"]
    line = interrupted_line(command, argv, stopped)
    assert line.startswith(expected) and "\n" not in line
    resumes = command != "report"
    assert line.endswith(f": spt-hf {command} --config 'my recipe.yaml'") == resumes  # quoted as a shell takes it
