"""The plan of a comparison: which recipe pair serves each (task, architecture), and the phases that seeds, training
set sizes and budgets expand it into, with their dependencies (finetuning after its SPT; scratch independent).

Every phase is one `spt-hf spt` or `spt-hf finetune` command writing its own run folder
`<output_dir>/<task>/<architecture>/<variant>/seed<k>/`, so a comparison is resumable by construction: each phase
leaves a finished phase alone and resumes a killed one (docs/reliability.md).
"""

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..training.arguments import RECIPES_DIR, SPT_ONLY_KEYS, find_recipe, load_recipe

BUDGETS = ("equal", "tied")
LAUNCHERS = ("local", "submitit", "ray")


@dataclass
class CompareSpec:
    """What to compare. Field names are the keys of `spt-hf compare --config compare.yaml`.

    Args:
        tasks / architectures: the recipe pairs `<task>/<arch>-{spt,finetune}.yaml` (paper recipes) or
            `<task>-<arch>-{spt,finetune}.yaml` (e.g. `recipes_dir: cpu`) to run.
        seeds: one run of every phase per seed.
        recipes_dir: `recipes` (the shipped paper recipes), `recipes/cpu` (or `cpu`), or a folder of one's own.
        output_dir: where the run folders and the report go.
        with_scratch: also train the scratch baseline.
        num_train_examples: training set sizes (sample complexity); None is the whole training split.
        budget: None as the recipes say; "equal": each phase its own recipe's steps; "tied": SPT and finetuning
            share `total_steps` (split by `spt_fraction`) and the scratch baseline gets all of it.
        launcher: "local" (subprocesses), "submitit" (Slurm jobs), "ray" (Ray tasks).
        max_parallel: phases run at once by the local launcher; jobs queued or running at once on Slurm.
        overrides: recipe keys set in every phase (`--key value` on the command line).
        task_overrides: recipe keys set in every phase of one task: {task: {key: value}} (YAML only).
        accelerate_config: run each phase under `accelerate launch --config_file` this file (local launcher).
        submitit: `cluster` (slurm | local | debug), `partition`, `timeout_min`, `gpus_per_node`, `cpus_per_task`,
            `mem_gb`, `account`, `qos`, `signal_delay_s`, `max_num_timeout`, `folder` (docs/compare.md).
        ray: `address` (default: a local instance), `num_cpus` and `num_gpus` per phase.
    """

    tasks: list[str]
    architectures: list[str]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    recipes_dir: str = "recipes"
    output_dir: str = "runs/compare"
    with_scratch: bool = True
    num_train_examples: list[int | None] = field(default_factory=lambda: [None])
    budget: str | None = None
    launcher: str = "local"
    max_parallel: int = 1
    overrides: dict = field(default_factory=dict)
    task_overrides: dict = field(default_factory=dict)
    accelerate_config: str | None = None
    submitit: dict = field(default_factory=dict)
    ray: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tasks or not self.architectures or not self.seeds:
            raise ValueError("A comparison needs at least one task, one architecture and one seed.")
        if self.budget is not None and self.budget not in BUDGETS:
            raise ValueError(f"`budget`={self.budget!r}; expected one of {list(BUDGETS)} (or leave it out).")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"`launcher`={self.launcher!r}; expected one of {list(LAUNCHERS)}.")
        if not isinstance(self.max_parallel, int) or self.max_parallel < 1:
            raise ValueError(f"`max_parallel` must be a positive integer, got {self.max_parallel!r}.")
        unknown = sorted(set(self.task_overrides) - set(self.tasks))
        if unknown:
            raise ValueError(f"`task_overrides` names tasks {unknown} that the comparison does not run: {self.tasks}.")
        for n in self.num_train_examples:
            if n is not None and (not isinstance(n, int) or n < 1):
                raise ValueError(f"`num_train_examples` holds {n!r}; each must be a positive integer.")


@dataclass
class PhaseJob:
    """One phase of the plan: the command that runs it and the phase it waits for."""

    id: str
    kind: str  # "spt", "finetune" or "scratch"
    task: str
    architecture: str
    variant: str
    seed: int
    recipe: Path
    overrides: dict
    run_dir: Path
    steps: str
    depends_on: str | None = None

    @property
    def phase_dir(self) -> Path:
        return self.run_dir / self.kind

    @property
    def log(self) -> Path:
        return self.run_dir / "logs" / f"{self.kind}.log"

    def command(self, accelerate_config: str | None = None) -> list[str]:
        verb = "spt" if self.kind == "spt" else "finetune"
        words = [verb, "--config", str(self.recipe)]
        for key, value in self.overrides.items():
            words += [f"--{key}", json.dumps(value) if not isinstance(value, str) else value]
        if accelerate_config:
            return [
                sys.executable,
                "-m",
                "accelerate.commands.launch",
                "--config_file",
                accelerate_config,
                "-m",
                "spt_hf",
                *words,
            ]
        return [sys.executable, "-m", "spt_hf", *words]


def recipe_pair(recipes_dir: str, task: str, architecture: str) -> tuple[Path, Path]:
    """The SPT and finetuning recipes of (task, architecture) in `recipes_dir`; a clear error lists the pairs the
    folder has when this one is missing."""
    folder = _recipe_folder(recipes_dir)
    for pattern in (f"{task}/{architecture}-{{}}.yaml", f"{task}-{architecture}-{{}}.yaml"):
        spt, finetune = folder / pattern.format("spt"), folder / pattern.format("finetune")
        if spt.is_file() and finetune.is_file():
            return spt, finetune
    available = sorted(available_pairs(folder))
    raise FileNotFoundError(
        f"No recipe pair for task {task!r} and architecture {architecture!r} in {recipes_dir} (looked for "
        f"{task}/{architecture}-spt.yaml and {task}-{architecture}-spt.yaml with their -finetune siblings). "
        f"It has: {', '.join(f'{t}/{a}' for t, a in available) or 'no recipe pairs'}."
    )


def _recipe_folder(recipes_dir: str) -> Path:
    path = Path(recipes_dir).expanduser()
    if path.is_dir():
        return path
    name = Path(*path.parts[1:]) if path.parts[:1] == ("recipes",) else path
    if (RECIPES_DIR / name).is_dir():
        return RECIPES_DIR / name
    raise FileNotFoundError(
        f"`recipes_dir` {recipes_dir} is neither a folder nor a folder of the shipped recipes ({RECIPES_DIR})."
    )


def available_pairs(folder: Path) -> set[tuple[str, str]]:
    """(task, architecture) of every <name>-spt.yaml with a -finetune sibling under `folder`."""
    pairs = set()
    for spt in folder.rglob("*-spt.yaml"):
        if not spt.with_name(spt.name.replace("-spt.yaml", "-finetune.yaml")).is_file():
            continue
        stem = spt.name.removesuffix("-spt.yaml")
        if spt.parent != folder:
            pairs.add((spt.parent.name, stem))
        elif "-" in stem:
            pairs.add(tuple(stem.split("-", 1)))
    return pairs


def phase_budgets(spec: CompareSpec, keys: dict, spt_recipe: Path, finetune_recipe: Path) -> tuple[dict, dict]:
    """max_steps overrides of each phase kind and a text of the steps each will take (for the plan), for the
    recipe pair with the comparison's `keys` (overrides) applied."""
    spt = load_recipe(spt_recipe, keys, phase="spt")
    finetune = load_recipe(finetune_recipe, _finetune_keys(keys), phase="finetune")
    budget = spec.budget or ("tied" if spt.spt.total_steps else "equal")
    if budget == "equal":
        steps = {"spt": spt.training.max_steps, "finetune": finetune.training.max_steps}
        steps["scratch"] = steps["finetune"]
        overrides = {"spt": {}, "finetune": {}, "scratch": {}}
        if spt.spt.total_steps:  # the recipe ties budgets; "equal" gives each phase its own max_steps
            overrides = {kind: {"total_steps": None} for kind in overrides}
    else:
        total = spt.spt.total_steps
        if not total:
            raise ValueError(
                f"`budget: tied` needs `total_steps` (SPT and finetuning share them): {spt_recipe.name} sets none; "
                "pass --total_steps N."
            )
        if "max_steps" in keys:
            raise ValueError(
                f"--max_steps {keys['max_steps']} would be ignored: with tied budgets total_steps={total} decides "
                "every phase's steps. Pass --total_steps N, or --budget equal to give each phase --max_steps."
            )
        first = max(1, math.floor(total * spt.spt.spt_fraction))
        steps = {"spt": first, "finetune": total - first, "scratch": total}
        overrides = {kind: {"max_steps": value} for kind, value in steps.items()}
    epochs = {"spt": spt.training.num_train_epochs, "finetune": finetune.training.num_train_epochs}
    epochs["scratch"] = epochs["finetune"]
    text = {k: (f"{v} steps" if v and v > 0 else f"{epochs[k]:g} epochs") for k, v in steps.items()}
    return overrides, text


def _finetune_keys(overrides: dict) -> dict:
    return {k: v for k, v in overrides.items() if k not in SPT_ONLY_KEYS}


def build_plan(spec: CompareSpec) -> list[PhaseJob]:
    """Every phase of the comparison, SPT phases before the finetuning that waits for them. Recipes are checked
    (loaded for their phase) before anything runs."""
    root = Path(spec.output_dir)
    jobs: list[PhaseJob] = []
    for task in spec.tasks:
        for arch in spec.architectures:
            spt_recipe, finetune_recipe = recipe_pair(spec.recipes_dir, task, arch)
            keys = {**spec.overrides, **spec.task_overrides.get(task, {})}
            budgets, steps = phase_budgets(spec, keys, spt_recipe, finetune_recipe)
            for size in spec.num_train_examples:
                variant = "full" if size is None else f"n{size}"
                for seed in spec.seeds:
                    run_dir = root / task / arch / variant / f"seed{seed}"
                    common = {**keys, "output_dir": str(run_dir), "seed": seed}
                    if size is not None:
                        common["num_train_examples"] = size
                    name = f"{task}/{arch}/{variant}/seed{seed}"
                    spt_id = f"{name}/spt"
                    jobs.append(
                        PhaseJob(
                            spt_id,
                            "spt",
                            task,
                            arch,
                            variant,
                            seed,
                            spt_recipe,
                            {**common, **budgets["spt"]},
                            run_dir,
                            steps["spt"],
                        )
                    )
                    finetune_keys = {
                        **_finetune_keys(common),
                        **budgets["finetune"],
                        "model_name_or_path": str(run_dir / "spt"),
                    }
                    jobs.append(
                        PhaseJob(
                            f"{name}/finetune",
                            "finetune",
                            task,
                            arch,
                            variant,
                            seed,
                            finetune_recipe,
                            finetune_keys,
                            run_dir,
                            steps["finetune"],
                            depends_on=spt_id,
                        )
                    )
                    if spec.with_scratch:
                        scratch_keys = {**_finetune_keys(common), **budgets["scratch"]}
                        jobs.append(
                            PhaseJob(
                                f"{name}/scratch",
                                "scratch",
                                task,
                                arch,
                                variant,
                                seed,
                                finetune_recipe,
                                scratch_keys,
                                run_dir,
                                steps["scratch"],
                            )
                        )
    for job in jobs:  # every phase's recipe, as that phase will load it, before anything runs
        load_recipe(job.recipe, job.overrides, phase="spt" if job.kind == "spt" else "finetune")
    return jobs


def describe_plan(jobs: list[PhaseJob], statuses: dict[str, str]) -> str:
    """The plan as a table: phase, status, steps, recipe, folder, dependency."""
    lines = ["| phase | status | budget | recipe | folder | after |", "|---|---|---|---|---|---|"]
    for job in jobs:
        recipe = _shown(job.recipe)
        lines.append(
            f"| {job.id} | {statuses.get(job.id, 'to run')} | {job.steps} | {recipe} | {job.phase_dir} | "
            f"{job.depends_on or '—'} |"
        )
    return "\n".join(lines)


def _shown(recipe: Path) -> str:
    try:
        return str(recipe.relative_to(RECIPES_DIR))
    except ValueError:
        return str(recipe)


__all__ = ["CompareSpec", "PhaseJob", "build_plan", "describe_plan", "find_recipe", "recipe_pair"]
