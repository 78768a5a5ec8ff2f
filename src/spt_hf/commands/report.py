"""`spt-hf report`: the Markdown table and PNG plots of finished run folders, or of a comparison on the Hub."""

import argparse

from .options import add_command, add_output_dir


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    parser = add_command(
        commands, common, "report", report_command, "Markdown table and PNG plots of finished run folders"
    )
    parser.add_argument("run_dirs", nargs="*", help="folders holding results.json files")
    parser.add_argument(
        "--from_hub",
        metavar="NAMESPACE/NAME",
        help="rebuild the report of a comparison pushed with `spt-hf push --comparison` from its dataset repository",
    )
    parser.add_argument("--revision", help="with --from_hub: the dataset repository's branch, tag or commit")
    add_output_dir(parser, "where report.md and the plots go (default: the first folder; with --from_hub: ./NAME)")


def report_command(args, rest: list[str]) -> int:
    from ..report.comparison import report
    from ..report.rows import find_results

    if args.from_hub is not None:
        if args.run_dirs:
            raise ValueError(f"--from_hub reads the comparison from the Hub; leave out the folders {args.run_dirs}.")
        return report_from_hub(args)
    if not args.run_dirs:
        raise ValueError("spt-hf report needs run folders (the --output_dir of runs) or --from_hub NAMESPACE/NAME.")
    if not find_results(args.run_dirs):  # (compare's report of phases that all failed is still written)
        raise FileNotFoundError(
            f"No results.json of a finished phase under {', '.join(args.run_dirs)}: give the --output_dir of a run "
            "(`spt-hf spt`, `finetune`, `run` or `compare`) whose phases finished; nothing was written."
        )
    print(report(args.run_dirs, args.output_dir))
    return 0


def report_from_hub(args) -> int:
    """The report of a pushed comparison, from the results and settings in its dataset repository alone."""
    from pathlib import Path

    from ..hub.comparison import fetch_published
    from ..report.comparison import report

    out = Path(args.output_dir or args.from_hub.split("/")[-1])
    fetched = fetch_published(args.from_hub, out / "hub", revision=args.revision)
    print(report([fetched], out))
    return 0
