"""Training steps/s of the real pipeline against the bare model step on the same batches.

Pipeline: a dataset from `load_task` (Arrow), the masked-SPT collator drawing masks for every batch, the HF Trainer
(optimiser groups, scheduler, logging). Bare: the same model, the same kind of batches collated beforehand, a loop
of forward, backward and AdamW step. Blocks of K steps alternate (pipeline, bare, pipeline, ...) in one process;
step time is the median interval between consecutive steps. One JSON line per task and a Markdown table.

    python benchmarks/bench_pipeline.py                   # ListOps (tokens) and Pathfinder (continuous)
    python benchmarks/bench_pipeline.py --tasks listops --model s4d --steps 30 --rounds 3
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

TASKS = {
    "listops": {
        "task": "listops",
        "generate_data": {"num_train": 2000, "num_val": 64, "num_test": 64, "min_length": 200, "max_length": 500},
    },
    "pathfinder": {
        "task": "pathfinder",
        "generate_data": {"num_train": 512, "num_val": 32, "num_test": 32, "workers": 2},
    },
}
MODELS = {
    "transformer": {"model_type": "spt_rotary_transformer", "num_attention_heads": 4, "intermediate_size": 256},
    "s4d": {"model_type": "spt_s4", "kernel": "diag"},
    "dlr": {"model_type": "spt_dlr"},
}


class StepClock(TrainerCallback):
    """Wall-clock time between consecutive optimiser steps (data loading and collation included)."""

    def __init__(self):
        self.stamps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.stamps.append(time.perf_counter())

    def intervals(self) -> list[float]:
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]


def recipe_for(task: str, model: str, steps: int, batch: int, workers: int, out: Path):
    from spt_hf.training import load_recipe

    values = {
        **TASKS[task],
        **MODELS[model],
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "objective": "masked",
        "per_device_train_batch_size": batch,
        "max_steps": steps,
        "eval_strategy": "no",
        "save_strategy": "no",
        "load_best_model_at_end": False,
        "logging_steps": 10,
        "disable_tqdm": True,
        "seed": 0,
        "dataloader_num_workers": workers,
        "max_grad_norm": 0.0,
        "output_dir": str(out),
    }
    path = out / "recipe.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    return load_recipe(path)


def pipeline_block(recipe, model, task_data, steps: int) -> list[float]:
    from spt_hf.data import MaskedSPTCollator, pretraining_dataset
    from spt_hf.training.trainer import PhaseTrainer

    clock = StepClock()
    training = recipe.training
    trainer = PhaseTrainer(
        model=model,
        args=training,
        train_dataset=pretraining_dataset(task_data.splits, task_data.spec),
        data_collator=MaskedSPTCollator(task_data.spec, 0.5, seed=int(time.time())),
        callbacks=[clock],
    )
    trainer.train()
    return clock.intervals()[2:]  # the first steps include dataloader start-up


def bare_block(model, batches: list[dict], steps: int) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    stamps = []
    for index in range(steps):
        loss = model(**batches[index % len(batches)]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])][2:]


def bench(task: str, model_name: str, steps: int, rounds: int, batch: int, workers: int) -> dict:
    from transformers import AutoConfig, AutoModelForMaskedLM

    from spt_hf.data import MaskedSPTCollator, pretraining_dataset
    from spt_hf.training.task_data import load_task_data

    with tempfile.TemporaryDirectory() as tmp:
        recipe = recipe_for(task, model_name, steps, batch, workers, Path(tmp))
        task_data = load_task_data(recipe)
        kwargs = {**task_data.config_kwargs(), **recipe.model_config}
        if task_data.spec.spt_target == "levels":
            kwargs["continuous_loss"] = "cross_entropy"
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(recipe.model.model_type, **kwargs))
        dataset = pretraining_dataset(task_data.splits, task_data.spec)
        collator = MaskedSPTCollator(task_data.spec, 0.5)
        batches = [collator([dataset[i * batch + j] for j in range(batch)]) for i in range(8)]
        pipeline_times, bare_times = [], []
        for _ in range(rounds):
            pipeline_times += pipeline_block(recipe, model, task_data, steps)
            bare_times += bare_block(model, batches, steps)
    pipe, bare = statistics.median(pipeline_times), statistics.median(bare_times)
    return {
        "task": task,
        "model": model_name,
        "batch": batch,
        "dataloader_num_workers": workers,
        "length": int(batches[0]["attention_mask"].shape[1]),
        "pipeline_steps_per_s": round(1 / pipe, 3),
        "bare_steps_per_s": round(1 / bare, 3),
        "pipeline_over_bare": round(bare / pipe, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--model", default="transformer", choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--rounds", type=int, default=3, help="pipeline/bare block pairs")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0, help="dataloader_num_workers of the pipeline")
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = []
    for task in args.tasks:
        row = bench(task, args.model, args.steps, args.rounds, args.batch, args.workers)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\n| task | model | L | pipeline steps/s | bare steps/s | pipeline / bare |\n|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {r['model']} | {r['length']} | {r['pipeline_steps_per_s']} | {r['bare_steps_per_s']} "
            f"| {r['pipeline_over_bare']} |"
        )


if __name__ == "__main__":
    main()
