"""accelerate's own FSDP2 loop with bf16 (`Accelerator(mixed_precision="bf16")` + `accelerator.prepare`) on one gloo
rank, as a user's training script runs it: prints the largest relative error of the float32 modules' kernels against
the unsharded float32 model, or fails at the first forward with spt_hf's one-line refusal.

    python accelerate_fsdp2.py CASE shard|plain RENDEZVOUS_FILE     (CASE: a key of test_precision.CASES)

`shard` calls `shard_float32_modules` before `prepare` (the documented custom-loop recipe), `plain` does not.
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


def main(case: str, mode: str, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        reference = kernels(*build(case, monkeypatch))
        model, config = build(case, monkeypatch)
        if mode == "shard":
            shard_float32_modules(model)
        accelerator = fsdp2_accelerator()
        model, _ = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
        assert isinstance(model, FSDPModule)  # accelerate sharded the model itself
        print(f"relative error {relative_error(kernels(model, config), reference):.3e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
