"""What a phase cost: floating-point operations of its training, counted on one real step.

`phase_compute` takes one batch of the phase's training set (its first `per_device_train_batch_size` examples,
collated by the phase's own collator, so padded as training pads them), runs forward and backward on it under spt_hf's
flop counter (`cost/flops.py`: torch's formulas, completed for FFTs, the CPU attention kernel and spt_hf's custom
operators; the same counter as the dry run's estimate), and multiplies: FLOPs per optimiser step = the counted
micro-batch × gradient-accumulation steps × processes; the phase's FLOPs = that × its optimiser steps. The
parameters' gradients are taken with `torch.autograd.grad` (the same backward, without touching `.grad`, the
optimiser or data-parallel hooks) and every buffer is restored afterwards, so counting changes nothing the phase then
evaluates or saves. Evaluation is not counted.

With inputs padded to the longest sequence of each batch (variable-length tasks), steps differ in length; the count
is that of the first batch, whose shape is recorded (`counted_batch`).
"""

import time

import torch

from .flops import flop_counter


def count_step_flops(model: torch.nn.Module, loss_fn) -> tuple[int, dict[str, int]]:
    """FLOPs of `loss_fn(model)` and its backward to every trainable parameter, in training mode, and per operation.
    The model's mode and buffers (running statistics, counters of forward passes) are as they were afterwards."""
    was_training = model.training
    buffers = {name: buffer.detach().clone() for name, buffer in model.named_buffers()}
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    try:
        with flop_counter() as counter:
            loss = loss_fn(model)
            torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return counter.get_total_flops(), by_op


def phase_compute(trainer) -> dict:
    """results.json's `compute` of a phase that has trained (module docstring): FLOPs per optimiser step and in all,
    the counted batch's shapes, and how long counting took."""
    args = trainer.args
    start = time.perf_counter()
    if trainer.is_fsdp_enabled:  # parameters are sharded across processes: no single-process step to count
        return {"flops": None, "flops_per_step": None, "note": "not counted under FSDP"}
    dataset = trainer.train_dataset
    size = min(args.per_device_train_batch_size, len(dataset))
    inputs = trainer._prepare_inputs(trainer.data_collator([dataset[i] for i in range(size)]))

    def loss_fn(model):
        with trainer.compute_loss_context_manager():
            return trainer.compute_loss(model, inputs)

    micro, by_op = count_step_flops(trainer.model, loss_fn)
    per_step = micro * args.gradient_accumulation_steps * args.world_size
    return {
        "flops": per_step * trainer.state.global_step,
        "flops_per_step": per_step,
        "counted_batch": {k: list(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)},
        "flops_by_operation": by_op,
        "count_seconds": round(time.perf_counter() - start, 4),
        "method": "torch.utils.flop_counter.FlopCounterMode on one forward + backward (spt_hf.cost.compute)",
    }
