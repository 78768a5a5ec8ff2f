"""`spt-hf compare`: the comparison table (tasks x architectures x seeds, scratch and SPT), run or resumed on a
launcher (local processes, Slurm through submitit, Ray), then the report. Options come from the command line, a
`--config` YAML, or both (the command line wins); trailing `--key value` pairs override recipe keys in every phase."""

import argparse
from pathlib import Path

from .estimate import add_estimate_options
from .options import add_command, spellings
from .recipes import add_task_recipe_options

# The CompareSpec fields that are not plain options: read from their own options below, or from the YAML only.
NESTED_FIELDS = ("num_train_examples", "overrides", "task_overrides", "submitit", "ray")
LAUNCHER_PREFIXES = ("submitit", "ray")  # `--submitit_x` and `--ray_x` are the spec's `submitit: {x: ...}`, `ray: ...`


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "the comparison table (tasks x architectures x seeds, scratch and SPT), run or resumed, then the report"
    # No abbreviations: a trailing recipe key such as `--seed 3` must not silently become `--seeds 3`, it is refused.
    parser = add_command(commands, common, "compare", compare_command, text, takes_overrides=True, allow_abbrev=False)
    add_plan_options(parser)
    add_tune_options(parser)
    add_launcher_options(parser)


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """What to compare and how to run it: the table, the budgets, the dry run and its estimate."""
    parser.add_argument("--config", metavar="COMPARE.yaml", help="the comparison as YAML (keys: the options below)")
    parser.add_argument("--tasks", nargs="+", help="tasks, as in the recipe names (listops, text, digits, ...)")
    add_task_recipe_options(parser, several=True)
    parser.add_argument("--architectures", nargs="+", help="architectures, as in the recipe names (s4, dlr, ...)")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (default 0 1 2)")
    parser.add_argument(
        *spellings("--recipes_dir"),
        help="a folder of recipe pairs, or a shipped one by name (cpu); default: the shipped paper recipes, whatever "
        "folders the working directory holds",
    )
    parser.add_argument(*spellings("--output_dir"), help="run folders and the report (default runs/compare)")
    parser.add_argument(
        "--extends",
        metavar="NAMESPACE/NAME",
        help="add the architectures to a comparison pushed with `spt-hf push --comparison` (its settings kept)",
    )
    parser.add_argument(
        *spellings("--with_scratch"), action="store_true", default=None, help="train the baseline phase too (default)"
    )
    parser.add_argument(
        *spellings("--no_scratch"),
        *spellings("--no_with_scratch"),
        dest="with_scratch",
        action="store_false",
        default=None,
        help="leave the baseline phase out",
    )
    parser.add_argument(*spellings("--num_train_examples"), nargs="+", help="training set sizes (`full` for all of it)")
    parser.add_argument(
        *spellings("--skip_missing_pairs"),
        action="store_true",
        default=None,
        help="plan every task x architecture that has recipes; list the others instead of refusing",
    )
    parser.add_argument(
        "--budget",
        choices=("equal", "tied"),
        help="one rule for every architecture (default: tied with --task_config, else as the recipes say)",
    )
    parser.add_argument(
        *spellings("--early_stopping_patience"),
        type=int,
        help="stop every phase of every arm after K evaluations without improvement; the budget becomes a cap",
    )
    parser.add_argument("--launcher", choices=("local", "submitit", "ray"))
    parser.add_argument(
        *spellings("--max_parallel"), type=int, help="phases at once (local; on Slurm: jobs queued or running)"
    )
    parser.add_argument(
        *spellings("--dry_run"), action="store_true", help="print the plan and what is finished; run nothing"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="with --dry_run: each phase's memory, FLOPs and verdict, and the plan's GPU-hours (measured steps)",
    )
    add_estimate_options(parser)


def add_tune_options(parser: argparse.ArgumentParser) -> None:
    """`--tune`: the same hyperparameter search for every (task, architecture, arm) first (docs/compare.md)."""
    parser.add_argument(
        "--tune", action="store_true", default=None, help="search each arm's hyperparameters first (Optuna, TPE)"
    )
    parser.add_argument(*spellings("--tune_trials"), type=int, help="trials per task x architecture x arm (10)")
    parser.add_argument(
        *spellings("--tune_space"), metavar="SPACE.yaml", help="recipe key -> {type, low, high, log, choices}"
    )
    parser.add_argument(
        *spellings("--tune_storage"), metavar="URL", help="the studies' database (default sqlite OUTPUT_DIR/tuning.db)"
    )
    parser.add_argument(*spellings("--tune_max_steps"), type=int, help="steps of each trial (default: the phase's)")
    parser.add_argument(
        *spellings("--tune_pruner"),
        metavar="PRUNER",
        help="median: stop a trial at an evaluation below the median of its study's earlier trials (default none)",
    )
    parser.add_argument(
        *spellings("--tune_spt"),
        action="store_true",
        default=None,
        help="each SPT-arm trial an SPT + finetune pair, SPT's optimiser settings searched too",
    )


def add_launcher_options(parser: argparse.ArgumentParser) -> None:
    """Where the phases run: under accelerate, on Slurm (submitit) or on Ray."""
    parser.add_argument(
        *spellings("--accelerate_config"),
        help="run each phase under `accelerate launch --config_file` this (any launcher)",
    )
    parser.add_argument(*spellings("--submitit_cluster"), choices=("slurm", "local", "debug"), help="default slurm")
    parser.add_argument(*spellings("--submitit_partition"), help="Slurm partition")
    parser.add_argument(*spellings("--submitit_timeout_min"), type=int, help="Slurm time limit per phase, minutes")
    parser.add_argument(
        *spellings("--submitit_gpus_per_node"), type=int, help="GPUs per machine of a phase (a process each)"
    )
    parser.add_argument(*spellings("--submitit_nodes"), type=int, help="machines per phase (default 1)")
    parser.add_argument(*spellings("--submitit_qos"), help="Slurm QOS of the jobs")
    parser.add_argument(*spellings("--submitit_account"), help="Slurm account of the jobs")
    parser.add_argument(
        "--cancel", action="store_true", help="cancel the Slurm jobs of this comparison still queued or running"
    )
    parser.add_argument(*spellings("--ray_address"), help="a running Ray cluster (default: a local instance)")
    parser.add_argument(*spellings("--ray_num_cpus"), type=float, help="CPUs per phase (default 1)")
    parser.add_argument(*spellings("--ray_num_gpus"), type=float, help="GPUs per phase, a process each (default 0)")


def spec_values(args, rest: list[str], fields) -> dict:
    """The comparison's keys: the `--config` YAML, then the options given on the command line over it, the
    launchers' options into their own mappings, the trailing `--key value` pairs into `overrides`, and `tune` with
    the `tune_*` keys into one `TuneSpec` (or None)."""
    from ..recipes.loading import parse_overrides, read_recipe_file
    from ..tuning import TUNE_OPTIONS, TuneSpec

    values = task_files_key(read_recipe_file(Path(args.config)) if args.config else {})
    if args.task_config is not None:
        values["task_configs"] = args.task_config
    for key in [*fields, *TUNE_OPTIONS]:
        if key not in NESTED_FIELDS and getattr(args, key, None) is not None:
            values[key] = getattr(args, key)
    if args.num_train_examples is not None:
        values["num_train_examples"] = [None if n == "full" else int(n) for n in args.num_train_examples]
    for prefix in LAUNCHER_PREFIXES:
        extra = {k.removeprefix(prefix + "_"): v for k, v in vars(args).items() if k.startswith(prefix + "_")}
        values[prefix] = {**values.get(prefix, {}), **{k: v for k, v in extra.items() if v is not None}}
    values["overrides"] = {**values.get("overrides", {}), **parse_overrides(rest)}
    unknown = sorted(set(values) - set(fields) - set(TUNE_OPTIONS))
    if unknown:
        raise ValueError(f"Unknown comparison key(s) {unknown}; allowed: {sorted([*fields, *TUNE_OPTIONS])}.")
    values["tune"] = TuneSpec.from_options(values)
    return values


def task_files_key(values: dict) -> dict:
    """A compare YAML's task files under `task_configs` (a list), `task_config:` (one file, or a list) read as it."""
    if "task_config" in values:
        if "task_configs" in values:
            raise ValueError("The compare YAML gives `task_config` and `task_configs`: list every task file under one.")
        values["task_configs"] = values.pop("task_config")
    if isinstance(values.get("task_configs"), str):
        values["task_configs"] = [values["task_configs"]]
    return values


def compare_command(args, rest: list[str]) -> int:
    from ..compare import CompareSpec, run_compare

    fields = CompareSpec.__dataclass_fields__
    values = spec_values(args, rest, fields)
    if args.cancel:
        from ..compare.slurm import cancel_recorded

        output_dir = values.get("output_dir", fields["output_dir"].default)
        ids = cancel_recorded(output_dir)
        print(f"compare: cancelled {len(ids)} Slurm job(s) of {output_dir}{': ' + ' '.join(ids) if ids else ''}")
        return 0
    if not ("tasks" in values or "task_configs" in values) or "architectures" not in values:
        raise ValueError(
            "`spt-hf compare` needs --tasks (or --task_config TASK.yaml ...) and --architectures (or a --config YAML "
            "that lists them)."
        )
    if args.estimate and not args.dry_run:
        raise ValueError("--estimate goes with --dry_run (the estimate of a plan, before anything runs).")
    spec = CompareSpec(**values)
    result = run_compare(spec, dry_run=args.dry_run)
    if args.estimate:
        from ..compare.estimate import estimate_jobs
        from ..training.estimate import format_estimates

        estimates, skipped = estimate_jobs(result.plan, args.device_memory_gb, args.max_measure_length)
        if spec.tune is not None:  # the search's trial phases, in the same table and totals (compare/tune.py)
            estimates, skipped = add_search_estimates(spec, result.plan, estimates, skipped, args)
        print(format_estimates(estimates))
        for job_id, why in skipped.items():
            print(f"estimate: {job_id}: not estimated: {why}")
    if not args.dry_run:
        print(result.report)
    return 0 if args.dry_run or result.ok else 1


def add_search_estimates(spec, jobs: list, estimates: list, skipped: dict, args) -> tuple[list, dict]:
    """The estimate of a tuned comparison: the search's trial phases added to the table, and a line saying whether
    the seeded phases were costed with the search's chosen values (`tuning.json`) or, before the search has chosen
    them, with their recipes' values."""
    from ..compare.tune import search_estimates

    waiting = sorted({job.awaits for job in jobs if job.awaits})
    if waiting:
        print(
            "estimate: the seeded phases are costed with their recipes' values: the search has not chosen its values "
            f"yet ({', '.join(waiting)})"
        )
    else:
        print("estimate: the seeded phases are costed with the values the search chose (tuning.json)")
    search, search_skipped = search_estimates(spec, jobs, args.device_memory_gb, args.max_measure_length)
    print(f"tune: the search: {sum(e.train_flops for e in search):.3g} of the table's training FLOPs")
    return estimates + search, {**skipped, **search_skipped}
