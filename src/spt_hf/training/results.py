"""results.json of each phase and run, and `spt-hf report`: a Markdown table and PNG plots over many runs."""

import json
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

RESULTS_FILE = "results.json"


def code_version() -> dict:
    """spt_hf's version and, when run from a git checkout, the commit (and whether it had local changes)."""
    from .. import __version__

    version = {"spt_hf": __version__}
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / ".git").exists():
        return version  # an installed package: no checkout of spt_hf's own to ask (nor any other repository)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
        if commit.returncode == 0:
            version.update(git_commit=commit.stdout.strip(), git_dirty=bool(dirty.stdout.strip()))
    except OSError:
        pass
    return version


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """Write JSON to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        json.dump(payload, handle, indent=2, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)


def write_results(output_dir: str | Path, results: dict) -> Path:
    path = Path(output_dir) / RESULTS_FILE
    write_json_atomic(path, results)
    return path


def phase_results(phase, recipe, task, trainer, train_output, validation, test, wall_time) -> dict:
    """Everything a phase should record: resolved config, code and data versions, budget, metrics, curves."""
    state = trainer.state
    args = trainer.args
    world = args.world_size
    return {
        "phase": phase,
        "task": recipe.data.task,
        "model_type": trainer.model.config.model_type,
        "num_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "recipe": recipe.to_dict(),
        "model_config": trainer.model.config.to_diff_dict(),
        "code_version": code_version(),
        "data": {"data_dir": task.data_dir, "split_sizes": task.split_sizes()},
        "budget": {
            "steps": state.global_step,
            "epochs": state.epoch,
            "per_device_batch_size": args.per_device_train_batch_size,
            "processes": world,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "global_batch_size": args.per_device_train_batch_size * world * args.gradient_accumulation_steps,
            "train_runtime_s": train_output.metrics.get("train_runtime"),
            "wall_time_s": wall_time,
        },
        "metrics": {
            "best_metric": state.best_metric,
            "metric_for_best_model": args.metric_for_best_model,
            "best_checkpoint": state.best_model_checkpoint,
            "validation": validation,
            "test": test,
            "train": train_output.metrics,
        },
        "learning_curve": [entry for entry in state.log_history if "eval_loss" in entry or "loss" in entry],
        "output_dir": args.output_dir,
    }


def find_results(paths: list[str | Path]) -> list[dict]:
    """All phase results.json under the given run folders (run summaries are skipped); unreadable ones are noted."""
    found = []
    for root in paths:
        for path in sorted(Path(root).rglob(RESULTS_FILE)):
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as error:
                print(f"skipping {path}: {error}")
                continue
            if "phase" in data:
                data["_path"] = str(path)
                found.append(data)
    return found


def score(result: dict) -> tuple[str, float | None]:
    """The test metric of a finetuning run (accuracy, or R² for regression)."""
    test = result.get("metrics", {}).get("test", {})
    for key in ("test_accuracy", "test_r2"):
        if key in test:
            return key.removeprefix("test_"), test[key]
    return "metric", None


def summarise(results: list[dict]) -> dict:
    """{(task, model_type): {"scratch": [...], "spt": [...]}} of test metrics of finetuning runs."""
    table: dict = defaultdict(lambda: defaultdict(list))
    for result in results:
        if result.get("phase") not in ("finetune", "scratch"):
            continue
        kind = "spt" if result.get("init", {}).get("kind") in ("spt", "pretrained") else "scratch"
        name, value = score(result)
        if value is not None:
            table[(result["task"], result["model_type"], name)][kind].append(value)
    return table


def mean_spread(values: list[float]) -> str:
    if not values:
        return "—"
    values = np.asarray(values) * 100
    spread = f" ± {values.std(ddof=1):.1f}" if len(values) > 1 else ""
    return f"{values.mean():.1f}{spread} (n={len(values)})"


def markdown_table(results: list[dict]) -> str:
    rows = ["| task | model | metric | scratch | SPT | SPT − scratch |", "|---|---|---|---|---|---|"]
    for (task, model_type, metric), kinds in sorted(summarise(results).items()):
        scratch, spt = kinds.get("scratch", []), kinds.get("spt", [])
        gain = f"{(np.mean(spt) - np.mean(scratch)) * 100:+.1f}" if scratch and spt else "—"
        rows.append(f"| {task} | {model_type} | {metric} | {mean_spread(scratch)} | {mean_spread(spt)} | {gain} |")
    return "\n".join(rows)


def plot_report(results: list[dict], out_dir: Path) -> list[Path]:
    """Learning curves (validation metric per step) and scratch-vs-SPT bars, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for result in results:
        metric = result.get("metrics", {}).get("metric_for_best_model") or "loss"
        key = metric if metric.startswith("eval_") else f"eval_{metric}"
        points = [(e["step"], e[key]) for e in result.get("learning_curve", []) if key in e]
        if points:
            steps, values = zip(*points)
            label = (
                f"{result['task']}/{result['model_type']}/{result['phase']}/{result.get('init', {}).get('kind', '')}"
            )
            ax.plot(steps, values, marker=".", label=f"{label} ({key})")
    ax.set_xlabel("step")
    ax.set_ylabel("validation metric")
    if ax.lines:
        ax.legend(fontsize=6)
    written.append(out_dir / "learning_curves.png")
    fig.tight_layout()
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    table = summarise(results)
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{t}\n{m.removeprefix('spt_')}" for (t, m, _) in table]
    for offset, kind in ((-0.2, "scratch"), (0.2, "spt")):
        means = [np.mean(v[kind]) * 100 if v.get(kind) else 0 for v in table.values()]
        errors = [np.std(v[kind]) * 100 if len(v.get(kind, [])) > 1 else 0 for v in table.values()]
        ax.bar(np.arange(len(labels)) + offset, means, 0.4, yerr=errors, label=kind)
    ax.set_xticks(np.arange(len(labels)), labels, fontsize=7)
    ax.set_ylabel("test metric (%)")
    ax.legend()
    written.append(out_dir / "scratch_vs_spt.png")
    fig.tight_layout()
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def report(paths: list[str | Path], out_dir: str | Path | None = None) -> str:
    """Render the table (printed and written to report.md) and the plots for the runs under `paths`."""
    results = find_results(paths)
    out = Path(out_dir or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(results)
    text = f"# spt_hf report\n\n{len(results)} phase result(s) from {', '.join(map(str, paths))}\n\n{table}\n"
    (out / "report.md").write_text(text)
    for path in plot_report(results, out):
        text += f"\n![{path.stem}]({path.name})"
    return text
