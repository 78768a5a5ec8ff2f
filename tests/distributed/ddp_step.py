"""One optimiser step of every tiny architecture under `accelerate launch` (2 processes, gloo on CPU), with DDP
(`ddp`) or FSDP2 full sharding per SequenceLayer (`fsdp`).

Each process takes its half of a fixed global batch; rank 0 saves parameters and buffers after the step, which
test_distributed.py compares with one process stepping on the whole global batch.
"""

import sys

import torch
from accelerate import Accelerator

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from helpers import TINY_CONFIGS, make_config  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

GLOBAL_BATCH, LENGTH = 8, 12


def global_batch(config) -> dict:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(GLOBAL_BATCH, LENGTH, dtype=torch.long)
    mask[1::3, 8:] = 0  # some padding, different per example
    labels = torch.randint(0, config.num_labels, (GLOBAL_BATCH,), generator=generator)
    if config.is_token_input:
        ids = torch.randint(4, config.vocab_size, (GLOBAL_BATCH, LENGTH), generator=generator)
        return {"input_ids": ids * mask, "attention_mask": mask, "labels": labels}
    values = torch.randn(GLOBAL_BATCH, LENGTH, config.num_channels, generator=generator)
    return {"input_values": values, "attention_mask": mask, "labels": labels}


def fsdp_wrap(model):
    """FSDP2 full sharding with each layer as a unit (what recipes/accelerate/fsdp.yaml asks for): spt_hf's
    SequenceLayer, or a transformers backbone's own layers (both are GradientCheckpointingLayer)."""
    from torch.distributed.fsdp import fully_shard
    from transformers.modeling_layers import GradientCheckpointingLayer

    for layer in [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]:
        fully_shard(layer)
    return fully_shard(model)


def one_step(entry, input_kind: str, accelerator: Accelerator | None, fsdp: bool = False) -> dict:
    torch.manual_seed(0)
    config = make_config(entry, input_kind, hidden_dropout_prob=0.0)
    model = AutoModelForSequenceClassification.from_config(config)
    # SGD: the update is the gradient itself (the first Adam step is ~lr·sign(g), which amplifies float noise).
    batch = global_batch(config)
    if fsdp:
        model = fsdp_wrap(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if accelerator is not None and not fsdp:
        model, optimizer = accelerator.prepare(model, optimizer)
    if accelerator is not None:
        rank, world = accelerator.process_index, accelerator.num_processes
        share = GLOBAL_BATCH // world
        batch = {key: value[rank * share : (rank + 1) * share].to(accelerator.device) for key, value in batch.items()}
    model.train()
    loss = model(**batch).loss
    (accelerator.backward(loss) if accelerator is not None and not fsdp else loss.backward())
    optimizer.step()
    unwrapped = accelerator.unwrap_model(model) if accelerator is not None and not fsdp else model
    state = unwrapped.state_dict()
    full = {name: t.full_tensor() if hasattr(t, "full_tensor") else t for name, t in state.items()}  # unshard
    return {name: tensor.detach().cpu().clone() for name, tensor in full.items()}


def main(out_path: str, mode: str = "ddp") -> None:
    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # gloo on CPU-only machines
    if mode == "fsdp" and not torch.distributed.is_initialized():  # one process started without a launcher
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
    print(f"rank {accelerator.process_index} of {accelerator.num_processes} ready ({mode})", flush=True)
    states = {}
    for entry in TINY_CONFIGS:
        for input_kind in ("tokens", "continuous"):
            states[f"{entry[0]}/{input_kind}"] = one_step(entry, input_kind, accelerator, fsdp=mode == "fsdp")
    if accelerator.is_main_process:
        torch.save(states, out_path)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # tear the process group down before exit (no gloo threads left running)


if __name__ == "__main__":
    main(*sys.argv[1:])
