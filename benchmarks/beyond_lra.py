"""SPT beyond LRA, measured by spt_hf itself: the eight UCR/UEA classification sets that aeon's wheel ships and one
token corpus (Debian's `fortunes`, four categories of real short texts, read as bytes), scratch against SPT +
finetuning for S4, DLR and the Transformer over 3 seeds, every phase stopped by early stopping under a tied cap, in
one `spt-hf compare` call. The report's "Across tasks" section holds the statistics over the tasks.

    pip install --no-deps aeon==1.6.0          # the UCR/UEA files only (no import of aeon)
    apt-get install fortunes                   # /usr/share/games/fortunes (or --fortunes_dir FOLDER)
    python benchmarks/beyond_lra.py --output_dir runs/beyond_lra [--dry_run] [--max_parallel 2]

The task files it writes (`OUTPUT_DIR/tasks/*.yaml`) are ordinary `task: custom` files; the command it runs is
printed first, so the comparison can be resumed or extended by hand; the same command resumes an interrupted run
(Ctrl-C stops the running phases). Results: docs/benchmarks.md.
"""

import argparse
import csv
import importlib.util
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

# Cheapest first (compare runs the tasks in the order given), so that a run cut short has the most tasks done: by the
# phase wall times measured here, the fortunes corpus (texts of 92 bytes at the median, up to 1,778) goes between
# OSULeaf and ACSF1, whose every batch is 1,460 steps long.
UCR_SETS = (
    "ItalyPowerDemand",  # 24 steps
    "JapaneseVowels",  # 7-29 steps, 12 channels
    "BasicMotions",  # 100 steps, 6 channels
    "GunPoint",  # 150
    "ArrowHead",  # 251
    "PickupGestureWiimoteZ",  # up to 361, unequal lengths
    "OSULeaf",  # 427
    "ACSF1",  # 1460
)
FORTUNES = Path("/usr/share/games/fortunes")  # where Debian's `fortunes` package puts them
FORTUNE_CATEGORIES = ("computers", "politics", "science", "zippy")
# The UCR/UEA sets have small training splits (36-270 series): a quarter of train is carved for validation, so that
# early stopping and checkpoint choice see more than a handful of series (the test split is never used to select).
UCR_VALIDATION_SIZE = 0.25


def aeon_data() -> Path:
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("aeon's files are missing: pip install --no-deps aeon==1.6.0")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data"


def fortune_texts(fortunes: Path, category: str) -> list[str]:
    """The fortunes of one category: the UTF-8 file's entries, separated by lines holding a lone `%`."""
    path = fortunes / f"{category}.u8"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: apt-get install fortunes (or --fortunes_dir FOLDER)")
    entries = path.read_text(encoding="utf-8").split("\n%\n")
    return [text.strip() for text in entries if text.strip()]


def write_fortunes(folder: Path, fortunes: Path) -> Path:
    """One CSV (`text`, `label`) of the four categories; spt_hf carves validation and test from it (stratified)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fortunes.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for category in FORTUNE_CATEGORIES:
            writer.writerows([text, category] for text in fortune_texts(fortunes, category))
    return path


def write_task_files(output_dir: Path, fortunes: Path = FORTUNES) -> list[Path]:
    """One task file per set, named after it (compare names the task after its file)."""
    folder = output_dir / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name in UCR_SETS:
        data_dir = aeon_data() / name
        if not data_dir.is_dir():
            raise SystemExit(f"{data_dir} is missing: pip install --no-deps aeon==1.6.0")
        files_of = {split: data_dir / f"{name}_{split.upper()}.ts" for split in ("train", "test")}  # (not `_eq`)
        text = (
            f"task: custom\ntask_options:\n  data_files:\n"
            f"    train: {files_of['train']}\n    test: {files_of['test']}\n"
            f"  validation_size: {UCR_VALIDATION_SIZE}\n"
        )
        files.append(folder / f"{name}.yaml")
        files[-1].write_text(text)
    csv_path = write_fortunes(output_dir / "data", fortunes)
    fortunes = folder / "Fortunes.yaml"
    fortunes.write_text(f"task: custom\ntask_options:\n  data_files: {csv_path}\n  input_column: text\n")
    return [*files[:-1], fortunes, files[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="runs/beyond_lra")
    parser.add_argument("--architectures", nargs="+", default=["s4", "dlr", "transformer"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--early_stopping_patience", type=int, default=3)
    parser.add_argument("--max_parallel", type=int, default=2)
    parser.add_argument("--fortunes_dir", default=str(FORTUNES), help="the folder of the fortunes' .u8 files")
    parser.add_argument("--dry_run", action="store_true", help="print the plan, train nothing")
    args, extra = parser.parse_known_args()  # anything else goes to `spt-hf compare` as it is
    output_dir = Path(args.output_dir)
    tasks = write_task_files(output_dir, Path(args.fortunes_dir))
    command = [
        sys.executable,
        "-m",
        "spt_hf",
        "compare",
        "--task_config",
        *map(str, tasks),
        "--architectures",
        *args.architectures,
        "--seeds",
        *map(str, args.seeds),
        "--preset",
        args.preset,
        "--early_stopping_patience",
        str(args.early_stopping_patience),
        "--max_parallel",
        str(args.max_parallel),
        "--output_dir",
        str(output_dir),
        *(["--dry_run"] if args.dry_run else []),
        *extra,
    ]
    print(shlex.join(command), flush=True)
    start = time.perf_counter()
    # compare runs in its own session, so that a Ctrl-C (or SIGINT to this script) reaches it once, from here: it then
    # stops its running phases and prints the command that resumes them.
    process = subprocess.Popen(command, start_new_session=True)
    while True:
        try:
            returncode = process.wait()
            break
        except KeyboardInterrupt:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
    print(f"beyond_lra: {'dry run' if args.dry_run else 'comparison'} took {time.perf_counter() - start:.0f} s")
    sys.exit(returncode)


if __name__ == "__main__":
    main()
