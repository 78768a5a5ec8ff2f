"""``spt-hf generate-data``: write ListOps or Pathfinder/PathX data in the LRA layout, which ``load_task`` reads.

Examples::

    spt-hf generate-data listops --out data/listops --num-train 2000 --num-val 200 --num-test 200 \\
        --min-length 40 --max-length 120 --max-depth 6 --max-args 6
    spt-hf generate-data pathfinder --out data/pf --num-train 800 --num-val 100 --num-test 100 --workers 2
"""

from __future__ import annotations

import argparse
import sys
import time

from tqdm.auto import tqdm

from .listops_gen import write_listops_splits
from .pathfinder_gen import PathfinderParams, write_pathfinder_splits

PATHFINDER_RESOLUTIONS = {"pathfinder": 32, "pathx": 128, "pathx256": 256}
PATHFINDER_FLOATS = ("paddle_length", "paddle_thickness", "paddle_margin", "marker_radius", "seed_distance",
                     "continuity", "distractor_paddles")  # fmt: skip


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--num-train", type=int, required=True, help="training examples")
    parser.add_argument("--num-val", type=int, required=True, help="validation examples")
    parser.add_argument("--num-test", type=int, required=True, help="test examples")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same files)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``spt-hf generate-data``."""
    parser = argparse.ArgumentParser(
        prog="spt-hf generate-data",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    tasks = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    listops = tasks.add_parser(
        "listops",
        help="LRA ListOps: basic_{train,val,test}.tsv",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _common(listops)
    listops.add_argument("--min-length", type=int, default=500, help="keep trees longer than this")
    listops.add_argument("--max-length", type=int, default=2000, help="keep trees shorter than this")
    listops.add_argument("--max-depth", type=int, default=10, help="nodes at this depth are leaves")
    listops.add_argument("--max-args", type=int, default=10, help="most arguments of an operator")
    listops.add_argument("--value-p", type=float, default=0.25, help="probability of an operator node")
    for name, res in PATHFINDER_RESOLUTIONS.items():
        sub = tasks.add_parser(
            name,
            help=f"Pathfinder images ({res} px by default) in the LRA layout",
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        _common(sub)
        sub.add_argument("--resolution", type=int, default=res, help="canvas side in pixels")
        sub.add_argument("--contour-length", type=int, default=14, help="paddles per target snake (14, 9, 6)")
        for field in PATHFINDER_FLOATS:
            sub.add_argument(
                f"--{field.replace('_', '-')}",
                type=float,
                default=None,
                help=f"override LRA's {field} for the resolution",
            )
        sub.add_argument("--images-per-batch", type=int, default=1000, help="images per imgs/<b> folder")
        sub.add_argument("--workers", type=int, default=1, help="processes drawing images")
    return parser


def generate_data_main(argv: list[str] | None = None) -> int:
    """Entry point of ``spt-hf generate-data``; returns the process exit code."""
    args = build_parser().parse_args(argv)
    total = args.num_train + args.num_val + args.num_test
    if min(args.num_train, args.num_val, args.num_test) < 1:
        print("spt-hf generate-data: --num-train, --num-val and --num-test must each be at least 1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    with tqdm(total=total, desc=f"generate {args.task}", unit="ex") as bar:
        if args.task == "listops":
            bounds = dict(
                min_length=args.min_length,
                max_length=args.max_length,
                max_depth=args.max_depth,
                max_args=args.max_args,
                value_p=args.value_p,
            )
            paths = write_listops_splits(
                args.out, args.num_train, args.num_val, args.num_test, seed=args.seed, progress=bar.update, **bounds
            )
            where = str(paths["train"].parent)
        else:
            overrides = {f: getattr(args, f) for f in PATHFINDER_FLOATS if getattr(args, f) is not None}
            params = PathfinderParams.for_resolution(args.resolution, contour_length=args.contour_length, **overrides)
            where = str(
                write_pathfinder_splits(
                    args.out,
                    args.num_train,
                    args.num_val,
                    args.num_test,
                    params,
                    seed=args.seed,
                    images_per_batch=args.images_per_batch,
                    workers=args.workers,
                    progress=bar.update,
                )
            )
    seconds = time.perf_counter() - start
    print(f"wrote {total} {args.task} examples to {where} in {seconds:.1f} s ({total / seconds:.0f} examples/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(generate_data_main())
