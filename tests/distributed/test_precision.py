"""SSM and EMA parameters stay float32 under mixed precision (modeling/precision.py): FSDP2 with one gloo rank and a
bf16 `MixedPrecisionPolicy` computes the kernels of S4 (NPLR: Cauchy and powers paths; S4D), DLR and MEGA's EMA
exactly as the unsharded float32 model; without the float32 units the kernels refuse their bf16 parameters in one line
(a user's own `fully_shard` loop, and accelerate's FSDP2 loop in a subprocess); `model.to(torch.bfloat16)` keeps those
parameters float32."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import VOCAB_SIZE, make_config

import spt_hf.modeling.modeling_s4 as s4_module
from spt_hf.modeling.precision import Float32Parameters, float32_modules, shard_float32_modules

LENGTH = 64
CASES = {
    "s4-nplr-cauchy": ("spt_s4", {"state_size": 16, "max_position_embeddings": LENGTH}, 10**9),
    "s4-nplr-powers": ("spt_s4", {"state_size": 16, "max_position_embeddings": LENGTH}, 0),
    "s4d": ("spt_s4", {"kernel": "diag", "state_size": 16}, None),
    "dlr": ("spt_dlr", {"state_size": 256}, None),
    "mega": ("spt_mega", {"ema_projection_size": 4, "shared_representation_size": 16, "intermediate_size": 64}, None),
}


@pytest.fixture(scope="module")
def mesh():
    """A one-rank gloo process group and CPU device mesh, torn down after the module (other tests see none)."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def build(case: str, monkeypatch):
    """A tiny base model of the case (seeded) and its kernel-computing modules."""
    model_type, kwargs, cauchy_work = CASES[case]
    if cauchy_work is not None:
        monkeypatch.setattr(s4_module, "_CAUCHY_MAX_WORK", cauchy_work)
    torch.manual_seed(0)
    config = make_config(("", model_type, kwargs), hidden_size=32, num_hidden_layers=1)
    from transformers import AutoModel

    return AutoModel.from_config(config).eval(), config


def kernels(model, config) -> list[torch.Tensor]:
    """The kernels every float32 module computes during one forward (recorded, float32)."""
    recorded: list[torch.Tensor] = []
    for module in float32_modules(model):
        if hasattr(module, "omega"):  # MEGA's EMA: its kernel is a method called inside its forward

            def record(length, _compute=module.kernel):
                out = _compute(length)
                recorded.append(out.detach().clone())
                return out

            module.kernel = record
        else:
            module.register_forward_hook(lambda mod, args, out: recorded.append(out.detach().clone()))
    ids = torch.randint(4, VOCAB_SIZE, (2, LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(input_ids=ids)
    assert recorded
    return recorded


def relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(((g.double() - w.double()).norm() / w.double().norm()).item() for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("case", list(CASES))
def test_fsdp2_bf16_policy_keeps_kernels_float32(case, mesh, monkeypatch):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reference = kernels(*build(case, monkeypatch))
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, config = build(case, monkeypatch)
    assert shard_float32_modules(model, mesh=mesh) == len(float32_modules(model)) >= 1
    fully_shard(model, mesh=mesh, mp_policy=bf16)
    assert all(k.dtype == torch.float32 for k in kernels(model, config))
    assert relative_error(kernels(model, config), reference) < 1e-6
    rounded, config = build(case, monkeypatch)  # the same policy without the float32 units: refused, not rounded
    fully_shard(rounded, mesh=mesh, mp_policy=bf16)
    with pytest.raises(RuntimeError, match=r"torch.bfloat16 when the kernel is computed.*shard_float32_modules"):
        kernels(rounded, config)


def run_accelerate_fsdp2(case: str, tmp_path) -> str:
    """tests/distributed/accelerate_fsdp2.py in a fresh process (accelerate's state and the process group are
    process-wide); its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    script = Path(__file__).with_name("accelerate_fsdp2.py")
    command = [sys.executable, str(script), case, str(tmp_path / "rendezvous")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("case", ["s4-nplr-cauchy", "dlr"])
def test_accelerate_fsdp2_loop_is_exact_with_float32_units_and_refused_without(case, tmp_path):
    """A custom loop through accelerate's FSDP2 with bf16: exact kernels after `shard_float32_modules`; without it the
    first forward fails with the one-line refusal (was: kernels off by 10-110 %, silently)."""
    output = run_accelerate_fsdp2(case, tmp_path)
    assert float(output.split("relative error ", 1)[1].split()[0]) < 1e-6
    refusal = output.split("refused: ", 1)[1].strip()
    assert "torch.bfloat16 when the kernel is computed" in refusal and "shard_float32_modules" in refusal
    assert "\n" not in refusal  # one line


@pytest.mark.parametrize("case", ["s4-nplr-powers", "s4d", "dlr", "mega"])
def test_bfloat16_cast_keeps_ssm_parameters(case, monkeypatch):
    model, config = build(case, monkeypatch)
    reference = kernels(model, config)
    model, config = build(case, monkeypatch)
    model.to(torch.bfloat16)
    kept = [p for module in float32_modules(model) for p in module.parameters()]
    assert kept and all(p.dtype == torch.float32 for p in kept)
    assert model.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    assert relative_error(kernels(model, config), reference) < 1e-6
    model.double()  # float64 (the tests' precision) still reaches them
    assert all(p.dtype == torch.float64 for p in kept)


def test_float32_modules_are_outermost():
    outer = Float32Parameters()
    outer.inner = Float32Parameters()
    outer.inner.weight = torch.nn.Parameter(torch.ones(1))
    assert float32_modules(torch.nn.Sequential(outer)) == [outer]


def accelerator(mixed_precision: str, deepspeed=None, fsdp_version: int | None = None):
    """A stand-in of accelerate's Accelerator with what `keep_float32_parameters` reads."""
    from types import SimpleNamespace

    plugin = None
    if fsdp_version is not None:
        plugin = SimpleNamespace(fsdp_version=fsdp_version, reshard_after_forward=True, cpu_offload=None)
    state = SimpleNamespace(deepspeed_plugin=deepspeed, fsdp_plugin=plugin)
    return SimpleNamespace(mixed_precision=mixed_precision, state=state, torch_device_mesh=None)


def test_trainer_path_shards_fsdp2_and_refuses_deepspeed_and_fsdp1(mesh, monkeypatch):
    from spt_hf.training.trainer import keep_float32_parameters

    model, _ = build("s4d", monkeypatch)
    with pytest.raises(ValueError, match="DeepSpeed with mixed_precision: bf16"):
        keep_float32_parameters(model, accelerator("bf16", deepspeed=object()))
    with pytest.raises(ValueError, match="fsdp_version: 2"):
        keep_float32_parameters(model, accelerator("bf16", fsdp_version=1), shard=False)
    assert keep_float32_parameters(model, accelerator("no", deepspeed=object())) == 0
    assert keep_float32_parameters(model, accelerator("bf16")) == 0  # DDP: autocast, nothing to shard
    assert keep_float32_parameters(model, accelerator("bf16", fsdp_version=2), shard=False) == 0
    assert keep_float32_parameters(model, accelerator("bf16", fsdp_version=2)) == 1


@pytest.mark.parametrize("case", ["s4-nplr-powers", "dlr", "mega"])
def test_from_pretrained_in_bfloat16_loads_ssm_parameters_exactly(case, monkeypatch, tmp_path):
    from transformers import AutoModel

    model, _ = build(case, monkeypatch)
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path, dtype=torch.bfloat16)
    saved = dict(model.named_parameters())
    kept = {name for module in float32_modules(loaded) for name, _ in module.named_parameters()}
    checked = 0
    for name, param in loaded.named_parameters():
        if name.rsplit(".", 1)[-1] in kept and (".kernel." in name or ".ema." in name):
            assert param.dtype == torch.float32 and torch.equal(param, saved[name]), name
            checked += 1
        elif name.endswith("word_embeddings.weight"):
            assert param.dtype == torch.bfloat16
    assert checked >= 3
    fresh = AutoModel.from_config(loaded.config, dtype=torch.bfloat16)
    assert all(p.dtype == torch.float32 for m in float32_modules(fresh) for p in m.parameters())


@pytest.mark.parametrize("case", ["s4-nplr-powers", "s4d", "dlr", "mega"])
def test_keep_in_fp32_declaration_matches_as_transformers_matches(case, monkeypatch):
    """transformers' `test_keep_in_fp32_modules(_exist)` match a declared name as `(?:^|\\.)NAME(?:\\.|$)`: it must
    select exactly the float32 modules' parameters."""
    import re

    model, _ = build(case, monkeypatch)
    declared = model._keep_in_fp32_modules_strict
    kept = {id(p) for module in float32_modules(model) for p in module.parameters()}
    for name, param in model.named_parameters():
        matched = any(re.search(rf"(?:^|\.){key}(?:\.|$)", name) for key in declared)
        assert matched == (id(param) in kept), name
