"""Fields shared by every spt_hf architecture: input kind, residual blocks, heads and SPT objectives.

The architectures (S4, DLR, the rotary Transformer, MEGA, SPADE, Linformer, Performer) differ only in their
sequence mixers, and spt_backbone only in the transformers layers it wraps; everything a head, a block or an
objective needs is declared here once, validated once, and saved with each checkpoint.
"""

import functools

from transformers import PreTrainedConfig

POOLING_MODES = ("mean", "last", "max", "first")
CLASSIFIER_TYPES = ("linear", "mlp")
NORM_TYPES = ("layernorm", "batchnorm")
CONTINUOUS_LOSSES = ("l1", "mse", "cross_entropy")
# Auto class -> class-name suffix of the head that serves it: what a config of spt_hf is registered with, and the
# complete `auto_map` a model writes on save. Here, beside the configs, so that the registry reads it without
# importing transformers' modeling code.
AUTO_CLASS_SUFFIXES = {
    "AutoModel": "Model",
    "AutoModelForMaskedLM": "ForMaskedLM",
    "AutoModelForCausalLM": "ForCausalLM",
    "AutoModelForSequenceClassification": "ForSequenceClassification",
    "AutoModelForRetrieval": "ForRetrieval",
}


def check_choice(name: str, value, allowed) -> None:
    """Raise a ValueError naming the field, the bad value and the allowed values."""
    if value not in allowed:
        raise ValueError(f"`{name}`={value!r} is not supported; expected one of {list(allowed)}.")


def check_positive_int(config: PreTrainedConfig, *names: str, optional: bool = False) -> None:
    """Raise a ValueError naming the first field that is not a positive integer (None is allowed if `optional`)."""
    for name in names:
        value = getattr(config, name)
        if value is None and optional:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            allowed = "None or a positive integer" if optional else "a positive integer"
            raise ValueError(f"`{name}` must be {allowed}, got {value!r}.")


def check_time_steps(config: PreTrainedConfig) -> None:
    """SSM step sizes: raise a ValueError unless 0 < time_step_min <= time_step_max."""
    if not 0 < config.time_step_min <= config.time_step_max:
        raise ValueError(
            "`time_step_min` and `time_step_max` must satisfy 0 < time_step_min <= time_step_max, got "
            f"{config.time_step_min} and {config.time_step_max}."
        )


def check_ssm_learning_rate(config: PreTrainedConfig) -> None:
    """`ssm_learning_rate` is None (the global learning rate) or a positive number."""
    if config.ssm_learning_rate is not None and not config.ssm_learning_rate > 0:
        raise ValueError(f"`ssm_learning_rate` must be None or > 0, got {config.ssm_learning_rate!r}.")


def with_saved_defaults(config_dict: dict, saved_defaults: dict) -> dict:
    """`config_dict` with `saved_defaults` filled in for the fields it lacks, if it is a saved config.

    A field added to change an architecture's default arithmetic must not change checkpoints saved before it existed:
    their config.json lacks the field, and they must load with the value they were trained with (`saved_defaults`),
    not the new default. A saved config is recognised by the `transformers_version` that `to_dict` always writes;
    other dicts (a recipe's fields, a hand-written dict) get the class defaults.
    """
    if "transformers_version" not in config_dict:
        return config_dict
    return {**{name: value for name, value in saved_defaults.items() if name not in config_dict}, **config_dict}


def check_bool(config: PreTrainedConfig, *names: str) -> None:
    """Raise a ValueError naming the first field that is not True or False."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be True or False, got {value!r}.")


class SequenceModelConfig(PreTrainedConfig):
    r"""
    Base configuration of spt_hf sequence models. Architecture configs (`S4Config`, `DLRConfig`,
    `RotaryTransformerConfig`) add the fields of their mixer.

    Args:
        vocab_size (`int`, *optional*):
            Size of the token vocabulary, for token inputs (`input_ids`). Exactly one of `vocab_size` and
            `num_channels` is set.
        num_channels (`int`, *optional*):
            Number of channels C of continuous inputs (`input_values` of shape (B, L, C)).
        hidden_size (`int`, *optional*, defaults to 128):
            Width H of the residual stream.
        num_hidden_layers (`int`, *optional*, defaults to 4):
            Number of residual layers.
        hidden_dropout_prob (`float`, *optional*, defaults to 0.0):
            Dropout applied to each mixer output before the residual addition.
        norm_type (`str`, *optional*, defaults to `"layernorm"`):
            `"layernorm"` or `"batchnorm"` (over channels; padded positions are excluded from its statistics).
        prenorm (`bool`, *optional*, defaults to `True`):
            Pre-norm `x + Dropout(Mixer(Norm(x)))` if True, post-norm `Norm(x + Dropout(Mixer(x)))` if False.
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of the normalisation layers.
        bidirectional (`bool`, *optional*, defaults to `True`):
            True: every position sees the whole sequence (masked SPT, classification). False: causal, position t
            sees positions <= t only (causal SPT, generation).
        pooling (`str`, *optional*, defaults to `"mean"`):
            How sequence classification pools over length: `"mean"` over true length, `"last"` real position,
            `"max"` over real positions, or `"first"` position. Padding is excluded in every mode.
        classifier_type (`str`, *optional*, defaults to `"linear"`):
            `"linear"` (one Linear layer) or `"mlp"` (Linear-GELU-Linear) on the pooled features.
        continuous_loss (`str`, *optional*, defaults to `"l1"`):
            Language-modelling loss for continuous inputs: `"l1"`, `"mse"` on the values, or `"cross_entropy"` over
            `num_quantized_levels` levels (Pathfinder's 256 raw intensities).
        num_quantized_levels (`int`, *optional*, defaults to 256):
            Number of levels of the `"cross_entropy"` continuous loss.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialisation of linear and embedding weights.
        pad_token_id / mask_token_id / bos_token_id / eos_token_id (`int`, *optional*):
            Special token ids of token vocabularies; spt_hf vocabularies use pad 0, mask 1, eos 2.
        tie_word_embeddings (`bool`, *optional*, defaults to `False`):
            Share one matrix between the token LM head and the input embedding (after init, loading and resizing).
            The paper does not tie them; token inputs only.
        use_cache (`bool`, *optional*, defaults to `True`):
            Whether generate() uses the generation cache (spt_hf's `SequenceCache` of the mixers' states, or a
            transformers backbone's own cache), as transformers' decoder configs have it (the generation config is
            read from this config). A forward pass builds the cache only when asked (`use_cache=True`, or a `cache`
            to continue): spt_hf fills it by running the sequence position by position through the mixers'
            recurrent steps, far slower than the parallel pass that a forward otherwise takes. Checkpoints saved
            before this field existed load with the default.
        check_values (`bool`, *optional*, defaults to `True`):
            Whether a forward checks tensor values: token ids within the vocabulary and SSM kernels finite, each a
            clear error instead of a wrong result. Each check reads a value on the host, which makes a GPU wait: the
            Trainer turns them off for its training steps (on for evaluation and direct calls).
    """

    vocab_size: int | None = None
    num_channels: int | None = None
    hidden_size: int = 128
    num_hidden_layers: int = 4
    hidden_dropout_prob: float = 0.0
    norm_type: str = "layernorm"
    prenorm: bool = True
    layer_norm_eps: float = 1e-5
    bidirectional: bool = True
    pooling: str = "mean"
    classifier_type: str = "linear"
    continuous_loss: str = "l1"
    num_quantized_levels: int = 256
    initializer_range: float = 0.02
    pad_token_id: int | None = 0
    mask_token_id: int | None = 1
    bos_token_id: int | None = None
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = False
    use_cache: bool = True
    check_values: bool = True

    # Whether the architecture has a causal form (`bidirectional=False`, causal LM heads, generation). A class
    # property, not a field: Linformer's projection along the sequence mixes every position and has none.
    has_causal_form = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)  # makes `cls` a dataclass with its own `__init__`
        built_init = cls.__init__

        @functools.wraps(built_init)
        def __init__(self, *args, **init_kwargs):
            built_init(self, *args, **init_kwargs)
            if type(self) is cls:  # once, after the whole `__init__` (and `__post_init__`) of the class built
                self.validate()

        cls.__init__ = __init__

    def validate(self) -> None:
        """Every check of the config: transformers' own, then each `validate_*` method of the spt_hf config classes
        (base class first), as `@strict` collects them for transformers' configs. It runs after `__init__`, in
        `save_pretrained` (transformers calls `validate()` before writing config.json) and when a model is built, so a
        field changed after construction cannot be saved or built unchecked; each raises a ValueError naming the
        field."""
        super().validate()
        names = {}
        for klass in reversed(type(self).__mro__):
            if isinstance(klass, type) and issubclass(klass, SequenceModelConfig):
                names.update(dict.fromkeys(name for name in vars(klass) if name.startswith("validate_")))
        for name in names:
            getattr(self, name)()

    @property
    def is_token_input(self) -> bool:
        return self.vocab_size is not None

    @property
    def is_causal(self) -> bool:
        # Read by transformers' mask helpers and by generation.
        return not self.bidirectional

    def validate_sequence_fields(self) -> None:
        """Check the shared fields; raise a ValueError naming the field and the allowed values."""
        if (self.vocab_size is None) == (self.num_channels is None):
            raise ValueError(
                "Set exactly one of `vocab_size` (token inputs, `input_ids`) and `num_channels` (continuous inputs, "
                f"`input_values` of shape (B, L, C)); got vocab_size={self.vocab_size}, "
                f"num_channels={self.num_channels}."
            )
        check_positive_int(self, "vocab_size", "num_channels", optional=True)
        check_positive_int(self, "hidden_size", "num_hidden_layers", "num_quantized_levels")
        if not 0.0 <= self.hidden_dropout_prob < 1.0:
            raise ValueError(f"`hidden_dropout_prob` must be in [0, 1), got {self.hidden_dropout_prob}.")
        check_choice("pooling", self.pooling, POOLING_MODES)
        check_choice("classifier_type", self.classifier_type, CLASSIFIER_TYPES)
        check_choice("norm_type", self.norm_type, NORM_TYPES)
        check_choice("continuous_loss", self.continuous_loss, CONTINUOUS_LOSSES)
        check_bool(self, "use_cache", "check_values")
        if self.tie_word_embeddings and self.vocab_size is None:
            raise ValueError(
                "`tie_word_embeddings=True` ties the LM head to the token embedding; a model of continuous inputs "
                "(`num_channels`) has none. Leave it False."
            )
        if self.vocab_size is not None:
            for name in ("pad_token_id", "mask_token_id", "bos_token_id", "eos_token_id"):
                value = getattr(self, name)
                if value is not None and not 0 <= value < self.vocab_size:
                    raise ValueError(f"`{name}`={value} is outside the vocabulary [0, {self.vocab_size}).")


__all__ = [
    "SequenceModelConfig",
    "check_bool",
    "check_choice",
    "check_positive_int",
    "check_ssm_learning_rate",
    "check_time_steps",
    "with_saved_defaults",
]
