"""The README's main job: self-pretraining vs training from scratch on real data that installs offline.

Task: scikit-learn's bundled digits (1,797 real 8x8 scans; intensities 0-16 as 64 tokens; 500 train / 400
validation / 897 test). For each architecture and seed, `spt-hf run` trains masked SPT on the 500 training images
only, finetunes from it, and trains the same classifier from scratch; the recipe ties compute (`total_steps`: SPT
and finetuning share the budget the scratch baseline gets alone). The table gives test accuracy mean ± standard
deviation over seeds. Runs on CPU in a few minutes, without network.
"""

import time
from pathlib import Path

from .training import load_recipe
from .training.arguments import RECIPES_DIR
from .training.pipeline import run
from .training.report import comparison_rows, find_results, markdown_table, report


def recipe_paths(architecture: str) -> tuple[Path, Path]:
    """The shipped CPU recipes `cpu/digits-<architecture>-{spt,finetune}.yaml`."""
    spt = RECIPES_DIR / "cpu" / f"digits-{architecture}-spt.yaml"
    if not spt.is_file():
        available = sorted(
            p.name.removeprefix("digits-").removesuffix("-spt.yaml") for p in spt.parent.glob("digits-*-spt.yaml")
        )
        raise ValueError(f"No demo recipe for {architecture!r}; available: {available}.")
    return spt, spt.with_name(spt.name.replace("-spt", "-finetune"))


def run_demo(
    output_dir: str = "runs/demo",
    seeds: tuple[int, ...] = (0, 1, 2),
    architectures=("transformer",),
    overrides: dict | None = None,
) -> str:
    start = time.perf_counter()
    root = Path(output_dir)
    for architecture in architectures:
        spt_path, finetune_path = recipe_paths(architecture)
        for seed in seeds:
            keys = {**(overrides or {}), "seed": seed, "output_dir": str(root / architecture / f"seed{seed}")}
            print(f"== {architecture}, seed {seed}: SPT, finetune, scratch ==", flush=True)
            spt_recipe = load_recipe(spt_path, keys, phase="spt")
            run(spt_recipe, load_recipe(finetune_path, keys, phase="finetune"), with_scratch=True)
    report([root])
    table = markdown_table(comparison_rows(find_results([root])))
    minutes = (time.perf_counter() - start) / 60
    print(f"\nTest accuracy on digits (mean ± sd over seeds {list(seeds)}), {minutes:.1f} min:\n\n{table}\n")
    print(f"Checkpoints and results.json: {root}/<arch>/seed<k>/{{spt,finetune,scratch}}")
    print(f"Report: {root}/report.md, {root}/learning_curves.png, {root}/test_metrics.png, {root}/results.csv")
    return table
