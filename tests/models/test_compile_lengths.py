"""torch.compile over variable lengths: two graphs (the first length static, then one dynamic graph) and no graph
break for every architecture over 11 lengths. The kernels of S4 (NPLR: Cauchy sums and blocked powers; S4D), DLR and
MEGA take their blocks from the config's length and, under compile, cover more than the input (ssm.coarse_count,
S4KernelNPLR._powers_kernel, MEGA's chunk padding), so no guard depends on the exact length or on a range of lengths.
Run with TORCH_LOGS=recompiles to see the guard behind any further graph."""

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS, make_config
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters
from transformers import AutoModelForSequenceClassification

import spt_hf.modeling.modeling_s4 as s4_module
from spt_hf.data.collators import pad_tokens

LENGTHS = [5, 9, 16, 23, 31, 40, 47, 58, 64, 70, 90]
GRAPHS = 2  # the first length static, every other length in one dynamic graph
# (entry, overrides, NPLR's Cauchy work limit or None). The NPLR cases set max_position_embeddings above the longest
# length (the Cauchy path serves lengths up to it; the powers path is forced by a work limit of 0).
CASES = {
    "s4-nplr-cauchy": ("s4-nplr", {"max_position_embeddings": 128}, 10**9),
    "s4-nplr-powers": ("s4-nplr", {"max_position_embeddings": 128}, 0),
    "s4d": ("s4d-postbn", {}, None),
    "dlr": ("dlr", {"max_position_embeddings": 8}, None),  # blocks of c = 16 (√(8·H)): 1 to 6 of them
    "mega": ("mega-chunk-laplace", {}, None),
    "transformer": ("transformer-rotary", {}, None),
}


def compile_over_lengths(case: str, multiple: int | None, monkeypatch) -> tuple[int, int]:
    """(graphs, graph breaks) of one compiled forward + backward per length, padded to `multiple`; each compiled loss
    equals the eager one."""
    name, overrides, cauchy_work = CASES[case]
    if cauchy_work is not None:
        monkeypatch.setattr(s4_module, "_CAUCHY_MAX_WORK", cauchy_work)
    torch.manual_seed(0)
    config = make_config(TINY_CONFIGS[TINY_IDS.index(name)], num_hidden_layers=1, **overrides)
    model = AutoModelForSequenceClassification.from_config(config).train()
    torch._dynamo.reset()
    counters.clear()
    backend = CompileCounter()
    compiled = torch.compile(model, backend=backend)
    generator = torch.Generator().manual_seed(0)
    for length in LENGTHS:
        ids, mask = pad_tokens(
            [torch.randint(4, 20, (n,), generator=generator) for n in (length, length // 2 + 1)], multiple
        )
        inputs = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1])}
        loss = compiled(**inputs).loss  # the compiled kernels cover more than the length: the same loss as eagerly
        torch.testing.assert_close(loss, model(**inputs).loss, rtol=1e-5, atol=1e-6)
        loss.backward()
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return backend.frame_count, breaks


@pytest.mark.parametrize("case", list(CASES))  # 3-6 s each on 2 CPU cores
def test_two_graphs_and_no_break_over_lengths(case, monkeypatch):
    assert compile_over_lengths(case, 8, monkeypatch) == (GRAPHS, 0)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dlr", "s4-nplr-powers"])
def test_unpadded_lengths_still_one_dynamic_graph(case, monkeypatch):
    assert compile_over_lengths(case, None, monkeypatch) == (GRAPHS, 0)
