"""`spt-hf generate-data TASK`: ListOps, Pathfinder and PathX data written in the LRA layout, one sub-command per
task. Its options are declared when the command is used: their defaults live in spt_hf.data, whose import loads
torch."""

import argparse
from functools import partial

from .options import DISPATCH_KEYS, add_command, add_output_dir, spellings

# The options every task has; the handler passes the others on to the task's generator.
COMMON_OPTIONS = ("output_dir", "num_train", "num_val", "num_test", "seed")


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "write ListOps / Pathfinder / PathX data in the LRA layout"
    add_command(commands, common, "generate-data", generate_command, text, declare=partial(add_tasks, common=common))


def add_tasks(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from ..data.generators import PATHFINDER_FLOATS
    from ..data.tasks import GENERATED_TASKS, TASKS

    tasks = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    listops = add_task(tasks, common, "listops", "LRA ListOps: basic_{train,val,test}.tsv")
    listops.add_argument(*spellings("--min_length"), type=int, default=500, help="keep trees longer than this")
    listops.add_argument(*spellings("--max_length"), type=int, default=2000, help="keep trees shorter than this")
    listops.add_argument(*spellings("--max_depth"), type=int, default=10, help="nodes at this depth are leaves")
    listops.add_argument(*spellings("--max_args"), type=int, default=10, help="most arguments of an operator")
    listops.add_argument(*spellings("--value_p"), type=float, default=0.25, help="probability of an operator node")
    for name in (task for task in GENERATED_TASKS if TASKS[task].GENERATOR == "pathfinder"):
        resolution = TASKS[name].resolution
        sub = add_task(tasks, common, name, f"Pathfinder images ({resolution} px by default) in the LRA layout")
        sub.add_argument("--resolution", type=int, default=resolution, help="canvas side in pixels")
        sub.add_argument(
            *spellings("--contour_length"), type=int, default=14, help="paddles per target snake (14, 9, 6)"
        )
        for field in PATHFINDER_FLOATS:
            sub.add_argument(*spellings(f"--{field}"), type=float, help=f"override LRA's {field}")
        sub.add_argument(*spellings("--images_per_batch"), type=int, default=1000, help="images per imgs/<b> folder")
        sub.add_argument("--workers", type=int, default=1, help="processes drawing images")


def add_task(tasks, common: argparse.ArgumentParser, name: str, text: str) -> argparse.ArgumentParser:
    """The sub-command of one task, with the options every task has."""
    parser = tasks.add_parser(name, help=text, formatter_class=argparse.ArgumentDefaultsHelpFormatter, parents=[common])
    add_output_dir(parser, "output folder (created if missing)", required=True)
    parser.add_argument(*spellings("--num_train"), type=int, required=True, help="training examples")
    parser.add_argument(*spellings("--num_val"), type=int, required=True, help="validation examples")
    parser.add_argument(*spellings("--num_test"), type=int, required=True, help="test examples")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same files)")
    return parser


def generate_command(args, rest: list[str]) -> int:
    import time

    from tqdm.auto import tqdm

    from ..data.generators import check_generate_options, generate_data

    not_options = (*DISPATCH_KEYS, "debug", "task", *COMMON_OPTIONS)
    options = {key: value for key, value in vars(args).items() if key not in not_options and value is not None}
    check_generate_options(args.task, args.num_train, args.num_val, args.num_test, **options)
    total = args.num_train + args.num_val + args.num_test
    start = time.perf_counter()
    with tqdm(total=max(total, 0), desc=f"generate {args.task}", unit="ex") as bar:
        folder = generate_data(
            args.task,
            args.output_dir,
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
