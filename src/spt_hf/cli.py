"""The `spt-hf` command (also `python -m spt_hf`): one argument parser tree, one function per sub-command.

    spt-hf spt --config RECIPE.yaml [--key value ...]        self-pretraining (alias: spt-hf pretrain)
    spt-hf finetune --config RECIPE.yaml [--key value ...]   finetuning from --model_name_or_path, or from scratch
    spt-hf run --config RECIPE-spt.yaml [--with_scratch]     SPT, finetuning (and the scratch baseline), the report
    spt-hf compare --tasks T... --architectures A... [...]   the comparison table over seeds, resumable
    spt-hf estimate --config RECIPE.yaml                     memory, FLOPs and steps of a phase (also --dry_run)
    spt-hf report RUN_DIR [RUN_DIR ...]                      the comparison table and plots of finished runs
    spt-hf push RUN_OR_CHECKPOINT_DIR --repo_id NAME         a checkpoint and its model card to the Hub
    spt-hf generate-data TASK --out DIR --num_train N ...    ListOps / Pathfinder data in the LRA layout
    spt-hf recipes [FOLDER]                                  the recipes shipped with spt_hf (path NAME: one file)
    spt-hf demo                                              the README's main job

RECIPE.yaml is a path or the name of a shipped recipe (`cpu/digits-transformer-spt.yaml`). Mistakes (a bad recipe,
a missing folder, a corrupted checkpoint) print one line saying what is wrong and how to fix it; `--debug` (or
SPT_HF_DEBUG=1) shows the traceback. Internal errors always show it.
"""

import argparse
import os
import sys
import traceback
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
USER_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    NotADirectoryError,
    FileExistsError,
    PermissionError,
    FloatingPointError,
    RuntimeError,
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "takes_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    debug = args.debug or os.environ.get("SPT_HF_DEBUG", "").lower() in ("1", "true", "yes")
    try:
        return args.handler(args, rest) or 0
    except Exception as error:
        if debug or not is_user_error(error):
            raise
        print(f"spt-hf {args.command}: error: {error}", file=sys.stderr)
        print("(--debug or SPT_HF_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def is_user_error(error: BaseException) -> bool:
    """A mistake of the user's that spt_hf itself diagnosed: an error of the kinds spt_hf raises with a message
    naming the problem and the fix, by a `raise` statement of spt_hf's own code. The same kinds of error raised
    anywhere else (inside a library, or by an operation of ours such as a failed lookup) are bugs: traceback."""
    if not isinstance(error, USER_ERRORS):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not Path(frames[-1].filename).resolve().is_relative_to(PACKAGE_DIR):
        return False
    return (frames[-1].line or "").lstrip().startswith("raise")


# ----------------------------------------------------------------------------------------------------------------
# The parser tree
# ----------------------------------------------------------------------------------------------------------------


def spellings(option: str) -> tuple[str, ...]:
    """An option's names: `--words_with_underscores`, the CLI's one convention (that of the recipe keys, which are
    TrainingArguments and config fields, and of transformers' own HfArgumentParser), then the hyphenated alias
    `--words-with-hyphens` (which spt_hf's own options used first; HfArgumentParser accepts it too)."""
    return (option, option.replace("_", "-")) if "_" in option else (option,)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of errors")
    parser = argparse.ArgumentParser(
        prog="spt-hf", description="Self-pretraining (SPT) of long-sequence models.", parents=[common]
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler, help: str, aliases=(), **kwargs) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, aliases=list(aliases), parents=[common], **kwargs)
        sub.set_defaults(handler=handler, command=name)
        return sub

    for name, aliases, text in (
        ("spt", ["pretrain"], "self-pretrain on the task's train split only (recipe <arch>-spt.yaml)"),
        ("finetune", [], "finetune from --model_name_or_path (an SPT checkpoint), or train from scratch without it"),
        ("run", [], "SPT, then finetuning from it (and --with_scratch: the scratch baseline), then the report"),
    ):
        sub = command(
            name,
            recipe_command,
            text,
            aliases,
            add_help=False,
            usage=f"spt-hf {name} --config RECIPE.yaml [--key value ...]",
        )
        sub.set_defaults(takes_overrides=True)
        sub.add_argument("-h", "--help", action="store_true", help="list every recipe key, in groups")
        sub.add_argument("--config", metavar="RECIPE.yaml", help="a recipe file or a shipped recipe's name")
        if name != "run":
            add_estimate_arguments(sub, "--dry_run", "estimate the phase (memory, FLOPs, steps) and train nothing")
        if name == "run":
            sub.add_argument(
                *spellings("--finetune_config"), metavar="RECIPE.yaml", help="default: <name>-finetune.yaml"
            )
            sub.add_argument(*spellings("--with_scratch"), action="store_true", help="also train the scratch baseline")

    estimate = command(
        "estimate",
        estimate_command,
        "what the phase of a recipe will cost: one real step measured, scaled to the recipe's batch and steps",
        usage="spt-hf estimate --config RECIPE.yaml [--device_memory_gb 80] [--key value ...]",
    )
    estimate.set_defaults(takes_overrides=True)
    estimate.add_argument("--config", required=True, metavar="RECIPE.yaml", help="a recipe file or a shipped name")
    add_estimate_arguments(estimate)

    text = "the comparison table (tasks x architectures x seeds, scratch and SPT), run or resumed, then the report"
    # No abbreviations: a trailing recipe key such as `--seed 3` must not silently become `--seeds 3`, it is refused.
    add_compare_arguments(command("compare", compare_command, text, allow_abbrev=False))

    report = command("report", report_command, "Markdown table and PNG plots of finished run folders")
    report.add_argument("run_dirs", nargs="+", help="folders holding results.json files")
    report.add_argument("--out", help="where report.md and the plots go (default: the first folder)")

    push = command("push", push_command, "push a checkpoint folder, or one phase of a run folder, to the Hub")
    push.add_argument("path", help="a checkpoint folder (config.json + model.safetensors) or a `spt-hf run` folder")
    push.add_argument(
        *spellings("--repo_id"), required=True, help="the Hub repository, NAMESPACE/NAME (created if needed)"
    )
    push.add_argument("--phase", choices=("spt", "finetune", "scratch"), help="the phase of a run folder (default spt)")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.add_argument("--revision", help="push to this branch (created from main if it does not exist)")
    push.add_argument(*spellings("--commit_message"), help="the commit message (default: phase and steps)")

    generate = command("generate-data", generate_command, "write ListOps / Pathfinder / PathX data in the LRA layout")
    add_generate_arguments(generate, common)

    recipes = command("recipes", recipes_command, "list the recipes shipped with spt_hf, or print one's path")
    recipes.add_argument(
        "what",
        nargs="*",
        metavar="FOLDER | path NAME",
        help="a folder (cpu, listops, ...), or `path NAME` to print the file of one recipe (for `accelerate launch "
        "--config_file`)",
    )

    demo = command(
        "demo",
        demo_command,
        "the README's main job: SPT vs scratch on real offline data; trailing "
        "--key value pairs override recipe keys in every phase",
    )
    demo.set_defaults(takes_overrides=True)
    demo.add_argument(*spellings("--output_dir"), default="runs/demo")
    demo.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    demo.add_argument("--architectures", nargs="+", default=["transformer"])
    return parser


def add_estimate_arguments(parser: argparse.ArgumentParser, flag: str | None = None, text: str = "") -> None:
    if flag:
        parser.add_argument(*spellings(flag), action="store_true", help=text)
    parser.add_argument(
        *spellings("--device_memory_gb"), type=float, default=80.0, help="memory of one device (default 80)"
    )
    parser.add_argument(
        *spellings("--max_measure_length"),
        type=int,
        help="measure longer tasks at this length, its half and quarter and extrapolate (faster, approximate; "
        "default: every task at its full length)",
    )


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(takes_overrides=True)
    parser.add_argument("--config", metavar="COMPARE.yaml", help="the comparison as YAML (keys: the options below)")
    parser.add_argument("--tasks", nargs="+", help="tasks, as in the recipe names (listops, text, digits, ...)")
    parser.add_argument("--architectures", nargs="+", help="architectures, as in the recipe names (s4, dlr, ...)")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (default 0 1 2)")
    parser.add_argument(*spellings("--recipes_dir"), help="recipes (the paper's, default), recipes/cpu, or a folder")
    parser.add_argument(*spellings("--output_dir"), help="run folders and the report (default runs/compare)")
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
    parser.add_argument("--budget", choices=("equal", "tied"), help="default: as the recipes say (total_steps)")
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
    add_estimate_arguments(parser)
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


def add_generate_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from .data.generators import PATHFINDER_FLOATS, PATHFINDER_RESOLUTIONS

    tasks = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    defaults = argparse.ArgumentDefaultsHelpFormatter

    def task(name: str, text: str) -> argparse.ArgumentParser:
        sub = tasks.add_parser(name, help=text, formatter_class=defaults, parents=[common])
        sub.add_argument("--out", required=True, help="output folder (created if missing)")
        sub.add_argument(*spellings("--num_train"), type=int, required=True, help="training examples")
        sub.add_argument(*spellings("--num_val"), type=int, required=True, help="validation examples")
        sub.add_argument(*spellings("--num_test"), type=int, required=True, help="test examples")
        sub.add_argument("--seed", type=int, default=0, help="random seed (same seed, same files)")
        return sub

    listops = task("listops", "LRA ListOps: basic_{train,val,test}.tsv")
    listops.add_argument(*spellings("--min_length"), type=int, default=500, help="keep trees longer than this")
    listops.add_argument(*spellings("--max_length"), type=int, default=2000, help="keep trees shorter than this")
    listops.add_argument(*spellings("--max_depth"), type=int, default=10, help="nodes at this depth are leaves")
    listops.add_argument(*spellings("--max_args"), type=int, default=10, help="most arguments of an operator")
    listops.add_argument(*spellings("--value_p"), type=float, default=0.25, help="probability of an operator node")
    for name, resolution in PATHFINDER_RESOLUTIONS.items():
        sub = task(name, f"Pathfinder images ({resolution} px by default) in the LRA layout")
        sub.add_argument("--resolution", type=int, default=resolution, help="canvas side in pixels")
        sub.add_argument(
            *spellings("--contour_length"), type=int, default=14, help="paddles per target snake (14, 9, 6)"
        )
        for field in PATHFINDER_FLOATS:
            sub.add_argument(*spellings(f"--{field}"), type=float, help=f"override LRA's {field}")
        sub.add_argument(*spellings("--images_per_batch"), type=int, default=1000, help="images per imgs/<b> folder")
        sub.add_argument("--workers", type=int, default=1, help="processes drawing images")


# ----------------------------------------------------------------------------------------------------------------
# Sub-commands
# ----------------------------------------------------------------------------------------------------------------


def recipe_command(args, rest: list[str]) -> int:
    from .training.arguments import SPT_PHASE_SWITCHES, argument_parser
    from .training.recipes import load_recipe, parse_overrides

    if args.help:
        parser = argument_parser(args.command)
        parser.add_argument(
            "--config",
            metavar="RECIPE.yaml",
            help="a recipe file, or a shipped recipe's name such as "
            "cpu/digits-transformer-spt.yaml (`spt-hf recipes` lists them)",
        )
        if args.command == "run":
            parser.add_argument(
                *spellings("--finetune_config"), metavar="RECIPE.yaml", help="default: <name>-finetune.yaml"
            )
            parser.add_argument(
                *spellings("--with_scratch"), action="store_true", help="also train the scratch baseline"
            )
        parser.print_help()
        return 0
    if args.config is None:
        raise ValueError(
            f"`spt-hf {args.command}` needs --config RECIPE.yaml (`spt-hf recipes` lists the shipped ones)."
        )
    overrides = parse_overrides(rest)
    from .training import pipeline
    from .training.trainer import SaveOnSignal

    SaveOnSignal.catch_early()  # a Slurm job's time-limit signal: save a checkpoint and stop, never die unsaved

    if getattr(args, "dry_run", False):
        phase = "spt" if args.command == "spt" else "finetune"
        return print_estimate(load_recipe(args.config, overrides, phase=phase), args, phase)
    if args.command == "spt":
        pipeline.pretrain(load_recipe(args.config, overrides, phase="spt"))
    elif args.command == "finetune":
        pipeline.finetune(load_recipe(args.config, overrides, phase="finetune"))
    else:
        from .training.report import report

        spt_path, finetune_path = sibling_recipes(args.config, args.finetune_config)
        spt_recipe = load_recipe(spt_path, overrides, phase="spt")
        finetune_overrides = {k: v for k, v in overrides.items() if k not in SPT_PHASE_SWITCHES}
        finetune_recipe = load_recipe(finetune_path, finetune_overrides, phase="finetune")
        pipeline.refuse_ignored_max_steps(spt_recipe, overrides)
        result = pipeline.run(spt_recipe, finetune_recipe, args.with_scratch)
        print(report([result["run_dir"]]))
    return 0


def print_estimate(recipe, args, phase: str) -> int:
    from .training.estimate import estimate_phase, format_estimates

    if phase != "spt":
        phase = "finetune" if recipe.model.model_name_or_path else "scratch"
    print(format_estimates([estimate_phase(recipe, phase, args.device_memory_gb, args.max_measure_length)]))
    return 0


def estimate_command(args, rest) -> int:
    from .training.recipes import find_recipe, load_recipe, parse_overrides

    path = find_recipe(args.config)
    phase = "spt" if path.stem.endswith("-spt") else "finetune"
    return print_estimate(load_recipe(path, parse_overrides(rest), phase=phase), args, phase)


def sibling_recipes(config: str, finetune_config: str | None) -> tuple[str, str]:
    """The SPT recipe and its finetuning sibling (`x-spt.yaml` <-> `x-finetune.yaml`) of the one recipe given to
    `spt-hf run` (either of the two), or the two given."""
    from .training.recipes import find_recipe

    path = find_recipe(config)
    if path.stem.endswith("-finetune") and finetune_config is None:
        return str(path.with_name(path.name.replace("-finetune", "-spt"))), str(path)
    if finetune_config is None:
        if not path.stem.endswith("-spt"):
            raise ValueError(
                f"Cannot find the finetuning recipe of {path}: name it <x>-spt.yaml or pass --finetune_config."
            )
        finetune_config = str(path.with_name(path.name.replace("-spt", "-finetune")))
    return str(path), str(find_recipe(finetune_config))


def compare_command(args, rest) -> int:
    from .compare import CompareSpec, run_compare
    from .training.recipes import parse_overrides, read_recipe_file

    values = read_recipe_file(Path(args.config)) if args.config else {}
    nested = ("num_train_examples", "overrides", "task_overrides", "submitit", "ray")  # (read below, or YAML only)
    for key in CompareSpec.__dataclass_fields__:
        if key not in nested and getattr(args, key, None) is not None:
            values[key] = getattr(args, key)
    if args.num_train_examples is not None:
        values["num_train_examples"] = [None if n == "full" else int(n) for n in args.num_train_examples]
    for prefix in ("submitit", "ray"):
        extra = {k.removeprefix(prefix + "_"): v for k, v in vars(args).items() if k.startswith(prefix + "_")}
        values[prefix] = {**values.get(prefix, {}), **{k: v for k, v in extra.items() if v is not None}}
    values["overrides"] = {**values.get("overrides", {}), **parse_overrides(rest)}
    unknown = sorted(set(values) - set(CompareSpec.__dataclass_fields__))
    if unknown:
        raise ValueError(f"Unknown comparison key(s) {unknown}; allowed: {sorted(CompareSpec.__dataclass_fields__)}.")
    if args.cancel:
        from .compare.slurm import cancel_recorded

        output_dir = values.get("output_dir", CompareSpec.__dataclass_fields__["output_dir"].default)
        ids = cancel_recorded(output_dir)
        print(f"compare: cancelled {len(ids)} Slurm job(s) of {output_dir}{': ' + ' '.join(ids) if ids else ''}")
        return 0
    if "tasks" not in values or "architectures" not in values:
        raise ValueError("`spt-hf compare` needs --tasks and --architectures (or a --config YAML that lists them).")
    if args.estimate and not args.dry_run:
        raise ValueError("--estimate goes with --dry_run (the estimate of a plan, before anything runs).")
    result = run_compare(CompareSpec(**values), dry_run=args.dry_run)
    if args.estimate:
        from .training.estimate import estimate_jobs, format_estimates

        estimates, skipped = estimate_jobs(result.plan, args.device_memory_gb, args.max_measure_length)
        print(format_estimates(estimates))
        for job_id, why in skipped.items():
            print(f"estimate: {job_id}: not estimated: {why}")
    if not args.dry_run:
        print(result.report)
    return 0 if args.dry_run or result.ok else 1


def report_command(args, rest) -> int:
    from .training.report import report

    print(report(args.run_dirs, args.out))
    return 0


def push_command(args, rest) -> int:
    from .hub.push import RUN_PHASES, push_checkpoint, resolve_push_folder

    folder = resolve_push_folder(args.path, args.phase)
    url = push_checkpoint(
        folder, args.repo_id, private=args.private, revision=args.revision, commit_message=args.commit_message
    )
    print(f"Pushed {folder} to {args.repo_id}{'@' + args.revision if args.revision else ''}: {url}")
    others = [name for name in RUN_PHASES if folder.parent / name != folder and (folder.parent / name).is_dir()]
    if folder.name in RUN_PHASES and others:
        hint = f"spt-hf push {folder.parent} --phase {others[0]} --repo_id NAMESPACE/OTHER_NAME"
        print(f"{folder.parent} also has {', '.join(others)}/ (push each to its own repository: {hint}).")
    return 0


def generate_command(args, rest) -> int:
    import time

    from tqdm.auto import tqdm

    from .data.generators import check_generate_options, generate_data

    options = {
        key: value
        for key, value in vars(args).items()
        if key not in ("command", "handler", "debug", "task", "out", "num_train", "num_val", "num_test", "seed")
        and value is not None
    }
    check_generate_options(args.task, args.num_train, args.num_val, args.num_test, **options)
    total = args.num_train + args.num_val + args.num_test
    start = time.perf_counter()
    with tqdm(total=max(total, 0), desc=f"generate {args.task}", unit="ex") as bar:
        folder = generate_data(
            args.task,
            args.out,
            args.num_train,
            args.num_val,
            args.num_test,
            seed=args.seed,
            progress=bar.update,
            **options,
        )
    seconds = time.perf_counter() - start
    print(f"wrote {total} {args.task} examples to {folder} in {seconds:.1f} s ({total / seconds:.0f} examples/s)")
    return 0


def recipes_command(args, rest) -> int:
    from .training.recipes import find_recipe, list_recipes

    if args.what[:1] == ["path"]:
        if len(args.what) != 2:
            raise ValueError("usage: spt-hf recipes path NAME (e.g. accelerate/multi_gpu.yaml)")
        print(find_recipe(args.what[1]).resolve())
        return 0
    for name in list_recipes(args.what[0] if args.what else None):
        print(name)
    return 0


def demo_command(args, rest) -> int:
    from .demo import run_demo
    from .training.recipes import parse_overrides

    run_demo(args.output_dir, seeds=args.seeds, architectures=args.architectures, overrides=parse_overrides(rest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
