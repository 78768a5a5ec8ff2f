"""Parameters that stay float32 under mixed precision: the SSM kernels' and MEGA's EMA.

Their kernels are computed in float32 (ssm.py), but from the parameters as stored: rounded to bf16 first, the whole
kernel is off by 10 % (S4 NPLR) to over 100 % (DLR with N = 1024). A module that must keep float32 parameters
derives from `Float32Parameters`; that is the one declaration, and everything here acts on it:

- `model.to(torch.bfloat16)` (or `.half()`, `.bfloat16()`) casts everything else and keeps these float32;
- `shard_float32_modules` gives them their own FSDP2 `fully_shard` unit with a float32 `MixedPrecisionPolicy`, so
  that a bf16 policy on the rest of the model does not round them (the Trainer does this before accelerate shards
  the model, see training/trainer.py);
- `float32_modules` lists them, for the checks of other mixed-precision paths;
- `Float32Parameters.kernel_dtype` refuses, in one line, to compute a kernel from half-precision parameters: a
  custom loop that shards the model with a bf16 policy and forgot `shard_float32_modules` fails at its first forward
  instead of training on kernels off by 10-100 %.
"""

import torch
from torch import nn

_HALF_DTYPES = (torch.float16, torch.bfloat16)


class Float32Parameters(nn.Module):
    """A module whose parameters stay float32 (float64 when cast to float64) when the model is cast to half
    precision: a cast to bf16/fp16 leaves its floating-point tensors in their previous dtype."""

    def _apply(self, fn, recurse: bool = True):
        def keep_precision(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.is_floating_point() and tensor.dtype not in _HALF_DTYPES:
                probe = fn(tensor.new_empty(0))  # what the cast does, without rounding the values
                if probe.dtype in _HALF_DTYPES:
                    return tensor.to(device=probe.device)
            return fn(tensor)

        return super()._apply(keep_precision, recurse)

    def kernel_dtype(self, parameter: torch.Tensor) -> torch.dtype:
        """The dtype the kernel is computed in from `parameter` (one the computation reads anyway): float64 for
        float64 (the tests), else float32. A half-precision parameter raises: something outside this module rounded it
        (an FSDP2 `MixedPrecisionPolicy` in bf16/fp16, accelerate's FSDP2 with mixed precision), and the kernel would
        be off by 10-100 %. A dtype comparison only: no host sync, one guard under torch.compile."""
        if parameter.dtype in _HALF_DTYPES:
            raise RuntimeError(
                f"{type(self).__name__}: its parameters are {parameter.dtype} when the kernel is computed (an FSDP2 "
                "mixed-precision policy rounded them, kernel errors of 10-100 %); call shard_float32_modules(model, "
                "mesh=...) from spt_hf.modeling.precision before fully_shard(model) or accelerator.prepare(model)."
            )
        return torch.float64 if parameter.dtype == torch.float64 else torch.float32

    def register_parameter(self, name: str, param: nn.Parameter | None) -> None:
        """Parameters created under a half-precision default dtype (`from_config(dtype=torch.bfloat16)`) are made
        float32."""
        if param is not None and param.dtype in _HALF_DTYPES:
            param = nn.Parameter(param.detach().float(), requires_grad=param.requires_grad)
        super().register_parameter(name, param)


def float32_modules(model: nn.Module) -> list[nn.Module]:
    """The `Float32Parameters` modules of `model` (outermost only) that hold parameters."""
    found: list[nn.Module] = []
    for module in model.modules():
        nested = any(module in outer.modules() for outer in found)
        if isinstance(module, Float32Parameters) and not nested and any(True for _ in module.parameters()):
            found.append(module)
    return found


def float32_module_patterns(model: nn.Module) -> set[str]:
    r"""Module names of the float32 modules (`mixer.kernel`, `mixer.ema`) for transformers'
    `_keep_in_fp32_modules_strict`, which keeps them float32 when `from_pretrained` loads in bf16/fp16.

    transformers matches each entry as a whole dotted name inside a parameter's name (`(?:^|\.)NAME(?:\.|$)` in its
    own tests, a substring in the loader), so an entry is a module name without a trailing dot."""
    kept = {id(module) for module in float32_modules(model)}
    names = {name for name, module in model.named_modules() if id(module) in kept}
    return {".".join(name.split(".")[-2:]) for name in names}


def float32_policy():
    """FSDP2's `MixedPrecisionPolicy` of the float32 modules: parameters gathered and gradients reduced in float32;
    forward inputs are not cast (their outputs follow the input dtype, as without sharding)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=False)


def shard_float32_modules(model: nn.Module, **fully_shard_kwargs) -> int:
    """`fully_shard` each float32 module of `model` with `float32_policy()` (other keyword arguments as given: mesh,
    reshard_after_forward, ...) before the model itself is sharded; returns how many were sharded. Modules already
    sharded are left alone."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    count = 0
    for module in float32_modules(model):
        if not isinstance(module, FSDPModule):
            fully_shard(module, **{**fully_shard_kwargs, "mp_policy": float32_policy()})
            count += 1
    return count
