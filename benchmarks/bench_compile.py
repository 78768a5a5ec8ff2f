"""torch.compile against eager: one training step (masked LM, forward + backward + AdamW) of each architecture.

Per model: the first compiled call (compilation included), then eager and compiled steps interleaved (A, B, A, B, ...)
with the same weights and inputs, the ratio of the median step times, and the largest difference of the losses
and gradients of one step (compiled vs eager, same starting weights). One JSON line per model, then a table.

    python benchmarks/bench_compile.py                          # d=128, 2 layers, L=1024, B=8, every model
    python benchmarks/bench_compile.py --models transformer s4d --length 4096 --steps 5
"""

import argparse
import copy
import json
import statistics
import time

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


def build(name: str, d: int, layers: int, length: int):
    from transformers import AutoConfig, AutoModelForMaskedLM

    import spt_hf  # noqa: F401

    model_type, extra = MODELS[name]
    kwargs = {"vocab_size": 32, "hidden_size": d, "num_hidden_layers": layers, **extra}
    if model_type in ("spt_rotary_transformer", "spt_spade", "spt_linformer", "spt_performer"):
        kwargs.setdefault("intermediate_size", 4 * d)
    if model_type != "spt_rotary_transformer":
        kwargs["max_position_embeddings"] = length
    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_config(AutoConfig.for_model(model_type, **kwargs)).train()


def step_function(model, batch: dict):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def one_step_difference(model, compiled_model, batch: dict) -> tuple[float, float]:
    """|loss| and max |grad| differences of one forward + backward from the same weights."""
    a, b = model(**batch).loss, compiled_model(**batch).loss
    a.backward()
    b.backward()
    grads = [
        (p.grad - q.grad).abs().max().item()
        for p, q in zip(model.parameters(), compiled_model.parameters())
        if p.grad is not None
    ]
    model.zero_grad(set_to_none=True)
    compiled_model.zero_grad(set_to_none=True)
    return abs(a.item() - b.item()), max(grads)


def bench(name: str, d: int, layers: int, length: int, batch_size: int, steps: int) -> dict:
    torch.set_num_threads(2)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 32, (batch_size, length), generator=generator)
    masked = torch.rand(ids.shape, generator=generator) < 0.5
    batch = {"input_ids": ids.masked_fill(masked, 1), "labels": torch.where(masked, ids, -100)}
    eager = build(name, d, layers, length)
    compiled_copy = copy.deepcopy(eager)
    compiled = torch.compile(compiled_copy, fullgraph=True)
    start = time.perf_counter()
    compiled(**batch).loss.backward()  # compiles forward and backward
    first_call = time.perf_counter() - start
    compiled_copy.zero_grad(set_to_none=True)
    loss_diff, grad_diff = one_step_difference(eager, compiled, batch)
    run_eager, run_compiled = step_function(eager, batch), step_function(compiled, batch)
    for _ in range(2):  # warm-up of both
        run_eager(), run_compiled()
    times = {"eager": [], "compiled": []}
    for _ in range(steps):
        for key, run in (("eager", run_eager), ("compiled", run_compiled)):
            start = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - start)
    eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
    pairs = [e / c for e, c in zip(times["eager"], times["compiled"])]
    return {
        "model": name,
        "d": d,
        "layers": layers,
        "length": length,
        "batch": batch_size,
        "first_compiled_call_s": round(first_call, 1),
        "eager_step_s": round(eager_s, 4),
        "compiled_step_s": round(compiled_s, 4),
        "speedup_of_medians": round(eager_s / compiled_s, 3),
        "median_pair_speedup": round(statistics.median(pairs), 3),
        "loss_diff": loss_diff,
        "grad_diff": grad_diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=7, help="interleaved timed steps of each")
    args = parser.parse_args()
    rows = []
    for name in args.models:
        rows.append(bench(name, args.d, args.layers, args.length, args.batch, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| model | first compiled call s | eager step s | compiled step s | eager / compiled | max grad diff |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['first_compiled_call_s']} | {r['eager_step_s']} | {r['compiled_step_s']} | "
            f"{r['speedup_of_medians']}× | {r['grad_diff']:.1e} |"
        )


if __name__ == "__main__":
    main()
