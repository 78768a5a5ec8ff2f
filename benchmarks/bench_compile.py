"""torch.compile against eager: training steps (forward + backward + AdamW) of each architecture, side by side.

Per model: an eager copy and a compiled copy (`torch.compile(fullgraph=True)`, inductor unless `--backend`) of the
same weights take `--steps` optimiser steps on the same batches, interleaved (eager step i, compiled step i, ...),
with dropout off in both (a compiled graph draws its own random numbers).
The compiled copy's first step includes compilation (forward and backward): it is timed on its own. The step times
are the medians over the steps after `--warmup`, and the losses of the two copies are compared at every step (the
largest difference over the whole run, so that 20 steps check that the compiled training follows eager's).
One JSON line per model, then a Markdown table.

Three sets of models:
- `--models NAME ...` at `--d`, `--layers`, `--length`, `--batch` (masked LM, vocabulary 32);
- `--table tiny`: the tests' table of tiny configs (tests/helpers.py: hidden 32, 2 layers, every architecture and
  transformers backbone), masked LM at L = 16, B = 3 — what compilation costs and what it does to a step that is
  all overhead;
- `--recipes R ...`: paper recipes' phase models at full size (`--length`: the task's full length unless given;
  `--batch` examples of the phase's own collator), as `spt-hf spt|finetune --torch_compile true` would compile them.

    python benchmarks/bench_compile.py                          # d=128, 2 layers, L=1024, B=8, every named model
    python benchmarks/bench_compile.py --models transformer s4d --length 4096 --steps 5
    python benchmarks/bench_compile.py --table tiny --steps 20
    python benchmarks/bench_compile.py --recipes listops/s4-spt.yaml listops/transformer-spt.yaml --batch 2
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

MODELS = {
    "transformer": ("spt_rotary_transformer", {"num_attention_heads": 4}),
    "s4": ("spt_s4", {"kernel": "nplr", "state_size": 64}),
    "s4d": ("spt_s4", {"kernel": "diag", "state_size": 64}),
    "dlr": ("spt_dlr", {"state_size": 1024}),
    "mega": (
        "spt_mega",
        {"shared_representation_size": 64, "ema_projection_size": 16, "intermediate_size": 256, "chunk_size": 128},
    ),
    "spade": ("spt_spade", {"num_attention_heads": 4, "attention_window": 128, "state_size": 64}),
    "linformer": ("spt_linformer", {"num_attention_heads": 4, "projected_length": 256}),
    "performer": ("spt_performer", {"num_attention_heads": 4, "num_random_features": 128}),
}
TINY_LENGTH, TINY_BATCH = 16, 3


def masked_batches(ids: torch.Tensor, mask_token_id: int, count: int, attention_mask=None) -> list[dict]:
    """`count` masked-LM batches of the same token ids, each with its own half of the positions masked."""
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(count):
        masked = torch.rand(ids.shape, generator=generator) < 0.5
        batch = {"input_ids": ids.masked_fill(masked, mask_token_id), "labels": torch.where(masked, ids, -100)}
        if attention_mask is not None:
            batch["attention_mask"] = attention_mask
        batches.append(batch)
    return batches


def named_case(name: str, d: int, layers: int, length: int, batch_size: int, steps: int):
    from transformers import AutoConfig, AutoModelForMaskedLM

    import spt_hf  # noqa: F401

    model_type, extra = MODELS[name]
    kwargs = {"vocab_size": 32, "hidden_size": d, "num_hidden_layers": layers, **extra}
    if model_type in ("spt_rotary_transformer", "spt_spade", "spt_linformer", "spt_performer"):
        kwargs.setdefault("intermediate_size", 4 * d)
    if model_type != "spt_rotary_transformer":
        kwargs["max_position_embeddings"] = length
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(model_type, **kwargs))
    ids = torch.randint(4, 32, (batch_size, length), generator=torch.Generator().manual_seed(0))
    shape = {"d": d, "layers": layers, "length": length, "batch": batch_size}
    return name, shape, model, masked_batches(ids, 1, steps)


def tiny_cases(steps: int):
    """The tests' tiny configs (tests/helpers.py, the table every architecture adds itself to)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from helpers import TINY_CONFIGS, make_config, make_inputs
    from transformers import AutoModelForMaskedLM

    for entry in TINY_CONFIGS:
        config = make_config(entry)
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(config)
        inputs = make_inputs(config, batch=TINY_BATCH, length=TINY_LENGTH)
        shape = {"d": config.hidden_size, "layers": config.num_hidden_layers, "length": TINY_LENGTH}
        batches = masked_batches(inputs["input_ids"], config.mask_token_id, steps, inputs["attention_mask"])
        yield entry[0], {**shape, "batch": TINY_BATCH}, model, batches


def recipe_case(path: str, length: int | None, batch_size: int, steps: int):
    """A paper recipe's phase model, built as the pipeline builds it, and batches of its own collator."""
    from spt_hf.cost.measure import synthetic_examples
    from spt_hf.recipes.loading import load_recipe
    from spt_hf.training.estimate import estimate_task
    from spt_hf.training.pipeline import phase_collator, phase_model

    phase = "spt" if path.endswith("-spt.yaml") else "finetune"
    recipe = load_recipe(path, phase=phase)
    task = estimate_task(recipe)
    torch.manual_seed(0)
    model, _ = phase_model(recipe, phase, task)
    collator = phase_collator(recipe, phase, task.spec)
    length = length or task.spec.max_length
    batches = [collator(synthetic_examples(task.spec, length, batch_size, seed=i)) for i in range(steps)]
    shape = {"d": model.config.hidden_size, "layers": model.config.num_hidden_layers, "length": length}
    return path, {**shape, "batch": batch_size}, model, batches


def trainer(model, batches: list[dict]) -> Callable[[int], float]:
    """One optimiser step on batch i, as the Trainer's loop takes it; returns the loss (`item()` waits for a GPU)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i: int) -> float:
        loss = model(**batches[i]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = loss.item()
        if loss.device.type == "cuda":
            torch.cuda.synchronize()  # the optimiser step too
        return value

    return step


def without_dropout(model):
    """The model with every dropout at 0: a compiled graph draws its own random numbers, so with dropout the two
    copies' losses would differ by the masks, not by the compilation."""
    configs = [model.config, getattr(model.config, "backbone_config", None)]
    for config in filter(None, configs):
        for key, value in config.to_dict().items():
            if "dropout" in key and isinstance(value, float):
                setattr(config, key, 0.0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def bench(name: str, shape: dict, model, batches: list[dict], backend: str, warmup: int, device: str) -> dict:
    torch._dynamo.reset()  # each model compiles afresh (the shared layer code would otherwise hit the recompile limit)
    eager = without_dropout(model).to(device).train()
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in batches]
    compiled_copy = copy.deepcopy(eager)
    compiled = torch.compile(compiled_copy, backend=backend, fullgraph=True)
    run = {"eager": trainer(eager, batches), "compiled": trainer(compiled, batches)}
    times, losses = {"eager": [], "compiled": []}, {"eager": [], "compiled": []}
    first_call = 0.0
    for i in range(len(batches)):
        for key in ("eager", "compiled"):
            start = time.perf_counter()
            losses[key].append(run[key](i))
            seconds = time.perf_counter() - start
            if key == "compiled" and i == 0:
                first_call = seconds  # compiles the forward and the backward
            elif i >= warmup:
                times[key].append(seconds)
    eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
    pairs = [e / c for e, c in zip(times["eager"], times["compiled"])]
    loss_diffs = [abs(a - b) for a, b in zip(losses["eager"], losses["compiled"])]
    return {
        "model": name,
        **shape,
        "parameters": sum(p.numel() for p in eager.parameters()),
        "backend": backend,
        "device": str(device),
        "steps": len(batches),
        "first_compiled_call_s": round(first_call, 1),
        "eager_step_s": round(eager_s, 4),
        "compiled_step_s": round(compiled_s, 4),
        "speedup_of_medians": round(eager_s / compiled_s, 3),
        "median_pair_speedup": round(statistics.median(pairs), 3),
        "first_loss": losses["eager"][0],
        "last_loss": losses["eager"][-1],
        "max_loss_diff": max(loss_diffs),
        "last_loss_diff": loss_diffs[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", choices=list(MODELS), help="named models (default: all, if no other set)"
    )
    parser.add_argument("--table", choices=["tiny"], help="the tests' table of tiny configs")
    parser.add_argument("--recipes", nargs="+", default=[], help="paper recipes (their phase models at full size)")
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, help="named models: default 1024; recipes: the task's full length")
    parser.add_argument("--batch", type=int, help="default: 8 (named models), 2 (recipes)")
    parser.add_argument("--steps", type=int, default=9, help="optimiser steps of each copy, the first compiles")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the timing (at least 1)")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.steps <= max(args.warmup, 1):
        parser.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}) so that some steps are timed")
    torch.set_num_threads(args.threads)
    models = args.models if args.models is not None else ([] if args.table or args.recipes else list(MODELS))

    def cases():
        for name in models:
            yield named_case(name, args.d, args.layers, args.length or 1024, args.batch or 8, args.steps)
        if args.table == "tiny":
            yield from tiny_cases(args.steps)
        for path in args.recipes:
            yield recipe_case(path, args.length, args.batch or 2, args.steps)

    rows = []
    for case in cases():
        rows.append(bench(*case, backend=args.backend, warmup=max(args.warmup, 1), device=args.device))
        print(json.dumps(rows[-1]), flush=True)
    print(
        f"\n{args.backend} on {args.device}, {args.steps} steps of each, medians over steps "
        f"{max(args.warmup, 1) + 1}-{args.steps}, {args.threads} threads"
    )
    print(
        "| model | d × layers | L × B | first compiled step s | eager step s | compiled step s | eager / compiled | "
        "max loss diff |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['d']} × {r['layers']} | {r['length']} × {r['batch']} | {r['first_compiled_call_s']} "
            f"| {r['eager_step_s']} | {r['compiled_step_s']} | {r['speedup_of_medians']}× | {r['max_loss_diff']:.1e} |"
        )


if __name__ == "__main__":
    main()
