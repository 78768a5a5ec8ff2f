"""torch.compile over variable lengths: the kernels of S4 (NPLR: Cauchy sums and blocked powers; S4D), DLR and MEGA
do not guard on the exact input length (their blocks come from the config's length), so batches of 11 lengths,
padded by the collator to a multiple, compile to a handful of graphs and no graph break."""

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS, make_config
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters
from transformers import AutoModelForSequenceClassification

import spt_hf.modeling.modeling_s4 as s4_module
from spt_hf.data.collators import pad_tokens

LENGTHS = [5, 9, 16, 23, 31, 40, 47, 58, 64, 70, 90]
# (entry, overrides, NPLR's Cauchy work limit or None, most graphs). Padded to a multiple of 8 the 11 lengths are 10
# shapes; the graphs that remain come from guards on ranges: the first (static) and the dynamic graph, sizes 1 (one
# coarse block), and for NPLR's powers path each power of two of the length its rows cover.
CASES = {
    "s4-nplr-cauchy": ("s4-nplr", {"max_position_embeddings": 128}, 10**9, 3),
    "s4-nplr-powers": ("s4-nplr", {"max_position_embeddings": 128}, 0, 7),
    "s4d": ("s4d-postbn", {}, None, 5),
    "dlr": ("dlr", {}, None, 5),
    "mega": ("mega-chunk-laplace", {}, None, 5),
}


def compile_over_lengths(case: str, multiple: int | None, monkeypatch) -> tuple[int, int]:
    """(graphs, graph breaks) of one compiled forward + backward per length, padded to `multiple`."""
    name, overrides, cauchy_work, _ = CASES[case]
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
        compiled(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss.backward()
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return backend.frame_count, breaks


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c == "s4d" else [pytest.mark.slow]) for c in CASES])
def test_few_graphs_and_no_break_over_lengths(case, monkeypatch):
    graphs, breaks = compile_over_lengths(case, 8, monkeypatch)
    assert breaks == 0 and graphs <= CASES[case][3]


@pytest.mark.slow
def test_unpadded_lengths_still_one_dynamic_graph(monkeypatch):
    graphs, breaks = compile_over_lengths("dlr", None, monkeypatch)
    assert breaks == 0 and graphs <= 5
