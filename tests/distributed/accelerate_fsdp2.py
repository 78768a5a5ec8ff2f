"""accelerate's own FSDP2 loop with bf16 (`Accelerator(mixed_precision="bf16")` + `accelerator.prepare`) on one gloo
rank, as a user's training script runs it: prints the largest relative error of the float32 modules' kernels against
the unsharded float32 model, and spt_hf's one-line refusal at the first forward without the float32 units.

    python accelerate_fsdp2.py CASE RENDEZVOUS_FILE     (CASE: a key of test_precision.CASES)

Prints `relative error E` with `shard_float32_modules` called before `prepare` (the documented custom-loop recipe),
then `refused: MESSAGE` if the same loop without it raises.
accelerate turns FSDP on for GPU process types only; on CPU the script sets the state's type to FSDP itself, after which
`prepare` runs accelerate's own FSDP2 code (`fsdp2_prepare_model`: `fully_shard` with the plugin's bf16 policy).
"""

import sys

import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.utils import DistributedType
from test_precision import build, kernels, relative_error
from torch.distributed.fsdp import FSDPModule

from spt_hf.modeling.precision import shard_float32_modules


def fsdp2_accelerator() -> Accelerator:
    """An Accelerator whose `prepare` shards with FSDP2 and a bf16 mixed-precision policy."""
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator = Accelerator(mixed_precision="bf16")
    plugin.set_mixed_precision("bf16")
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin
    return accelerator


def prepared(case: str, shard: bool, monkeypatch) -> tuple[torch.nn.Module, object]:
    """The case's model through `accelerator.prepare`, after `shard_float32_modules` when `shard`."""
    model, config = build(case, monkeypatch)
    if shard:
        shard_float32_modules(model)
    model, _ = fsdp2_accelerator().prepare(model, torch.optim.AdamW(model.parameters()))
    assert isinstance(model, FSDPModule)  # accelerate sharded the model itself
    return model, config


def main(case: str, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        reference = kernels(*build(case, monkeypatch))
        print(f"relative error {relative_error(kernels(*prepared(case, True, monkeypatch)), reference):.3e}")
        try:
            kernels(*prepared(case, False, monkeypatch))
        except RuntimeError as error:
            print(f"refused: {error}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
