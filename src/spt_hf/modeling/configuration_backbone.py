"""Configuration of `spt_backbone`: any in-tree transformers backbone under spt_hf's embedding, final norm and heads.

Whether a backbone is an encoder (bidirectional) or a decoder (causal) is read from transformers' own Auto mappings,
not from a list kept here: a model type with a masked-LM head (`AutoModelForMaskedLM`) is an encoder, one with only a
causal-LM head (`AutoModelForCausalLM`) is a decoder, and an encoder that also has a causal-LM head runs causally with
`is_decoder=True` (BERT, BigBird, RoBERTa, ...).

Backbones whose transformers implementation has a faster exact path behind a config switch get it switched on here,
where the backbone config is built, unless `backbone_config` sets it (`fast_path_defaults`): the saved config says
which path ran.
"""

import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
from transformers.utils import logging
from transformers.utils.import_utils import is_mambapy_available

from .configuration_sequence import SequenceModelConfig, check_choice

BACKBONE_INPUTS = ("embeddings", "tokenizer")
REVERSE_WEIGHTS = ("separate", "shared")

logger = logging.get_logger(__name__)


@contextmanager
def backbone_checkpoint(name: str) -> Iterator[None]:
    """Around a load of `backbone_name_or_path` (its config, tokenizer or weights): a Hub id that cannot be fetched
    (offline and not in the Hugging Face cache, no connection, no such repository) raises one FileNotFoundError that
    names the checkpoint and the two ways to provide it, instead of transformers' "Check your internet connection".
    Errors about an existing local folder are transformers' own (they name the missing file)."""
    try:
        yield
    except OSError as error:
        if Path(name).expanduser().is_dir():
            raise
        from huggingface_hub import constants

        why = (
            "HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache"
            if constants.HF_HUB_OFFLINE
            else f"it is not in the Hugging Face cache and the Hub did not provide it ({str(error).splitlines()[0]})"
        )
        raise FileNotFoundError(
            f"The backbone checkpoint `backbone_name_or_path: {name}` cannot be loaded: {why}. Provide it in the "
            f"cache (run once with network access, or `hf download {name}`; cache: {constants.HF_HUB_CACHE}), or "
            f"as a local folder (`hf download {name} --local-dir DIR`, then `--backbone_name_or_path DIR`)."
        ) from None


def backbone_direction(backbone_config: PreTrainedConfig) -> tuple[str, bool]:
    """("encoder", whether it has a causal mode) or ("decoder", True), from transformers' Auto mappings; ValueError
    for encoder-decoder models and for model types that have neither head."""
    model_type = backbone_config.model_type
    if backbone_config.is_encoder_decoder:
        raise ValueError(
            f"`backbone_config` model_type={model_type!r} is an encoder-decoder model; spt_backbone wraps one stack. "
            "Use an encoder (e.g. bert, modernbert) or a decoder (e.g. llama, mamba) model type."
        )
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "encoder", model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "decoder", True
    raise ValueError(
        f"`backbone_config` model_type={model_type!r} is neither an encoder (no AutoModelForMaskedLM) nor a decoder "
        "(no AutoModelForCausalLM) in transformers' Auto mappings, so spt_backbone cannot tell how it mixes a "
        "sequence. Use a text encoder or decoder model type."
    )


def _backbone_dict(value: dict) -> dict:
    """The `backbone_config` dict, checked for a usable `model_type` before transformers builds it."""
    model_type = value.get("model_type")
    if model_type is None:
        raise ValueError(
            "`backbone_config` needs a `model_type` (e.g. {model_type: mamba, hidden_size: 64, num_hidden_layers: 2})."
        )
    if str(model_type).startswith("spt_") or model_type not in CONFIG_MAPPING:
        known = [name for name in CONFIG_MAPPING if not name.startswith("spt_")]
        hint = difflib.get_close_matches(str(model_type), known, 3)
        raise ValueError(
            f"`backbone_config` model_type={model_type!r} is not a transformers model type"
            + (f"; did you mean {hint}?" if hint else ".")
        )
    return value


def fast_path_defaults(config_cls: type[PreTrainedConfig], values: dict) -> dict:
    """`values` of a backbone config with its fast exact paths switched on where `values` leaves them unset.

    `use_mambapy` (Mamba, FalconMamba, Jamba): without the CUDA kernels of `mamba-ssm` (which transformers picks first
    whenever they are installed), transformers' selective scan is a Python loop over positions; with it, the
    parallel scan of the `mambapy` package (`pip install "spt_hf[fast]"`) computes the same states in log2(L) steps.
    Mamba2 needs no switch: its torch path is already the chunked scan (`chunk_size`).
    """
    values = dict(values)
    if "use_mambapy" in config_cls.default_config_fields() and "use_mambapy" not in values:
        values["use_mambapy"] = True
        if not is_mambapy_available():
            logger.warning_once(
                f"The {values['model_type']} backbone scans in a Python loop over positions without the CUDA kernels "
                "of mamba-ssm; `pip install mambapy` (or spt_hf[fast]) gives transformers its exact parallel scan."
            )
    if values["model_type"] == "falcon_mamba" and "use_mambapy" in values:
        # FalconMambaConfig resets `use_mambapy` to its older name's value (False when absent), also on reload
        values.setdefault("use_falcon_mambapy", values["use_mambapy"])
    return values


class WrapperConfig(SequenceModelConfig):
    r"""
    Configuration of [`WrapperModel`] and its heads: a transformers backbone (any in-tree text encoder or decoder)
    fed by spt_hf's embedding through `inputs_embeds`, followed by spt_hf's final norm and heads. The shared fields
    (inputs, `norm_type` of the final norm, pooling, heads, SPT losses, `use_cache`) are documented in
    `SequenceModelConfig`; `hidden_size` and `num_hidden_layers` are the backbone's (given values must agree with it).
    `use_cache` is this config's own field, which transformers' generation and tests read (`get_text_config()` is
    this config); the `use_cache` of `backbone_config` is not read: spt_hf passes `use_cache` to the backbone on every
    call. A backbone that takes no cache generates without one whatever the field says (`WrapperForCausalLM` sets
    its generation config's `use_cache` to False).

    Args:
        backbone_config (`dict` or `PretrainedConfig`):
            The backbone, as a transformers config or a dict with its `model_type`, e.g.
            `{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "state_size": 16}`. Saved as a nested
            config. Optional when `backbone_name_or_path` is set (its config is read once and saved here). Switches
            of a faster exact path that the dict (or the checkpoint's config file) leaves unset are turned on
            (`use_mambapy: true` for Mamba, FalconMamba and Jamba: the parallel scan of the `mambapy` package when
            the CUDA kernels are not installed; see `fast_path_defaults`); a PretrainedConfig is taken as it is. Its own
            dropout, attention and position settings are the backbone's fields; spt_hf's `hidden_dropout_prob` and
            `prenorm` (of spt_hf's residual blocks) do not apply and must stay 0.0 / True.
        backbone_name_or_path (`str`, *optional*):
            A transformers checkpoint (local folder or Hub id, safetensors weights) whose weights initialise the
            backbone when a model is built from this config (a saved spt_backbone checkpoint already holds them).
        backbone_input (`str`, *optional*, defaults to `"embeddings"`):
            `"embeddings"`: spt_hf's embedding (task tokens, or continuous values with the learned mask vector) feeds
            the backbone. `"tokenizer"`: the task's tokens are rendered to text and re-tokenised by the tokenizer of
            `backbone_name_or_path`, and the token embedding is initialised from the checkpoint's; `vocab_size` and
            the pad / bos / eos ids are then the backbone's (values given for them are replaced), `num_channels` is
            unset and `mask_token_id` None.
        reverse_weights (`str`, *optional*, defaults to `"separate"`):
            Decoders with `bidirectional=True` run twice, on the sequence and on each sequence reversed within its
            real length; `"separate"`: a second backbone with its own weights reads the reversed sequence,
            `"shared"`: the same backbone reads both. The two outputs are summed. Unused by encoders and causal
            models.
        max_position_embeddings (`int`, *optional*):
            The sequence length the model is meant for (the pipeline sets the task's). Backbones with a
            `max_position_embeddings` field that `backbone_config` does not set get this value.
    """

    model_type = "spt_backbone"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(AutoConfig, model_type="llama", optional=True)}

    backbone_config: dict | PreTrainedConfig | None = None
    backbone_name_or_path: str | None = None
    backbone_input: str = "embeddings"
    reverse_weights: str = "separate"
    max_position_embeddings: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None

    def __post_init__(self, **kwargs):
        check_choice("backbone_input", self.backbone_input, BACKBONE_INPUTS)
        check_choice("reverse_weights", self.reverse_weights, REVERSE_WEIGHTS)
        if self.backbone_config is None and self.backbone_name_or_path is None:
            raise ValueError(
                "spt_backbone needs `backbone_config` (a dict with `model_type`, e.g. {model_type: mamba, hidden_size: "
                "64, num_hidden_layers: 2}, or a PretrainedConfig) or `backbone_name_or_path` (a checkpoint)."
            )
        if self.backbone_config is None:
            with backbone_checkpoint(self.backbone_name_or_path):
                self.backbone_config = AutoConfig.from_pretrained(self.backbone_name_or_path)
            saved = PreTrainedConfig.get_config_dict(self.backbone_name_or_path)[0]  # the checkpoint's own values
            for name, value in fast_path_defaults(type(self.backbone_config), saved).items():
                if name not in saved and name in type(self.backbone_config).default_config_fields():
                    setattr(self.backbone_config, name, value)
        if isinstance(self.backbone_config, dict):
            values = dict(_backbone_dict(self.backbone_config))
            config_cls = CONFIG_MAPPING[values["model_type"]]
            takes_length = "max_position_embeddings" in config_cls.default_config_fields()
            if self.max_position_embeddings is not None and takes_length and "max_position_embeddings" not in values:
                values["max_position_embeddings"] = self.max_position_embeddings
            self.backbone_config = config_cls.from_dict(fast_path_defaults(config_cls, values))
        elif not isinstance(self.backbone_config, PreTrainedConfig):
            raise ValueError(
                "`backbone_config` must be a dict with `model_type` or a PretrainedConfig, got "
                f"{self.backbone_config!r}."
            )
        if self.backbone_input == "tokenizer":
            self._take_backbone_vocabulary()
        self._derive_sizes()
        super().__post_init__(**kwargs)

    def _backbone_value(self, name: str):
        return getattr(self.backbone_config, name, None)

    def _take_backbone_vocabulary(self) -> None:
        """Tokenizer inputs are the backbone's ids: its vocabulary size and special ids replace the task's."""
        self.vocab_size, self.num_channels, self.mask_token_id = self._backbone_value("vocab_size"), None, None
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = self._backbone_value(name)
            setattr(self, name, value[0] if isinstance(value, list) else value)

    def _derive_sizes(self) -> None:
        """`hidden_size` and `num_hidden_layers` are the backbone's; a given value that differs is an error."""
        for name in ("hidden_size", "num_hidden_layers"):
            value = self._backbone_value(name)
            if not isinstance(value, int):
                raise ValueError(f"`backbone_config` ({self._backbone_value('model_type')}) has no integer `{name}`.")
            if getattr(self, name) is not None and getattr(self, name) != value:
                raise ValueError(
                    f"`{name}`={getattr(self, name)} differs from the backbone's {name}={value}; `{name}` comes from "
                    "`backbone_config` (set it there, or leave it out)."
                )
            setattr(self, name, value)

    def validate_backbone_fields(self) -> None:
        """Checks that need the built backbone config: direction, inputs, fields that do not apply."""
        check_choice("backbone_input", self.backbone_input, BACKBONE_INPUTS)
        check_choice("reverse_weights", self.reverse_weights, REVERSE_WEIGHTS)
        kind, has_causal_mode = backbone_direction(self.backbone_config)
        if not self.bidirectional and not has_causal_mode:
            raise ValueError(
                f"The {self.backbone_config.model_type} backbone is a bidirectional encoder with no causal mode in "
                "transformers (no AutoModelForCausalLM), so `bidirectional=False` is not possible; use masked SPT "
                "(`bidirectional: true`), or a decoder backbone for causal SPT."
            )
        if self.backbone_input == "tokenizer" and self.backbone_name_or_path is None:
            raise ValueError(
                "`backbone_input: tokenizer` re-tokenises the task with the backbone's own tokenizer: set "
                "`backbone_name_or_path` to the checkpoint that has it."
            )
        if self.hidden_dropout_prob != 0.0 or not self.prenorm:
            raise ValueError(
                "`hidden_dropout_prob` and `prenorm` configure spt_hf's residual blocks, which spt_backbone does not "
                "have; set the backbone's own dropout in `backbone_config` (e.g. hidden_dropout_prob, "
                "attention_dropout) and leave these at 0.0 / True."
            )

    @property
    def has_causal_form(self) -> bool:
        """Decoders and encoders with a causal mode in transformers have one (ModernBERT, DeBERTa-v2, ... do not)."""
        return backbone_direction(self.backbone_config)[1]

    @property
    def backbone_kind(self) -> str:
        """`"encoder"` (bidirectional, or causal with `is_decoder`) or `"decoder"` (two passes if bidirectional)."""
        return backbone_direction(self.backbone_config)[0]


__all__ = ["WrapperConfig", "backbone_checkpoint", "backbone_direction", "fast_path_defaults"]


SPTBackboneConfig = WrapperConfig  # loading alias: checkpoints saved before the rename name it in `auto_map`
