"""Configuration of spt_hf SPADE models (Zuo et al., "Efficient Long Sequence Modeling via State Space Augmented
Transformer", 2022)."""

from .configuration_rotary_transformer import RotaryTransformerConfig
from .configuration_s4 import S4Config
from .configuration_sequence import check_bool, check_positive_int, with_saved_defaults

# The fields of SpadeConfig that configure its S4 branch; they mean exactly what they mean in S4Config.
S4_FIELDS = ("state_size", "n_ssm", "kernel", "init", "time_step_min", "time_step_max", "ssm_learning_rate")


class SpadeConfig(RotaryTransformerConfig):
    r"""
    Configuration of SPADE: a Transformer with block-local attention in every layer, augmented in the bottom layer by
    an S4 branch run in parallel with the local attention; the two outputs are layer-normalised, concatenated and
    projected back to `hidden_size` (SPADE's "concat" combination). Each layer also has the Transformer's GELU
    feed-forward block. The attention fields (`num_attention_heads`, `intermediate_size`, `attention_dropout`,
    `position_embedding_type`, `rope_parameters`) are documented in `RotaryTransformerConfig`. The S4 fields mean what
    they mean in `S4Config` (which validates them here) and have its defaults: the S4 of the paper.

    Args:
        attention_window (`int`, *optional*, defaults to 128):
            Block size of the local attention (required): each query sees its own block and one on each side
            (causal: its block up to itself and the previous one). SPADE's code attends within a radius of 127 (blocks
            of 128); spt_hf reuses the Transformer's block-local attention with blocks of this size.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            The length the S4 branch stores its NPLR kernel for (as `S4Config.max_position_embeddings`; longer inputs
            work, more slowly); also where scaled RoPE types start rescaling.
        state_size (`int`, *optional*, defaults to 64):
            State size N of the S4 branch (even: conjugate pairs). SPADE's code uses 64.
        n_ssm (`int`, *optional*):
            Independent copies of the S4 state matrix tiled over the features; None: one per feature.
        kernel (`str`, *optional*, defaults to `"nplr"`):
            `"nplr"` (the original S4, as SPADE's code) or `"diag"` (S4D).
        init (`str`, *optional*, defaults to `"legs"`):
            `"legs"` (HiPPO-LegS) or `"random"`.
        time_step_min (`float`, *optional*, defaults to 1e-3):
            Lower end of the log-uniform initialisation of the S4 step size Δ.
        time_step_max (`float`, *optional*, defaults to 0.1):
            Upper end of the log-uniform initialisation of Δ.
        ssm_learning_rate (`float`, *optional*, defaults to 1e-3):
            Learning rate (no weight decay) of the S4 Λ, P and B; None: the global one. SPADE's code: 1e-3 for A and B.
        s4_pointwise (`bool`, *optional*, defaults to `False`):
            False: the S4 branch is the linear convolution K * u + D ⊙ u, as released SPADE builds its S4
            (`use_pointwise` off). True: spt_hf's whole S4 layer, GLU(Linear(H, 2H)(Dropout(GELU(K * u + D ⊙ u)))),
            2H² + 2H more parameters and a nonlinearity. Checkpoints saved before this field existed use the S4
            layer: a saved config.json without it loads with True (`from_pretrained`, `from_dict`).
    """

    model_type = "spt_spade"
    # Fields added after checkpoints were saved without them, and the value that reproduces those checkpoints.
    saved_defaults = {"s4_pointwise": True}

    attention_window: int | None = 128
    max_position_embeddings: int = 1024
    state_size: int = 64
    n_ssm: int | None = None
    kernel: str = "nplr"
    init: str = "legs"
    time_step_min: float = 1e-3
    time_step_max: float = 0.1
    ssm_learning_rate: float | None = 1e-3
    s4_pointwise: bool = False

    def validate_spade_fields(self) -> None:
        if self.attention_window is None:
            raise ValueError("`attention_window` must be a positive block size: SPADE's attention is local.")
        check_positive_int(self, "attention_window")
        check_bool(self, "s4_pointwise")
        self.s4_config()  # S4Config's checks of the S4 fields, with its messages

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """As `PreTrainedConfig.from_dict`; a saved config without `s4_pointwise` (saved before it existed) loads
        with `s4_pointwise=True`, the form it was trained with. `from_pretrained` and the Auto classes come here."""
        return super().from_dict(with_saved_defaults(config_dict, cls.saved_defaults), **kwargs)

    @classmethod
    def from_json_file(cls, json_file):
        return cls.from_dict(cls._dict_from_json_file(json_file))

    def s4_config(self) -> S4Config:
        """The S4Config of the bottom layer's S4 branch: the S4 fields, width, direction, dropout and length of this
        model (its input kind is irrelevant to a layer; `num_channels=1` only satisfies the config's check)."""
        shared = ("hidden_size", "bidirectional", "hidden_dropout_prob", "max_position_embeddings", "initializer_range")
        return S4Config(num_channels=1, **{name: getattr(self, name) for name in (*shared, *S4_FIELDS)})


__all__ = ["SpadeConfig"]
