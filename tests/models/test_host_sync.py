"""No host synchronisation in a training step: one forward + backward of every architecture and head (tokens and
continuous, padded, BatchNorm included) under a dispatch mode that records the operators that make a GPU wait for
the host (a value read with `.item()`/`int()`/`bool()`, `nonzero`, boolean indexing, linalg error checks), with the
value checks off as the Trainer runs its steps (`value_checks(model, enabled=False)`). The mode itself is checked
to see each kind."""

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS
from test_modeling_common import HEADS, build, head_inputs
from torch.utils._python_dispatch import TorchDispatchMode

from spt_hf.modeling.value_checks import value_checks

aten = torch.ops.aten
SYNCING = {
    aten._local_scalar_dense.default,  # .item(), int(t), bool(t), float(t)
    aten.nonzero.default,
    aten.nonzero_static.default,
    aten.masked_select.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.repeat_interleave.Tensor,
    aten._linalg_check_errors.default,  # torch.linalg.solve/inv/cholesky raise on a singular input: a host read
    aten.equal.default,
    aten.is_nonzero.default,
}


class SyncRecorder(TorchDispatchMode):
    """Records the synchronising operators dispatched inside it (boolean-mask indexing too)."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        indices = args[1] if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) else ()
        if func in SYNCING or any(i is not None and i.dtype == torch.bool for i in indices):
            self.found.append(str(func))
        return func(*args, **kwargs)


def test_the_recorder_sees_each_kind():
    x = torch.randn(4, 4)
    with SyncRecorder() as recorder:
        x.sum().item()
        x[x > 0]
        torch.linalg.solve(x + 4 * torch.eye(4), x)
        torch.linalg.solve_ex(x + 4 * torch.eye(4), x)
        x.nonzero()
    assert len(recorder.found) == 4 and "aten._linalg_check_errors.default" in recorder.found


def training_step_syncs(entry, head: str, input_kind: str) -> list[str]:
    """The synchronising operators of one forward + backward; every parameter must also get a gradient (the Trainer
    runs DDP with `ddp_find_unused_parameters=False`)."""
    model = build(entry, head, input_kind).train()
    inputs = head_inputs(model, head)
    with value_checks(model, enabled=False), SyncRecorder() as recorder:
        outputs = model(**inputs)
        loss = outputs.last_hidden_state.sum() if head == "model" else outputs.loss
        loss.backward()
    if head != "model":
        unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
        recorder.found += [f"unused parameter {name}" for name in unused]
    return recorder.found


SPT_CONFIGS = [entry for entry in TINY_CONFIGS if entry[1] != "spt_backbone"]


@pytest.mark.parametrize("entry", SPT_CONFIGS, ids=[entry[0] for entry in SPT_CONFIGS])
def test_no_host_sync_in_a_training_step(entry):
    found = {
        f"{head}/{kind}": syncs
        for head in HEADS
        for kind in ("tokens", "continuous")
        if head != "causal_lm" or entry[0] != "linformer-layerwise"
        if (syncs := training_step_syncs(entry, head, kind))
    }
    assert not found


def test_no_host_sync_on_the_nplr_powers_path(monkeypatch):
    import spt_hf.modeling.modeling_s4 as s4_module

    monkeypatch.setattr(s4_module, "_CAUCHY_MAX_WORK", 0)  # NPLR's blocked powers (and its linear solve)
    entry = TINY_CONFIGS[TINY_IDS.index("s4-nplr")]
    assert not training_step_syncs(entry, "masked_lm", "tokens")


def test_kernels_run_without_tf32(monkeypatch):
    """A user's TF32 setting is off while an SSM/EMA kernel is computed, and back on after."""
    from spt_hf.modeling.modeling_mega import MegaEMA
    from spt_hf.modeling.modeling_s4 import S4KernelNPLR

    seen = []

    def recording(compute):
        def wrapped(self, length):
            seen.append(torch.backends.cuda.matmul.allow_tf32)
            return compute(self, length)

        return wrapped

    monkeypatch.setattr(S4KernelNPLR, "forward", recording(S4KernelNPLR.forward))
    monkeypatch.setattr(MegaEMA, "kernel", recording(MegaEMA.kernel))
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for name in ("s4-nplr", "mega-chunk-laplace"):
            model = build(TINY_CONFIGS[TINY_IDS.index(name)], "model")
            model(**head_inputs(model, "model"))
        assert len(seen) == 4 and not any(seen) and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def test_value_checks_on_by_default_read_the_host():
    entry = TINY_CONFIGS[TINY_IDS.index("s4-nplr")]
    model = build(entry, "model")
    assert model.config.check_values
    with SyncRecorder() as recorder:
        model(**head_inputs(model, "model"))
    assert "aten._local_scalar_dense.default" in recorder.found


BACKBONES = [entry for entry in TINY_CONFIGS if entry[1] == "spt_backbone"]


@pytest.mark.parametrize("entry", BACKBONES, ids=[entry[0] for entry in BACKBONES])
def test_every_backbone_parameter_gets_a_gradient(entry):
    """transformers' layers inside spt_backbone too (the Trainer's `ddp_find_unused_parameters=False`)."""
    for head in ("masked_lm", "classification"):
        model = build(entry, head).train()
        model(**head_inputs(model, head)).loss.backward()
        assert [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None] == []


def test_compiled_performer_redraws_when_counted_outside_the_graph():
    """A compiled forward does not count (no graph break); the Trainer's eager count before each step redraws."""
    entry = TINY_CONFIGS[TINY_IDS.index("performer")]
    model = build(entry, "model", feature_redraw_interval=2).train()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    inputs = head_inputs(model, "model")
    first = model.attention_layers()[0].projection
    for _ in range(3):
        model.count_training_call()
        compiled(**inputs)
    assert int(model.feature_draws) == 1 and int(model.forward_calls) == 1
    assert not torch.equal(model.attention_layers()[0].projection, first)
