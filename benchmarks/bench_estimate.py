"""The dry run's estimate against real training steps: peak memory, FLOPs and step time of paper recipes.

For each recipe: the estimate of its phase (`spt_hf.training.estimate`, measured at batch 1 on this device), then
`--steps` real training steps of the same model at `--batch` (default: the recipe's per-device batch, or the largest
that the estimate says fits `--device_memory_gb`), with the peak memory (CUDA: `torch.cuda.max_memory_allocated`;
CPU: the growth of the process's peak RSS) and the FLOPs counted over the last step. `--bf16` runs the real steps
under bf16 autocast, as a GPU user trains, and reports the achieved share of the device's dense bf16 peak
(`--peak_device`, a `PEAK_TFLOPS_PER_S` name) beside the estimate's GPU-hour assumption (`DEFAULT_UTILISATION`).
Prints one JSON line per recipe and a Markdown table of measured / estimated.

    python benchmarks/bench_estimate.py --recipes pathx/s4-spt.yaml listops/transformer-finetune.yaml
    python benchmarks/bench_estimate.py --device cpu --batch 1 --recipes cpu/digits-s4-spt.yaml
    python benchmarks/bench_estimate.py --bf16 --peak_device H100 --recipes listops/s4-spt.yaml   # on a GPU
"""

import argparse
import contextlib
import json
import time

import torch
from common import status_mib

from spt_hf.cost.flops import flop_counter
from spt_hf.cost.measure import synthetic_examples
from spt_hf.recipes.loading import load_recipe
from spt_hf.training.estimate import (
    BYTES_PER_PARAMETER,
    DEFAULT_UTILISATION,
    GIB,
    PEAK_TFLOPS_PER_S,
    estimate_phase,
    estimate_task,
)
from spt_hf.training.optim import param_groups
from spt_hf.training.pipeline import phase_collator, phase_model

# One paper recipe per architecture, each at its longest task.
DEFAULT_RECIPES = [
    "pathx/s4-spt.yaml",
    "pathx/dlr-spt.yaml",
    "pathx/transformer-spt.yaml",
    "pathx/mega-finetune.yaml",
    "pathx/spade-spt.yaml",
    "pathx/linformer-spt.yaml",
    "pathx/performer-spt.yaml",
    "pathx/pythia70m-spt.yaml",
    "speech_commands/s4-spt.yaml",
]


def real_steps(recipe, phase: str, batch: int, steps: int, device: torch.device, bf16: bool = False) -> dict:
    """`steps` optimiser steps of the phase's model at `batch` (under bf16 autocast with `bf16`); peak memory over
    them, FLOPs and time of the last."""
    task = estimate_task(recipe)
    model, _ = phase_model(recipe, phase, task)
    collator = phase_collator(recipe, phase, task.spec)
    model.to(device).train()
    optimizer = torch.optim.AdamW(param_groups(model, 1e-4, 0.0))
    inputs = {k: v.to(device) for k, v in collator(synthetic_examples(task.spec, task.spec.max_length, batch)).items()}
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if device.type == "cuda" else status_mib("VmRSS") * 2**20
    flops, seconds = 0.0, 0.0
    for _ in range(steps):
        start = time.perf_counter()
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with flop_counter() as counter:
            with autocast:
                loss = model(**inputs).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated, as in the Trainer's loop
        if device.type == "cuda":
            torch.cuda.synchronize()
        flops, seconds = counter.get_total_flops(), time.perf_counter() - start
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:  # RSS: what the process grew by, plus the parameters it already held
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        peak = status_mib("VmHWM") * 2**20 - before + params
    del model, optimizer
    return {"peak_bytes": peak, "flops": flops, "step_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, help="per-device batch of the real steps (default: the recipe's)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--device_memory_gb", "--device-memory-gb", type=float, default=80.0)
    parser.add_argument("--max_measure_length", "--max-measure-length", type=int)
    parser.add_argument("--bf16", action="store_true", help="real steps under bf16 autocast")
    parser.add_argument("--peak_device", "--peak-device", choices=sorted(PEAK_TFLOPS_PER_S), default="H100")
    args = parser.parse_args()
    peak = PEAK_TFLOPS_PER_S[args.peak_device]["bf16" if args.bf16 else "fp32"] * 1e12
    device = torch.device(args.device)
    rows = []
    for name in args.recipes:
        phase = "spt" if name.endswith("-spt.yaml") else "finetune"
        recipe = load_recipe(name, phase=phase)
        try:
            estimate = estimate_phase(recipe, phase, args.device_memory_gb, args.max_measure_length, str(device))
        except ValueError as error:
            print(json.dumps({"recipe": name, "skipped": str(error)}), flush=True)
            continue
        batch = args.batch or (estimate.fitting_batch() or (1, 0))[0]
        try:
            real = real_steps(recipe, phase, batch, args.steps, device, args.bf16)
        except torch.OutOfMemoryError as error:
            real = {"peak_bytes": float("nan"), "flops": float("nan"), "step_s": float("nan"), "error": str(error)}
        expected = BYTES_PER_PARAMETER * estimate.parameters + estimate.activations_at(batch)
        expected_flops = estimate.flops_per_batch + batch * estimate.flops_per_example
        row = {
            "recipe": name,
            "device": str(device),
            "batch": batch,
            "estimated_bytes": expected,
            "measured_peak_bytes": real["peak_bytes"],
            "memory_ratio": real["peak_bytes"] / expected,
            "estimated_flops": expected_flops,
            "measured_flops": real["flops"],
            "flops_ratio": real["flops"] / expected_flops,
            "step_s": real["step_s"],
            "bf16": args.bf16,
            # the achieved share of the dense peak, against the estimate's GPU-hour assumption
            "peak_share": real["flops"] / real["step_s"] / peak,
            "assumed_share": DEFAULT_UTILISATION,
            "extrapolated_from": list(estimate.extrapolated_from),
        }
        if "error" in real:
            row["error"] = real["error"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    precision = "bf16" if args.bf16 else "fp32"
    print(
        "| recipe | device | batch | est. GiB | peak GiB | memory ratio | FLOPs ratio | step s | "
        f"share of {precision} peak |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['recipe']} | {r['device']} | {r['batch']} | {r['estimated_bytes'] / GIB:.2f} | "
            f"{r['measured_peak_bytes'] / GIB:.2f} | {r['memory_ratio']:.2f} | {r['flops_ratio']:.3f} | "
            f"{r['step_s']:.2f} | {r['peak_share']:.3f} (assumed {r['assumed_share']}) |"
        )


if __name__ == "__main__":
    main()
