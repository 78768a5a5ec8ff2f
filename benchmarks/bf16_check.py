"""bf16 autocast training stays finite for every architecture bench_models.py times (and spt_hf around each of its
transformers backbones): masked SPT steps with AdamW, the loss checked at every step. Prints one JSON line per model
and a Markdown table; exits 1 if a loss is not finite.

    python benchmarks/bf16_check.py --device cuda --steps 200          # what gpu_check.sh runs
    python benchmarks/bf16_check.py --device cpu --steps 2 --d 16 --length 64 --batch 2    # a smoke run
"""

import argparse
import json
import math
import sys

import torch
from bench_models import BACKBONES, MODELS, backbone_values
from transformers import AutoConfig, AutoModelForMaskedLM

import spt_hf  # noqa: F401  (registers the spt_hf architectures with the Auto classes)

VOCAB = 32


def configs(d: int, length: int, layers: int) -> dict[str, AutoConfig]:
    """{name: config} of every bench_models.py model and backbone at width d."""
    built = {}
    for name, (model_type, extra) in MODELS.items():
        values = {"vocab_size": VOCAB, "hidden_size": d, "num_hidden_layers": layers, **extra}
        if model_type == "spt_linformer":
            values["projected_length"] = min(values["projected_length"], length)
        built[name] = AutoConfig.for_model(model_type, max_position_embeddings=length, **values)
    for name in BACKBONES:
        backbone = backbone_values(name, d, length, layers, VOCAB)
        built[f"{name} (spt_backbone)"] = AutoConfig.for_model(
            "spt_backbone", vocab_size=VOCAB, hidden_size=d, num_hidden_layers=layers, backbone_config=backbone
        )
    return built


def train(config, device: str, steps: int, batch: int, length: int) -> list[float]:
    """The bf16 autocast losses of `steps` masked-SPT steps (half the positions masked) on fixed random tokens."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(4, VOCAB, (batch, length), device=device)
    labels = torch.where(torch.rand(ids.shape, device=device) < 0.5, ids, -100)
    inputs = ids.masked_fill(labels != -100, 1)
    losses = []
    for _ in range(steps):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
    return losses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--models", nargs="*", help="names to run (default: all)")
    args = parser.parse_args()
    rows = []
    for name, config in configs(args.d, args.length, args.layers).items():
        if args.models and name not in args.models:
            continue
        losses = train(config, args.device, args.steps, args.batch, args.length)
        row = {
            "model": name,
            "device": args.device,
            "steps": len(losses),
            "first_loss": losses[0],
            "last_loss": losses[-1],
            "finite": all(math.isfinite(value) for value in losses) and len(losses) == args.steps,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| model | steps | first loss | last loss | finite |\n|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['model']} | {row['steps']} | {row['first_loss']:.4f} | {row['last_loss']:.4f} | {row['finite']} |"
        )
    return 0 if all(row["finite"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
