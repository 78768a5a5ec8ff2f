"""`spt-hf report`: the Markdown table and PNG plots of finished run folders."""

import argparse

from .options import add_command, add_output_dir


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    parser = add_command(
        commands, common, "report", report_command, "Markdown table and PNG plots of finished run folders"
    )
    parser.add_argument("run_dirs", nargs="+", help="folders holding results.json files")
    add_output_dir(parser, "where report.md and the plots go (default: the first folder)")


def report_command(args, rest: list[str]) -> int:
    from ..report.comparison import report
    from ..report.rows import find_results

    if not find_results(args.run_dirs):  # (compare's report of phases that all failed is still written)
        raise FileNotFoundError(
            f"No results.json of a finished phase under {', '.join(args.run_dirs)}: give the --output_dir of a run "
            "(`spt-hf spt`, `finetune`, `run` or `compare`) whose phases finished; nothing was written."
        )
    print(report(args.run_dirs, args.output_dir))
    return 0
