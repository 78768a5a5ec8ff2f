"""The FLOPs a phase records (cost/compute.py): counts equal closed-form formulas of the same operations, torch's
counter is completed where it sees nothing (FFTs, the CPU attention kernel, spt_hf's custom operators), and counting
leaves the model as it was."""

import math

import pytest
import torch
from helpers import TINY_CONFIGS, make_config
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSequenceClassification

from spt_hf.cost.compute import count_step_flops
from spt_hf.cost.flops import flop_formulas
from spt_hf.modeling.ssm import fft_conv


def test_a_two_layer_network_costs_its_matmuls_forward_and_backward():
    """2·B·I·O per Linear forward; backward: the weight gradient of each layer and the input gradient of all but the
    first (the inputs need none): 2·B·I·O each."""
    batch, inputs, hidden, outputs = 8, 10, 12, 3
    model = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, outputs))
    x = torch.randn(batch, inputs)
    flops, by_op = count_step_flops(model, lambda m: m(x).square().sum())
    first, second = 2 * batch * inputs * hidden, 2 * batch * hidden * outputs
    assert flops == first + second + (first + 2 * second)
    assert set(by_op) == {"aten.addmm", "aten.mm"}


def test_the_fft_convolution_counts_its_transforms():
    """spt_hf's FFT convolution is one custom operator to torch's counter (which would count 0): its transforms are
    counted as 2.5·n·log2 n each, n = 2L: forward, one of the kernel and one each of the input and output rows."""
    batch, length, hidden = 3, 16, 4
    u, kernel, skip = torch.randn(batch, length, hidden), torch.randn(2, hidden, length), torch.randn(hidden)
    with FlopCounterMode(display=False) as plain:
        fft_conv(u, kernel, skip)
    assert plain.get_total_flops() == 0
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        fft_conv(u, kernel, skip)
    n = 2 * length
    assert counter.get_total_flops() == int(2.5 * n * math.log2(n) * hidden) + 2 * int(
        2.5 * n * math.log2(n) * batch * hidden
    )


def test_attention_on_the_cpu_counts_as_torch_counts_it_on_the_gpu():
    """torch has formulas for the CUDA attention kernels only; the CPU kernel gets the same one: 4·B·H·L²·D."""
    b, h, length, d = 2, 3, 16, 8
    q, k, v = (torch.randn(b, h, length, d) for _ in range(3))
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 4 * b * h * length * length * d


def test_a_depthwise_convolution_backward_costs_its_forward_per_gradient():
    """torch's own formula leaves the groups out of the weight gradient (6x too much here). A pointwise convolution
    (input a leaf: weight gradient only), then a depthwise one (input and weight gradients)."""
    pointwise, depthwise = torch.nn.Conv1d(6, 6, 1), torch.nn.Conv1d(6, 6, kernel_size=4, groups=6, padding=3)
    x = torch.randn(2, 6, 20)
    flops, by_op = count_step_flops(torch.nn.Sequential(pointwise, depthwise), lambda m: m(x).sum())
    first, second = 2 * 2 * 20 * 6 * 6, 2 * 2 * 23 * 4 * 6  # 2 · B · L_out · kernel · c_in/groups · c_out
    assert by_op == {"aten.convolution": first + second, "aten.convolution_backward": first + 2 * second}


@pytest.mark.parametrize(
    "entry",
    [e for e in TINY_CONFIGS if e[0] in ("s4-nplr", "transformer-absolute-postbn", "performer", "mega-chunk-laplace")],
    ids=lambda e: e[0],
)
def test_counting_leaves_the_model_as_it_was(entry):
    """Buffers that a training forward changes (BatchNorm statistics, Performer's forward counter and features), the
    mode and the gradients are as before; every architecture's main operations are counted."""
    config = make_config(entry, "tokens")
    config.num_labels = 3
    model = AutoModelForSequenceClassification.from_config(config).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(5, 19, (4, 12))
    labels = torch.randint(0, 3, (4,))
    flops, by_op = count_step_flops(model, lambda m: m(input_ids=ids, labels=labels).loss)
    assert not model.training and all(p.grad is None for p in model.parameters())
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0, msg=key)
    assert flops > 0 and flops == sum(by_op.values())
    if entry[1] == "spt_s4":
        assert by_op["spt_hf_v1.fft_conv"] > 0 and by_op["spt_hf_v1.paired_cauchy_backward"] > 0
