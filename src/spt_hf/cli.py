"""The `spt-hf` command (also `python -m spt_hf`)."""

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spt-hf", description="Self-pretraining of long-sequence models.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the README's main job")
    demo.add_argument("--model-type", default="spt_rotary_transformer")
    demo.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        run_demo(args.model_type, args.steps)
    return 0
