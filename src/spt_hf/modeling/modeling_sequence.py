"""The architecture-independent PreTrainedModel base and base model of spt_hf.

An architecture is a config class plus a tuple of mixer classes:

    class S4Model(SequenceBaseModel, S4PreTrainedModel):
        mixer_classes = (S4Mixer,)

Embedding -> `num_hidden_layers` x SequenceLayer(mixers) -> final norm, with input checks, padding handling,
gradient checkpointing and the transformers model contract (tuple outputs, hidden states and attentions,
`inputs_embeds`, the generation cache of cache.py) written once here.
"""

import sys
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import find_packed_sequence_indices
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .blocks import MaskedBatchNorm, SequenceEmbeddings, SequenceLayer, SequenceNorm
from .cache import SequenceCache
from .checkpoint_files import check_local_checkpoint
from .configuration_sequence import AUTO_CLASS_SUFFIXES, SequenceModelConfig
from .precision import float32_module_patterns


class SequencePreTrainedModel(PreTrainedModel):
    """Base of every spt_hf model: weight init, complete `auto_map` on save, input-kind dispatch."""

    config: SequenceModelConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"  # models of continuous inputs say `input_values` (set per instance in __init__)
    supports_gradient_checkpointing = True
    _no_split_modules = ["SequenceLayer"]

    def __init__(self, config: SequenceModelConfig, *args, **kwargs):
        config.validate()  # a field changed after the config was built is checked before a model is built from it
        super().__init__(config, *args, **kwargs)
        if not config.is_token_input:
            self.main_input_name = "input_values"

    def post_init(self):
        """transformers' post_init; `from_pretrained(dtype=bf16/fp16)` then loads the float32 modules' parameters
        (SSM kernels, MEGA's EMA: precision.py) in float32 instead of rounding them."""
        super().post_init()
        self._keep_in_fp32_modules_strict.update(float32_module_patterns(self))

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, MaskedBatchNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)
            init.zeros_(module.num_batches_tracked)
        # Mixers and embeddings with parameters or non-persistent buffers of their own (SSM kernels, mask vector)
        # rebuild them here, so that `from_pretrained` (which builds on the meta device) refills them correctly.
        if hasattr(module, "_init_spt_weights"):
            module._init_spt_weights()

    def full_auto_map(self) -> dict[str, str]:
        """The `auto_map` listing the config and every head defined beside this class (for remote code)."""
        config_cls = type(self.config)
        prefix = config_cls.__name__.removesuffix("Config")
        module = sys.modules[type(self).__module__]
        module_name = module.__name__.rsplit(".", 1)[-1]
        auto_map = {"AutoConfig": f"{config_cls.__module__.rsplit('.', 1)[-1]}.{config_cls.__name__}"}
        for auto_class, suffix in AUTO_CLASS_SUFFIXES.items():
            if hasattr(module, prefix + suffix):
                auto_map[auto_class] = f"{module_name}.{prefix}{suffix}"
        return auto_map

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loader, after checks that name the bad file for local folders: the model type, each
        safetensors file's header and size, and the base model's tensor shapes against config.json."""
        folder = Path(str(pretrained_model_name_or_path))
        if folder.is_dir() and (folder / "config.json").is_file():
            check_local_checkpoint(cls, folder)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers records only the saved class's own Auto class; a finetuning loader needs all of them.
        self.config.auto_map = self.full_auto_map()
        cls = type(self)
        if cls._auto_class is None:  # what registration sets (spt_hf registers lazily): the code is saved with it
            name = f".{cls.__name__}"
            cls._auto_class = next((auto for auto, ref in self.config.auto_map.items() if ref.endswith(name)), None)
        return super().save_pretrained(save_directory, *args, **kwargs)


SPTPreTrainedModel = SequencePreTrainedModel  # the name before the rename, for code that imports it


def validate_inputs(
    config: SequenceModelConfig,
    input_ids: torch.Tensor | None,
    input_values: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None = None,
) -> None:
    """Raise a ValueError naming the problem and what is expected, before anything deep inside fails. Checks that
    read tensor values are skipped while torch.compile or torch.export trace the model."""
    if inputs_embeds is not None:
        if input_ids is not None or input_values is not None:
            raise ValueError("Pass either `inputs_embeds` or the inputs (`input_ids` / `input_values`), not both.")
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size:
            raise ValueError(
                f"Expected `inputs_embeds` of shape (B, L, {config.hidden_size}); got {_shape(inputs_embeds)}."
            )
        batch_length = tuple(inputs_embeds.shape[:2])
    elif config.is_token_input:
        if input_values is not None:
            raise ValueError(
                "This model takes token inputs (`input_ids`, config.vocab_size set) but got `input_values`; "
                "pass `input_ids` of shape (B, L), or use a model configured with `num_channels`."
            )
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError(f"Expected `input_ids` of shape (B, L) (or `inputs_embeds`); got {_shape(input_ids)}.")
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ValueError(
                f"`input_ids` must hold integer token ids (torch.long), got dtype {input_ids.dtype}; convert with "
                "`.long()` (values are ids, not features: continuous inputs go in `input_values`)."
            )
        in_range = torch.compiler.is_compiling() or not input_ids.numel() or not config.check_values
        if not in_range and (input_ids.min() < 0 or input_ids.max() >= config.vocab_size):
            raise ValueError(
                f"`input_ids` hold ids in [{int(input_ids.min())}, {int(input_ids.max())}], outside the vocabulary "
                f"[0, {config.vocab_size}); check the tokenizer/vocabulary matches config.vocab_size."
            )
        batch_length = tuple(input_ids.shape)
    else:
        if input_ids is not None:
            raise ValueError(
                "This model takes continuous inputs (`input_values` of shape (B, L, C), config.num_channels set) "
                "but got `input_ids`; pass `input_values`, or use a model configured with `vocab_size`."
            )
        if input_values is None or input_values.dim() != 3 or input_values.shape[-1] != config.num_channels:
            raise ValueError(
                f"Expected `input_values` of shape (B, L, {config.num_channels}); got {_shape(input_values)}."
            )
        if not input_values.is_floating_point():
            raise ValueError(
                f"`input_values` must be floating point, got dtype {input_values.dtype}; convert with `.float()`."
            )
        batch_length = tuple(input_values.shape[:2])
    if 0 in batch_length:
        raise ValueError(
            f"The inputs are empty: (B, L) = {batch_length}. Every sequence needs at least one position (and the "
            "batch at least one sequence)."
        )
    if attention_mask is not None and tuple(attention_mask.shape) != batch_length:
        raise ValueError(
            f"`attention_mask` has shape {tuple(attention_mask.shape)} but the inputs have (B, L) = {batch_length}; "
            "it must hold 1 for real positions and 0 for padding, one entry per input position."
        )


def _shape(tensor: torch.Tensor | None) -> str:
    return "None" if tensor is None else str(tuple(tensor.shape))


def refuse_packed_sequences(position_ids: torch.Tensor, batch: int, what: str) -> None:
    """One line when position_ids restart inside a row (several sequences packed in one, as transformers'
    `DataCollatorWithFlattening` makes them) and `what` would let them see each other."""
    if torch.compiler.is_compiling() or find_packed_sequence_indices(position_ids.expand(batch, -1)) is None:
        return
    raise ValueError(
        f"position_ids restart inside a row (packed sequences), which {what} cannot keep apart: pass one "
        "sequence per row with an attention_mask (padding) instead of flattening them."
    )


# The attention implementations through which spt_hf's own attention honours the packed-sequence mask it builds
# (flash attention would need the positions themselves, which it is not given).
PACKING_ATTENTION = ("eager", "sdpa")


def packing_refusal_for(
    name: str, keeps_apart: bool, config: SequenceModelConfig, attn_implementation: str | None = None
) -> str | None:
    """Why the model `name` with `config` cannot train on packed rows (restarting position_ids, no attention_mask),
    or None. `keeps_apart`: its mixers keep packed sequences apart; `attn_implementation`: the attention that must be
    given the packed-sequence mask (None: not asked, e.g. before the model is built)."""
    if not keeps_apart:
        return f"{name} cannot keep packed sequences apart (its mixers would run one sequence into the next)"
    window = getattr(config, "attention_window", None)
    if window is not None:
        return f"{name} with block-local attention (attention_window: {window}) cannot keep packed sequences apart"
    if config.norm_type == "batchnorm":
        return f"{name} with norm_type: batchnorm takes its statistics over every position, a packed row's padding too"
    if attn_implementation is not None and attn_implementation not in PACKING_ATTENTION:
        return f"{name} with attn_implementation {attn_implementation!r} is not given the packed-sequence mask"
    return None


class SequenceBaseModel:
    """Mixin turning an architecture's PreTrainedModel into its base model (`XModel`).

    Subclasses set `mixer_classes` and may override `_mixer_kwargs` (per-forward inputs shared by all layers, such
    as rotary cos/sin) and `_embed`.
    """

    mixer_classes: tuple[type[nn.Module], ...] = ()
    # Whether restarting position_ids (packed sequences, no attention_mask) keep each sequence to itself.
    supports_packed_sequences = False

    @classmethod
    def packing_refusal(cls, config: SequenceModelConfig) -> str | None:
        """Why this model with `config` cannot train on packed rows, or None: its mixers, its attention window, its
        norm and (once a model is built from `config`) its attention implementation. Asked of the class before
        any model exists (from a recipe's config) and of a built model."""
        return packing_refusal_for(cls.__name__, cls.supports_packed_sequences, config, config._attn_implementation)

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        self.embeddings = SequenceEmbeddings(config)
        self.layers = nn.ModuleList(
            SequenceLayer(config, idx, self.mixer_classes) for idx in range(config.num_hidden_layers)
        )
        self.norm_f = SequenceNorm(config)
        self._build_extra_modules(config)
        self.post_init()

    def _build_extra_modules(self, config: SequenceModelConfig) -> None:
        """Modules an architecture adds outside its layers (e.g. the Transformer's rotary tables)."""

    def get_input_embeddings(self) -> nn.Module | None:
        return getattr(self.embeddings, "word_embeddings", None)

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

    def _embed(
        self, input_ids, input_values, mask_positions, position_offset: int = 0, position_ids=None, inputs_embeds=None
    ) -> torch.Tensor:
        """(B, L, H): the embedding (or `inputs_embeds`); architectures with absolute positions add them here."""
        return self.embeddings(input_ids, input_values, mask_positions, inputs_embeds=inputs_embeds)

    def _mixer_kwargs(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None, position_ids=None) -> dict:
        return {}

    def _step_kwargs(self, hidden_state: torch.Tensor, position: int) -> dict:
        """Per-position inputs of the mixers' recurrent `step` (e.g. the rotary angles of `position`)."""
        return {}

    def generation_cache(self) -> SequenceCache:
        """An empty cache for generate(), filled with the mixers' states by the first forward pass that uses it."""
        return SequenceCache()

    def init_cache(self, batch_size: int, device=None, dtype=None) -> SequenceCache:
        device, dtype = device or self.device, dtype or self.dtype
        return SequenceCache([layer.init_state(batch_size, device, dtype) for layer in self.layers])

    def _forward_recurrent(
        self, input_ids, input_values, inputs_embeds, padding_mask, cache, output_hidden_states, output_attentions=False
    ):
        """Run the sequence one position at a time through the mixers' recurrent `step`, continuing `cache` (an empty
        one is filled first); the hidden states of every layer if asked, and the attention probabilities of the
        attention layers, (B, nh, L, T) over every position seen (zero where a key is in the future or out of the
        window), when every layer has one."""
        if not self.config.is_causal:
            raise ValueError("`use_cache`/`cache` needs a causal model (`bidirectional=False`).")
        inputs = next(x for x in (input_ids, input_values, inputs_embeds) if x is not None)
        batch, length = inputs.shape[:2]
        cache = cache if cache is not None else SequenceCache()
        if not cache.is_initialized:
            cache.layers = self.init_cache(batch, inputs.device).layers
        outputs, per_layer = [], [[] for _ in range(len(self.layers) + 1)]
        weights = [[] for _ in self.layers]  # per layer, per step: (B, nh, 1, T_t) over the last T_t positions
        for t in range(length):
            position = cache.seen_tokens
            token = inputs[:, t : t + 1]  # (B, 1[, C or H])
            ids, values, embeds = (token if x is not None else None for x in (input_ids, input_values, inputs_embeds))
            hidden_state = self._embed(ids, values, None, position_offset=position, inputs_embeds=embeds)[:, 0]
            step_kwargs = self._step_kwargs(hidden_state, position)
            if output_attentions:
                step_kwargs["output_attentions"] = True
            real = None if padding_mask is None else padding_mask[:, t]  # (B,)
            for index, (layer, layer_cache) in enumerate(zip(self.layers, cache.layers)):
                per_layer[index].append(hidden_state)
                hidden_state = layer.step(hidden_state, layer_cache.states, real, **step_kwargs)
                if output_attentions:
                    found = [s.weights for s in layer_cache.states if getattr(s, "weights", None) is not None]
                    weights[index] += found[-1:]
            outputs.append(self.norm_f(hidden_state))
            per_layer[-1].append(outputs[-1])
            cache.seen_tokens += 1
        hidden_states = tuple(torch.stack(h, dim=1) for h in per_layer) if output_hidden_states else None
        attentions = None
        if output_attentions and all(len(w) == length for w in weights):
            attentions = tuple(self._place_step_weights(w, cache.seen_tokens) for w in weights)
        return torch.stack(outputs, dim=1), cache, hidden_states, attentions  # (B, L, H)

    @staticmethod
    def _place_step_weights(steps: list[torch.Tensor], total: int) -> torch.Tensor:
        """Per-step probabilities (B, nh, 1, T_t) over the T_t most recent positions -> (B, nh, L, total)."""
        batch, heads = steps[0].shape[:2]
        placed = steps[0].new_zeros(batch, heads, len(steps), total)
        first = total - len(steps)  # the position of the first query
        for row, step in enumerate(steps):
            end = first + row + 1
            placed[:, :, row, end - step.shape[-1] : end] = step[:, :, 0]
        return placed

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mask_positions: torch.BoolTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: SequenceCache | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        r"""
        input_ids (`torch.LongTensor` of shape (B, L)): token ids, for models with `vocab_size`.
        input_values (`torch.FloatTensor` of shape (B, L, C)): continuous inputs, for models with `num_channels`.
        attention_mask (`torch.Tensor` of shape (B, L)): 1 for real positions, 0 for padding (right padding).
        mask_positions (`torch.BoolTensor` of shape (B, L)): continuous positions replaced by the mask vector.
        inputs_embeds (`torch.FloatTensor` of shape (B, L, H)): given instead of the embedding lookup / projection.
        position_ids (`torch.LongTensor` of shape (B, L) or (1, L)): positions of the inputs (default 0..L-1 after the
            positions the cache has seen), for the position-dependent mixers (rotary or absolute positions).
        cache (`SequenceCache`): the state to continue from (generation); implies the recurrent path.
        use_cache (`bool`): run position by position through the mixers' recurrent steps and return the `cache`. None
            is False (the parallel pass); generate() passes `config.use_cache`. The recurrent path numbers positions
            from the cache, so position_ids that restart inside a row (packed sequences, no attention_mask) are
            refused there.
        output_hidden_states (`bool`): also return the embedding output and every layer's output (the last one after
            the final norm).
        output_attentions (`bool`): also return each attention layer's weights (eager attention).
        """
        if cache is not None and attention_mask is not None:
            length = next(x for x in (input_ids, input_values, inputs_embeds) if x is not None).shape[1]
            attention_mask = attention_mask[:, -length:]  # generation passes the mask of all positions
        validate_inputs(self.config, input_ids, input_values, attention_mask, inputs_embeds)
        padding_mask = None if attention_mask is None else attention_mask.to(torch.bool)
        output_hidden_states = output_hidden_states or self.config.output_hidden_states
        output_attentions = output_attentions or self.config.output_attentions
        if use_cache or cache is not None:
            if position_ids is not None and padding_mask is None:
                batch = next(x for x in (input_ids, input_values, inputs_embeds) if x is not None).shape[0]
                refuse_packed_sequences(position_ids, batch, "the recurrent path (`use_cache` / `cache`)")
            hidden_states, cache, all_hidden, all_attentions = self._forward_recurrent(
                input_ids, input_values, inputs_embeds, padding_mask, cache, output_hidden_states, output_attentions
            )
            return BaseModelOutputWithPast(
                last_hidden_state=hidden_states, cache=cache, hidden_states=all_hidden, attentions=all_attentions
            )
        hidden_states = self._embed(
            input_ids, input_values, mask_positions, position_ids=position_ids, inputs_embeds=inputs_embeds
        )  # (B, L, H)
        if position_ids is not None and padding_mask is None and not self.supports_packed_sequences:
            refuse_packed_sequences(position_ids, hidden_states.shape[0], f"{type(self).__name__}'s mixers")
        mixer_kwargs = self._mixer_kwargs(hidden_states, padding_mask, position_ids)
        if output_attentions:
            mixer_kwargs["output_attentions"] = True
        all_hidden = () if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden += (hidden_states,)
            hidden_states, attentions = layer(hidden_states, padding_mask, **mixer_kwargs)
            if output_attentions and attentions is not None:
                all_attentions += (attentions,)
        hidden_states = self.norm_f(hidden_states, padding_mask)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states, hidden_states=all_hidden, attentions=all_attentions or None
        )
