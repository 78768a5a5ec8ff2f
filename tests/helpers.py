"""Shared test helpers: the table of tiny model configs every architecture adds itself to, and input builders.

An architecture joins every shared model test by adding entries to TINY_CONFIGS.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig, TrainerCallback  # noqa: E402

import spt_hf  # noqa: E402,F401  (registers the model types)

VOCAB_SIZE, NUM_CHANNELS, LENGTH, BATCH = 20, 3, 12, 3

# Tiny transformers backbones of spt_backbone: hidden 32 and 2 layers, as make_config's (the shared fields must agree
# with the backbone's), dropout 0 so that train-mode checks are deterministic.
TINY_BACKBONE = {"hidden_size": 32, "num_hidden_layers": 2, "max_position_embeddings": 64}
TINY_ENCODER = {
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}

# (id, model_type, architecture kwargs). Input kind is added by `make_config`.
TINY_CONFIGS = [
    ("transformer-rotary", "spt_rotary_transformer", {"num_attention_heads": 4, "intermediate_size": 64}),
    (
        "transformer-absolute-postbn",
        "spt_rotary_transformer",
        {"num_attention_heads": 2, "position_embedding_type": "absolute", "norm_type": "batchnorm", "prenorm": False},
    ),
    ("transformer-local", "spt_rotary_transformer", {"num_attention_heads": 4, "attention_window": 4}),
    ("s4-nplr", "spt_s4", {"state_size": 8, "max_position_embeddings": 16}),
    ("s4d-postbn", "spt_s4", {"kernel": "diag", "state_size": 8, "norm_type": "batchnorm", "prenorm": False}),
    ("s4-random-init", "spt_s4", {"init": "random", "state_size": 8, "max_position_embeddings": 16}),
    ("dlr", "spt_dlr", {"state_size": 16}),
    (
        "mega-chunk-laplace",
        "spt_mega",
        {
            "ema_projection_size": 4,
            "shared_representation_size": 16,
            "intermediate_size": 64,
            "nffn_hidden_size": 64,
            "chunk_size": 5,
            "attention_activation": "laplace",
        },
    ),
    (
        "spade",
        "spt_spade",
        {
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "attention_window": 4,
            "state_size": 8,
            "max_position_embeddings": 16,
        },
    ),
    (
        "linformer-layerwise",
        "spt_linformer",
        {
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "projected_length": 8,
            "projection_sharing": "layerwise",
            "max_position_embeddings": 32,
        },
    ),
    ("performer", "spt_performer", {"num_attention_heads": 4, "intermediate_size": 64, "num_random_features": 16}),
    *(
        (f"backbone-{backbone['model_type']}", "spt_backbone", {"backbone_config": {**TINY_BACKBONE, **backbone}})
        for backbone in (
            {"model_type": "mamba", "state_size": 8},
            {"model_type": "mamba2", "state_size": 8, "head_dim": 16, "num_heads": 4, "n_groups": 1, "chunk_size": 8},
            {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64},
            {"model_type": "gpt_neox", "num_attention_heads": 4, "intermediate_size": 64},
            # block-sparse attention needs more than (5 + 2 x num_random_blocks) x block_size positions, and its
            # random blocks change with the padded length: the tiny models use BigBird's full attention.
            {"model_type": "big_bird", "attention_type": "original_full", **TINY_ENCODER},
            {"model_type": "modernbert", "num_attention_heads": 4, "intermediate_size": 64, "local_attention": 4},
            {"model_type": "bert", **TINY_ENCODER},
        )
    ),
]
TINY_IDS = [entry[0] for entry in TINY_CONFIGS]


def marked_slow(entries, slow_ids) -> list:
    """`entries` as pytest parameters (with their ids), those in `slow_ids` marked `slow`: heavy cases that pass and
    run with `make test-slow`, so that the default suite keeps one representative of each kind."""
    return [pytest.param(e, id=e[0], marks=[pytest.mark.slow] if e[0] in slow_ids else []) for e in entries]


def no_causal_mode(entry) -> str | None:
    """Why the entry cannot build a causal model (`bidirectional=False`), or None if it can: Linformer has no causal
    form, nor has an encoder backbone without a causal mode in transformers; both configs refuse it."""
    try:
        make_config(entry, bidirectional=False)
    except ValueError as error:
        return str(error)
    return None


def make_config(entry, input_kind: str = "tokens", **overrides):
    """A tiny config (hidden 32, 2 layers) for a TINY_CONFIGS entry, built through AutoConfig only."""
    _, model_type, kwargs = entry
    inputs = {"vocab_size": VOCAB_SIZE} if input_kind == "tokens" else {"num_channels": NUM_CHANNELS}
    values = {"hidden_size": 32, "num_hidden_layers": 2, "num_labels": 3, **inputs, **kwargs, **overrides}
    return AutoConfig.for_model(model_type, **values)


def make_inputs(config, batch: int = BATCH, length: int = LENGTH, seed: int = 0, pad_last: int = 0) -> dict:
    """Random inputs of the config's kind; the last example's final `pad_last` positions are padding."""
    generator = torch.Generator().manual_seed(seed)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    if pad_last:
        attention_mask[-1, length - pad_last :] = 0
    if config.is_token_input:
        ids = torch.randint(4, config.vocab_size, (batch, length), generator=generator)
        ids = ids.masked_fill(attention_mask == 0, config.pad_token_id)
        return {"input_ids": ids, "attention_mask": attention_mask}
    values = torch.randn(batch, length, config.num_channels, generator=generator)
    return {"input_values": values * attention_mask.unsqueeze(-1), "attention_mask": attention_mask}


def append_padding(inputs: dict, extra: int) -> dict:
    """The same examples with `extra` more padded positions at the end (any values there)."""
    out = {}
    for key, value in inputs.items():
        pad_shape = list(value.shape)
        pad_shape[1] = extra
        filler = torch.full(pad_shape, 7, dtype=value.dtype) if key != "attention_mask" else torch.zeros(pad_shape)
        out[key] = torch.cat([value, filler.to(value.dtype)], dim=1)
    return out


# The tiny "pretrained" backbone of the Pythia-route tests: a GPT-NeoX with Pythia's structure at hidden 32, and a
# word-level tokenizer (built with `tokenizers`, nothing downloaded) that knows ListOps' pieces, the numbers 0-255 and
# the letters; ids 0 and 1 are Pythia's end and padding tokens.
PRETRAINED_WORDS = [
    "<|endoftext|>",
    "<|padding|>",
    "<unk>",
    "[",
    "]",
    "MAX",
    "MIN",
    "MED",
    "SM",
    *map(str, range(256)),
    *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
]
TINY_PYTHIA = {
    "model_type": "gpt_neox",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "vocab_size": 320,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


def save_pretrained_backbone(folder, seed: int = 0):
    """A tiny GPT-NeoX checkpoint (safetensors) with its tokenizer in `folder`; returns the folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModel, PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(PRETRAINED_WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # "[MAX" -> "[", "MAX"
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|padding|>", unk_token="<unk>"
    )
    torch.manual_seed(seed)
    model = AutoModel.from_config(AutoConfig.for_model(**TINY_PYTHIA))
    with torch.no_grad():  # "trained" norms and biases: a checkpoint's final LayerNorm is not a fresh one
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


# The overrides of a phase of a few steps on a tiny model: what compare's tests (local and on Slurm) run.
TINY_PHASE = {
    "total_steps": 4,
    "eval_steps": 2,
    "save_steps": 2,
    "logging_steps": 1,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_eval_batch_size": 64,
}


# Backbones that TINY_CONFIGS does not hold, built through the Auto classes only: encoders with and without a causal
# mode, attention decoders of other families, recurrent and hybrid decoders.
OTHER_BACKBONES = {
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4},
    "roberta": {**TINY_BACKBONE, "num_attention_heads": 4, "intermediate_size": 64, "hidden_dropout_prob": 0.0},
    "electra": {**TINY_BACKBONE, "num_attention_heads": 4, "intermediate_size": 64, "embedding_size": 32},
    "deberta-v2": {**TINY_BACKBONE, "num_attention_heads": 4, "intermediate_size": 64},
    "qwen2": {**TINY_BACKBONE, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64},
    "opt": {**TINY_BACKBONE, "ffn_dim": 64, "num_attention_heads": 4, "word_embed_proj_dim": 32},
    "bloom": {"hidden_size": 32, "n_layer": 2, "n_head": 4},
    "falcon_mamba": {**TINY_BACKBONE, "state_size": 8},
    "rwkv": {**TINY_BACKBONE, "attention_hidden_size": 32, "intermediate_size": 64, "context_length": 64},
    "jamba": {
        **TINY_BACKBONE,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "mamba_d_state": 8,
        "num_experts": 2,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
    },
}


def error_line(capsys) -> str:
    """The one line a refused `spt-hf` command printed on stderr (before its debug hint)."""
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].startswith("(--debug"), err
    return err[0]


class KillAfter(TrainerCallback):
    """Stops training abruptly (like a kill) right after optimiser step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt("simulated kill")
