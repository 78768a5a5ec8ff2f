"""bf16 autocast training of every architecture: parameters stay fp32, SSM kernels and FFTs run in fp32, 200 steps
stay finite and end within a stated tolerance of the fp32 run; a diverged kernel raises instead of giving NaN."""

import math

import pytest
import torch
from helpers import TINY_CONFIGS, make_config
from transformers import AutoModelForMaskedLM

ARCHITECTURES = [entry for entry in TINY_CONFIGS if entry[0] in ("transformer-rotary", "s4-nplr", "s4d-postbn", "dlr")]
SSM = ARCHITECTURES[1:]
# The baselines' 200-step comparisons run in the slow suite (bf16 matmuls are slow on CPU: 40-90 s each on 2 cores);
# tests/models/test_baselines.py checks a bf16 training step of each in the default suite.
BASELINES = [
    entry for entry in TINY_CONFIGS if entry[0] in ("mega-chunk-laplace", "spade", "linformer-layerwise", "performer")
]
TRAINED = [pytest.param(entry, id=entry[0]) for entry in ARCHITECTURES] + [
    pytest.param(entry, marks=pytest.mark.slow, id=entry[0]) for entry in BASELINES
]
STEPS, TOLERANCE = 200, 0.15  # final-loss relative difference allowed between bf16 and fp32


def masked_batches(vocab: int, steps: int, batch: int = 8, length: int = 16):
    """A learnable masked-LM stream: sequences of a repeated random motif, half the positions masked."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        motif = torch.randint(4, vocab, (batch, 4), generator=generator)
        ids = motif.repeat(1, length // 4)
        selected = torch.rand(ids.shape, generator=generator) < 0.5
        yield {"input_ids": ids.masked_fill(selected, 1), "labels": torch.where(selected, ids, -100)}


def train(entry, bf16: bool) -> list[float]:
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(make_config(entry, hidden_size=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for batch in masked_batches(model.config.vocab_size, STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return losses


@pytest.mark.parametrize("entry", TRAINED)
def test_bf16_training_is_finite_and_close_to_fp32(entry):
    fp32, bf16 = train(entry, bf16=False), train(entry, bf16=True)
    assert all(math.isfinite(loss) for loss in bf16)
    final32, final16 = sum(fp32[-20:]) / 20, sum(bf16[-20:]) / 20  # mean of the last 20 steps
    assert final32 < 0.85 * fp32[0], "the fp32 run must learn for the comparison to mean anything"
    print(f"{entry[0]}: loss {fp32[0]:.3f} -> fp32 {final32:.4f}, bf16 {final16:.4f}")
    assert abs(final16 - final32) <= TOLERANCE * final32, (final16, final32)


@pytest.mark.parametrize("entry", SSM, ids=[entry[0] for entry in SSM])
def test_ssm_kernel_and_fft_run_in_fp32_under_autocast(entry):
    model = AutoModelForMaskedLM.from_config(make_config(entry, hidden_size=32))
    mixer = model.model.layers[0].blocks[0].mixer
    seen = {}

    def record(module, args, output):
        seen["kernel"] = output.dtype

    mixer.kernel.register_forward_hook(record)
    ids = torch.randint(4, 20, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    assert seen["kernel"] == torch.float32 and torch.isfinite(logits.float()).all()


def test_a_diverged_kernel_raises_instead_of_returning_nan():
    entry = next(entry for entry in TINY_CONFIGS if entry[0] == "s4d-postbn")
    model = AutoModelForMaskedLM.from_config(make_config(entry, hidden_size=32))
    kernel = model.model.layers[0].blocks[0].mixer.kernel
    with torch.no_grad():
        for parameter in kernel.parameters():
            parameter.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match=r"layer 0\).*non-finite"):
        model(input_ids=torch.randint(4, 20, (2, 16)))
