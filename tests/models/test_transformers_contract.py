"""The transformers model contract, stated through the public API for every architecture of TINY_CONFIGS:
tuple outputs, hidden states and attentions, `inputs_embeds`, tied weights, generation (with and without the cache,
hidden states and scores in `return_dict_in_generate`, assisted decoding), `main_input_name`, RoPE types,
`torch.export` and `torch.compile` (without graph breaks)."""

import pytest
import torch
from helpers import TINY_CONFIGS, TINY_IDS, make_config, make_inputs, marked_slow
from test_modeling_common import HEADS, build, head_inputs
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM
from transformers.modeling_outputs import ModelOutput

from spt_hf.modeling.modeling_sequence import SequencePreTrainedModel

ATTENTION = [e for e in TINY_CONFIGS if e[1] == "spt_rotary_transformer"]
# Tracing transformers' Mamba scans (Python loops over positions and chunks) costs 5-20 s per model on 2 cores: the
# default suite exports Mamba2 and compiles the attention backbones but GPT-NeoX; `make test-slow` traces them all.
SLOW_EXPORT = {"backbone-mamba"}
SLOW_COMPILE = {"backbone-mamba", "backbone-mamba2", "backbone-gpt_neox"}
LAYERS = 2  # make_config's num_hidden_layers


def assert_same(a, b) -> None:
    if torch.is_tensor(a):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b or (a is None and b is None)


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_return_dict_false_gives_the_tuple_of_the_output_fields(entry, head):
    model = build(entry, head).eval()
    inputs = head_inputs(model, head)
    with torch.no_grad():
        as_dict = model(**inputs, output_hidden_states=True)
        as_tuple = model(**inputs, output_hidden_states=True, return_dict=False)
        model.config.return_dict = False
        from_config = model(**inputs, output_hidden_states=True)
    assert isinstance(as_dict, ModelOutput) and type(as_tuple) is tuple and type(from_config) is tuple
    expected = as_dict.to_tuple()  # transformers' order: the fields in declaration order, None left out
    assert_same(as_tuple, expected)
    assert_same(from_config, expected)
    if head != "model":
        first = [as_dict.loss, as_dict.logits]
        assert_same(list(as_tuple[:2]), first)  # `loss, logits = model(..., return_dict=False)`


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_hidden_states_are_the_embedding_output_and_one_per_layer(entry, head):
    model = build(entry, head).eval()
    inputs = head_inputs(model, head)
    batch, length = inputs["attention_mask"].shape
    with torch.no_grad():
        outputs = model(**inputs, output_hidden_states=True)
        backbone = model.model if hasattr(model, "model") else model
        keys = ("input_ids", "input_values", "attention_mask", "mask_positions")
        last = backbone(**{k: v for k, v in inputs.items() if k in keys}).last_hidden_state
    hidden = outputs.hidden_states
    assert len(hidden) == LAYERS + 1 and all(h.shape == (batch, length, 32) for h in hidden)
    if head == "retrieval":
        assert len(outputs.hidden_states_2) == LAYERS + 1
    if head in ("model", "masked_lm", "classification"):
        torch.testing.assert_close(hidden[-1], last)  # the last one is after the final norm
    model.config.output_hidden_states = True
    with torch.no_grad():
        assert len(model(**inputs).hidden_states) == LAYERS + 1


@pytest.mark.parametrize("entry", ATTENTION, ids=[e[0] for e in ATTENTION])
def test_eager_attention_returns_the_attention_probabilities(entry):
    model = build(entry, "classification", attn_implementation="eager").eval()
    inputs = make_inputs(model.config, pad_last=3)
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
        plain = model(**inputs)
    attentions = outputs.attentions
    batch, length = inputs["attention_mask"].shape
    heads = model.config.num_attention_heads
    assert len(attentions) == LAYERS and all(a.shape == (batch, heads, length, length) for a in attentions)
    real = inputs["attention_mask"].bool()
    for a in attentions:
        torch.testing.assert_close(
            a.sum(-1)[real.unsqueeze(1).expand(-1, heads, -1)],
            torch.ones(()).expand(int(real.sum()) * heads),
            rtol=1e-5,
            atol=1e-5,
        )
        assert not a[:, :, :, ~real[-1]][-1].any(), "a padded key gets no attention"
    torch.testing.assert_close(outputs.logits, plain.logits, rtol=1e-5, atol=1e-5)
    if entry[2].get("attention_window"):  # block-local: nothing outside its own block and one on each side
        window = entry[2]["attention_window"]
        blocks = torch.arange(length) // window
        far = (blocks[:, None] - blocks[None, :]).abs() > 1
        assert not attentions[0][:, :, far].any()


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("entry", ATTENTION, ids=[e[0] for e in ATTENTION])
def test_attention_outputs_count_as_transformers_counts_them(entry, head):
    """transformers' `test_attention_outputs`: with `output_attentions`, one attention per layer of every document
    read; adding `output_hidden_states` adds one field per document (`num_hidden_states_types`: the retrieval head's
    tester says 2, for `hidden_states` and `hidden_states_2`), and the attentions stay as they were."""
    model = build(entry, head, attn_implementation="eager").eval()
    inputs = {k: v for k, v in head_inputs(model, head).items() if k != "labels"}
    with torch.no_grad():
        attentions_only = model(**inputs, output_attentions=True)
        both = model(**inputs, output_attentions=True, output_hidden_states=True)
    documents = 2 if head == "retrieval" else 1
    assert len(both) == len(attentions_only) + documents
    batch, length = inputs["attention_mask"].shape
    shape = (batch, model.config.num_attention_heads, length, length)
    fields = ("attentions", "attentions_2")[:documents]
    for outputs in (attentions_only, both):
        for name in fields:
            assert len(outputs[name]) == LAYERS and all(a.shape == shape for a in outputs[name])


@pytest.mark.parametrize("input_kind", ["tokens", "continuous"])
@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_inputs_embeds_equal_the_embedded_inputs(entry, input_kind):
    model = build(entry, "classification", input_kind).eval()
    inputs = make_inputs(model.config, pad_last=2)
    embeddings = model.model.embeddings
    with torch.no_grad():
        if model.config.is_token_input:
            embedded = model.get_input_embeddings()(inputs.pop("input_ids"))
        else:
            embedded = embeddings.input_projection(inputs.pop("input_values"))
        reference = model(**make_inputs(model.config, pad_last=2)).logits
        torch.testing.assert_close(model(inputs_embeds=embedded, **inputs).logits, reference, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"Expected `inputs_embeds` of shape \(B, L, 32\)"):
        model(inputs_embeds=embedded[..., :8], **inputs)


@pytest.mark.parametrize("head", ["masked_lm", "causal_lm"])
@pytest.mark.parametrize("entry", TINY_CONFIGS[:1] + TINY_CONFIGS[3:4], ids=["transformer", "s4"])
def test_tied_word_embeddings_share_one_matrix_when_asked(entry, head, tmp_path):
    untied = build(entry, head)
    assert untied.lm_head.weight is not untied.get_input_embeddings().weight  # the paper's default: not tied
    model = build(entry, head, tie_word_embeddings=True)
    assert model.lm_head.weight is model.get_input_embeddings().weight
    model.save_pretrained(tmp_path)
    loaded = HEADS[head].from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.get_input_embeddings().weight
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight)
    loaded.resize_token_embeddings(28)
    assert loaded.lm_head.weight is loaded.get_input_embeddings().weight and loaded.lm_head.weight.shape[0] == 28
    with pytest.raises(ValueError, match="tie_word_embeddings=True` ties the LM head to the token embedding"):
        make_config(entry, "continuous", tie_word_embeddings=True)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_generate_with_and_without_the_cache_and_its_outputs(entry):
    model = build(entry, "causal_lm").eval()
    prompt = make_inputs(model.config, batch=2, length=4)["input_ids"]
    greedy = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    cached = model.generate(prompt, **greedy)
    uncached = model.generate(prompt, **greedy, use_cache=False)  # runs the whole sequence at every step
    assert torch.equal(cached, uncached)
    out = model.generate(prompt, **greedy, output_hidden_states=True, output_scores=True, return_dict_in_generate=True)
    assert torch.equal(out.sequences, cached)
    assert len(out.scores) == 5 and out.scores[0].shape == (2, model.config.vocab_size)
    assert len(out.hidden_states) == 5 and all(len(step) == LAYERS + 1 for step in out.hidden_states)
    assert out.hidden_states[0][0].shape == (2, 4, 32) and out.hidden_states[1][-1].shape == (2, 1, 32)
    inputs = model.prepare_inputs_for_generation(
        prompt, output_hidden_states=True, position_ids=torch.arange(4).expand(2, 4), use_cache=False
    )
    assert inputs["output_hidden_states"] is True and inputs["position_ids"].shape == (2, 4)
    beams = model.generate(
        prompt, max_new_tokens=3, num_beams=2, num_return_sequences=2, do_sample=False, pad_token_id=0
    )
    assert beams.shape == (4, 7)


@pytest.mark.parametrize("entry", TINY_CONFIGS, ids=TINY_IDS)
def test_assisted_decoding_is_exact_or_refused_by_transformers(entry):
    model = build(entry, "causal_lm").eval()
    assistant = build(entry, "causal_lm", seed=5).eval()
    prompt = make_inputs(model.config, batch=1, length=4)["input_ids"]
    greedy = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    # recurrent states (S4, DLR, MEGA's EMA, SPADE's S4, Performer's running sums, Mamba's scan) cannot be rolled back
    recurrent = entry[1] in ("spt_s4", "spt_dlr", "spt_mega", "spt_spade", "spt_performer") or entry[2].get(
        "backbone_config", {}
    ).get("model_type") in ("mamba", "mamba2")
    assert model._is_stateful == recurrent  # the class's value (spt_backbone: its backbone class's)
    if recurrent:
        with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
            model.generate(prompt, assistant_model=assistant, **greedy)
    elif entry[2].get("attention_window"):  # a window drops keys: the cache cannot be rolled back
        with pytest.raises(ValueError, match="Assisted decoding requires a cache that can be cropped"):
            model.generate(prompt, assistant_model=assistant, **greedy)
    else:
        assisted = model.generate(prompt, assistant_model=assistant, **greedy)
        assert torch.equal(assisted, model.generate(prompt, **greedy))  # the same tokens, fewer model calls


@pytest.mark.parametrize("entry", TINY_CONFIGS[:1] + TINY_CONFIGS[3:4], ids=["transformer", "s4"])
def test_main_input_name_is_a_class_value(entry):
    for head in HEADS.values():
        cls = head._model_mapping[type(make_config(entry))]
        assert isinstance(cls.main_input_name, str) and cls.main_input_name == "input_ids"
    assert build(entry, "classification", "continuous").main_input_name == "input_values"
    assert issubclass(cls, SequencePreTrainedModel)


def test_rope_types_of_transformers_change_long_sequences_and_unknown_ones_are_refused():
    base = {"vocab_size": 20, "hidden_size": 32, "num_hidden_layers": 1, "max_position_embeddings": 8}
    ids = torch.randint(4, 20, (1, 24), generator=torch.Generator().manual_seed(0))
    logits = {}
    for rope in (
        {"rope_type": "default"},
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "linear", "factor": 4.0},
    ):
        config = AutoConfig.for_model("spt_rotary_transformer", **base, rope_parameters={"rope_theta": 100.0, **rope})
        torch.manual_seed(0)
        with torch.no_grad():
            logits[rope["rope_type"]] = AutoModelForMaskedLM.from_config(config).eval()(input_ids=ids).logits
    assert not torch.allclose(logits["dynamic"], logits["default"])  # rescaled beyond max_position_embeddings
    assert not torch.allclose(logits["linear"], logits["default"])
    with pytest.raises(ValueError, match="rope_type='magic', which transformers does not define"):
        AutoConfig.for_model("spt_rotary_transformer", **base, rope_parameters={"rope_type": "magic"})
    with pytest.raises((ValueError, KeyError), match="factor"):
        AutoConfig.for_model("spt_rotary_transformer", **base, rope_parameters={"rope_type": "linear"})


@pytest.mark.parametrize("input_kind", ["tokens", "continuous"])
@pytest.mark.parametrize("entry", marked_slow(TINY_CONFIGS, SLOW_EXPORT))
def test_torch_export_round_trip(entry, input_kind):
    model = build(entry, "classification", input_kind).eval()
    inputs = make_inputs(model.config, pad_last=2)
    exported = torch.export.export(model, (), inputs)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(**inputs).logits, model(**inputs).logits, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("entry", marked_slow(TINY_CONFIGS, SLOW_COMPILE))
def test_torch_compile_trains_without_graph_breaks_and_equals_eager(entry):
    """`fullgraph=True` fails on any graph break; AOTAutograd (the backend here) traces forward and backward as
    torch.compile does, without inductor's code generation (benchmarks/bench_compile.py times the real thing)."""
    torch._dynamo.reset()  # each model compiles afresh: the shared forward code would otherwise hit the recompile limit
    model = build(entry, "masked_lm", seed=1).train()
    compiled_model = build(entry, "masked_lm", seed=1).train()
    inputs = head_inputs(model, "masked_lm")
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)
    loss = model(**inputs).loss
    compiled_loss = compiled(**inputs).loss
    loss.backward()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_cache_operations_follow_transformers_conventions():
    entry = TINY_CONFIGS[0]
    model = build(entry, "causal_lm").eval()
    ids = make_inputs(model.config, batch=2, length=6)["input_ids"]
    with torch.no_grad():
        cache = model(input_ids=ids[:, :4], use_cache=True).cache
        assert cache.get_seq_length() == 4 and cache.is_croppable
        cache.crop(-1)  # forget the last position, as assisted decoding does
        resumed = model(input_ids=ids[:, 3:], cache=cache).logits
        full = model(input_ids=ids, use_cache=False).logits  # the parallel pass (config.use_cache would recur)
    torch.testing.assert_close(resumed, full[:, 3:], rtol=1e-5, atol=1e-5)
    s4 = build(TINY_CONFIGS[3], "causal_lm").eval()
    with torch.no_grad():
        state = s4(input_ids=ids[:, :4], use_cache=True).cache
    assert not state.is_croppable
    with pytest.raises(ValueError, match="a recurrent state holds no history"):
        state.crop(-1)


def test_a_causal_lm_refuses_continuous_generation_and_bidirectional_configs():
    with pytest.raises(ValueError, match="needs a causal model"):
        AutoModelForCausalLM.from_config(make_config(TINY_CONFIGS[0], bidirectional=True))


@pytest.mark.parametrize("entry", ATTENTION, ids=[e[0] for e in ATTENTION])
def test_cached_generation_returns_attentions_and_an_attention_cache_as_transformers_checks_them(entry):
    """What transformers' generation tests read from a decoder-only output with the cache: one attentions tuple per
    step (the prompt's (B, nh, L, L), then (B, nh, 1, T) over every position so far), equal to the eager forward's
    rows, and cache layers whose `keys`/`values` are (B, nh, T, D)."""
    model = build(entry, "causal_lm", attn_implementation="eager").eval()
    prompt = make_inputs(model.config, batch=2, length=4)["input_ids"]
    out = model.generate(
        prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, output_attentions=True, return_dict_in_generate=True
    )
    heads = model.config.num_attention_heads
    shapes = [[a.shape for a in step] for step in out.attentions]
    assert shapes == [[(2, heads, 4, 4)] * LAYERS, [(2, heads, 1, 5)] * LAYERS, [(2, heads, 1, 6)] * LAYERS]
    with torch.no_grad():
        full = model(out.sequences[:, :-1], output_attentions=True, use_cache=False).attentions  # (B, nh, 6, 6)
    for layer in range(LAYERS):
        torch.testing.assert_close(out.attentions[0][layer], full[layer][:, :, :4, :4])
        torch.testing.assert_close(out.attentions[2][layer][:, :, 0], full[layer][:, :, 5])
    cache = out.cache
    window = model.config.attention_window
    kept = 6 if window is None else min(6, 6 - (5 // window - 1) * window)
    head_dim = model.config.head_dim
    assert [layer.keys.shape for layer in cache.layers] == [(2, heads, kept, head_dim)] * LAYERS
    assert [layer.values.shape for layer in cache.layers] == [(2, heads, kept, head_dim)] * LAYERS


def test_a_recurrent_cache_layer_has_no_keys():
    model = build(TINY_CONFIGS[3], "causal_lm").eval()  # S4
    prompt = make_inputs(model.config, batch=2, length=4)["input_ids"]
    out = model.generate(prompt, max_new_tokens=2, do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    layer = out.cache.layers[0]
    assert not hasattr(layer, "keys") and layer.batch_size == 2
    with pytest.raises(AttributeError, match="holds no attention keys and values"):
        _ = layer.keys


@pytest.mark.parametrize("entry", ATTENTION[:1], ids=[e[0] for e in ATTENTION[:1]])
def test_assisted_decoding_with_dict_outputs_matches_greedy(entry):
    """transformers' assisted-decoding tests ask for every output: the assistant's candidates are checked in one
    forward through the cache, whose attentions transformers reads."""
    model = build(entry, "causal_lm", attn_implementation="eager").eval()
    assistant = build(entry, "causal_lm", seed=5, attn_implementation="eager").eval()
    prompt = make_inputs(model.config, batch=1, length=4)["input_ids"]
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "return_dict_in_generate": True}
    kwargs |= {"output_attentions": True, "output_hidden_states": True, "output_scores": True}
    greedy = model.generate(prompt, **kwargs)
    assisted = model.generate(prompt, assistant_model=assistant, **kwargs)
    assert torch.equal(assisted.sequences, greedy.sequences)
    for a, b in zip(assisted.scores, greedy.scores):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
