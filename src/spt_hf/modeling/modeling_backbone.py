"""spt_backbone: any in-tree transformers backbone between spt_hf's embedding and spt_hf's final norm and heads.

    input_ids (B, L) or input_values (B, L, C) [+ mask_positions]
      -> SequenceEmbeddings (spt_hf: tokens, or Linear(C, H) with the learned mask vector)       (B, L, H)
      -> the transformers backbone, called with `inputs_embeds`                                   (B, L, H)
           its own input embedding is replaced by a parameter-free stub, its own final norm by a pass-through;
           decoders with bidirectional=True also run on each sequence reversed within its real length, and the two
           outputs are summed (docs/architectures.md)
      -> SequenceNorm (spt_hf's final norm) -> the shared heads of heads.py

Only the sequence mixer (the backbone's layers) differs from spt_hf's other architectures: the embedding, the final
norm, pooling and losses are the same code. Which modules are the backbone's layers, input embedding and final norm
is read from the built backbone (its `get_input_embeddings()`, the ModuleList of `num_hidden_layers` layers and the
norms registered beside it), not from a per-model table.
"""

from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .backbone_adapter import (
    PACKED_SEQUENCE_BACKBONES,
    BackboneLayout,
    build_backbone_model,
    cuda_kernel_notices_silenced,
    load_pretrained_backbone,
)
from .blocks import SequenceEmbeddings, SequenceNorm
from .configuration_backbone import WrapperConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequencePreTrainedModel, packing_refusal_for, refuse_packed_sequences, validate_inputs


def reversal_index(padding_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """(B, L) gather index that reverses each sequence within its real positions and leaves padding where it is
    (with right padding: position t < n reads n - 1 - t). It is its own inverse."""
    positions = torch.arange(length, device=device).expand(batch, length)  # (B, L)
    if padding_mask is None:
        return positions.flip(1)
    real = padding_mask.to(torch.bool)  # (B, L)
    order = torch.argsort((~real).to(torch.int32), dim=1, stable=True)  # (B, L): real positions first, in order
    count = real.sum(1, keepdim=True)  # (B, 1)
    rank = torch.where(positions < count, count - 1 - positions, positions)  # (B, L): k-th real <- (n-1-k)-th real
    return torch.empty_like(order).scatter_(1, order, order.gather(1, rank))  # (B, L)


def attention_past_length(cache) -> int | None:
    """How many positions an attention cache holds; None for a cache of recurrent states only (transformers' Mamba
    layers, or a backbone's own recurrent cache), which holds no positions."""
    linear = getattr(cache, "is_linear", None)
    if linear is None or (cache.layers and all(linear)):
        return None
    return cache.get_seq_length()


def gather_positions(hidden_states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, L, H) hidden states reordered along L by a (B, L) index."""
    return hidden_states.gather(1, index.unsqueeze(-1).expand_as(hidden_states))


@contextmanager
def capture_layer_outputs(model: nn.Module, layers_name: str | None, store: list):
    """Collect each layer's output hidden states (B, L, H) of one forward pass into `store`."""
    if layers_name is None:
        raise ValueError(
            f"`output_hidden_states`: no list of {model.config.num_hidden_layers} layers found in "
            f"{type(model).__name__}, so its per-layer hidden states cannot be collected."
        )

    def hook(module, args, output):
        store.append(output[0] if isinstance(output, tuple | list) else output)

    handles = [layer.register_forward_hook(hook) for layer in model.get_submodule(layers_name)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class WrapperPreTrainedModel(SequencePreTrainedModel):
    config: WrapperConfig
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @property
    def _layout(self) -> BackboneLayout | None:
        """The built backbone's layout (None while the model is being built: heads build it after __init__)."""
        return getattr(getattr(self.base_model, "backbone_model", None), "spt_layout", None)

    @property
    def supports_gradient_checkpointing(self) -> bool:
        """As the backbone's own transformers class (True until it is built)."""
        return True if self._layout is None else self._layout.supports_gradient_checkpointing

    @property
    def _is_stateful(self) -> bool:
        """Recurrent backbones (Mamba, ...) cannot roll their cache back: transformers refuses assisted decoding."""
        return False if self._layout is None else self._layout.stateful


class WrapperModel(WrapperPreTrainedModel):
    """spt_hf's embedding -> a transformers backbone (through `inputs_embeds`) -> spt_hf's final norm."""

    def __init__(self, config: WrapperConfig):
        super().__init__(config)
        self.embeddings = SequenceEmbeddings(config)
        self.backbone_model = build_backbone_model(config)
        self.two_directions = config.bidirectional and config.backbone_kind == "decoder"
        separate = self.two_directions and config.reverse_weights == "separate"
        self.reverse_model = build_backbone_model(config) if separate else None
        self.norm_f = SequenceNorm(config)
        self.post_init()
        if config.backbone_name_or_path is not None and not self.norm_f.norm.weight.is_meta:
            # A model built from its config starts from the checkpoint; `from_pretrained` of a saved spt_backbone
            # model builds on the meta device and reads its own weights instead.
            load_pretrained_backbone(self)

    def get_input_embeddings(self) -> nn.Module | None:
        return getattr(self.embeddings, "word_embeddings", None)

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.word_embeddings = value

    @staticmethod
    def keeps_packed_sequences_apart(config: WrapperConfig) -> bool:
        """Whether restarting position_ids (packed sequences, no attention_mask) keep each sequence to itself, as
        `SequenceBaseModel.supports_packed_sequences`: a one-direction decoder of PACKED_SEQUENCE_BACKBONES."""
        return config.is_causal and config.backbone_config.model_type in PACKED_SEQUENCE_BACKBONES

    @staticmethod
    def packing_name(config: WrapperConfig) -> str:
        """The model as packing refusals name it: its backbone type and direction."""
        direction = "causal" if config.is_causal else "bidirectional"
        return f"spt_backbone ({config.backbone_config.model_type}, {direction})"

    @classmethod
    def packing_refusal(cls, config: WrapperConfig) -> str | None:
        """As `SequenceBaseModel.packing_refusal`: its backbone type and direction, and its final norm. The
        attention implementation is not asked: the backbone's own attention reads the positions (transformers'
        packing support)."""
        return packing_refusal_for(cls.packing_name(config), cls.keeps_packed_sequences_apart(config), config)

    @property
    def supports_packed_sequences(self) -> bool:
        return self.keeps_packed_sequences_apart(self.config)

    def generation_cache(self) -> DynamicCache | None:
        """An empty cache of the backbone's own kind, the one transformers' generate gives its causal LM: a
        `DynamicCache` built from the backbone config (with recurrent-state layers for Mamba-like models). None for a
        backbone that makes its own cache in its first forward pass (xLSTM, ...) or takes none (RWKV's `state`)."""
        if not self.backbone_model.spt_layout.default_cache:
            return None
        return DynamicCache(config=self.backbone_model.config)

    def _backbone_mask(self, attention_mask, length: int, cache) -> torch.Tensor | None:
        """The mask the backbone expects: with an attention cache the past and new positions (a mask of the new
        positions only counts the cached ones as real); with a cache of recurrent states only the new positions."""
        if attention_mask is None or not self.backbone_model.spt_layout.takes_mask:
            return None
        past = 0 if cache is None else attention_past_length(cache)
        if past is None:
            return attention_mask[:, -length:]
        if attention_mask.shape[1] == length and past:
            attention_mask = torch.cat([attention_mask.new_ones(attention_mask.shape[0], past), attention_mask], 1)
        return attention_mask

    def _run(self, model, hidden_states, attention_mask, position_ids, cache, use_cache, capture, attentions):
        """One pass of a backbone: (B, L, H) outputs, the per-layer outputs if `capture`, its attentions if asked, and
        its cache."""
        layout, length = model.spt_layout, hidden_states.shape[1]
        pad = -length % layout.length_multiple
        if pad:
            hidden_states = F.pad(hidden_states, (0, 0, 0, pad))  # (B, L + pad, H)
            if attention_mask is None:
                attention_mask = hidden_states.new_ones(hidden_states.shape[0], length, dtype=torch.long)  # (B, L)
            attention_mask = F.pad(attention_mask, (0, pad))  # (B, L + pad): the added positions are padding
            position_ids = None if position_ids is None else F.pad(position_ids, (0, pad))
        kwargs = {"inputs_embeds": hidden_states, "return_dict": True}
        if attention_mask is not None and layout.takes_mask:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None and "position_ids" in layout.arguments:
            kwargs["position_ids"] = position_ids
        if layout.takes_cache:
            kwargs.update(use_cache=use_cache, **({"cache": cache} if cache is not None else {}))
        if attentions and layout.records_attentions:
            kwargs["output_attentions"] = True
        per_layer = []
        quiet = layout.parallel_scan and not torch.compiler.is_compiling()  # a traced graph prints no notices
        with (
            capture_layer_outputs(model, layout.layers, per_layer) if capture else nullcontext(),
            cuda_kernel_notices_silenced() if quiet else nullcontext(),
        ):
            outputs = model(**kwargs)
        per_layer = [h[:, :length] for h in per_layer[: model.config.num_hidden_layers]]
        cache = getattr(outputs, "cache", None) if use_cache else None
        return outputs.last_hidden_state[:, :length], per_layer, getattr(outputs, "attentions", None), cache

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mask_positions: torch.BoolTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        r"""
        The arguments of spt_hf's other backbones (modeling_sequence.SequenceBaseModel.forward). `cache` is the
        backbone's own transformers cache (see `generation_cache`); with it, `attention_mask` may cover the cached and
        the new positions (as generate() passes it) or the new positions only. `position_ids` reach backbones that take
        them (the reversed pass of a bidirectional decoder uses its own 0..n-1).
        """
        inputs = next(x for x in (input_ids, input_values, inputs_embeds) if x is not None)
        batch, length = inputs.shape[:2]
        current_mask = None if attention_mask is None else attention_mask[:, -length:]
        validate_inputs(self.config, input_ids, input_values, current_mask, inputs_embeds)
        use_cache = bool(use_cache) or cache is not None
        if use_cache and not self.config.is_causal:
            raise ValueError("`use_cache`/`cache` needs a causal model (`bidirectional=False`).")
        if use_cache and cache is None:
            cache = self.generation_cache()  # None: the backbone makes its own and returns it
        output_hidden_states = output_hidden_states or self.config.output_hidden_states
        output_attentions = output_attentions or self.config.output_attentions
        padding_mask = None if current_mask is None else current_mask.to(torch.bool)  # (B, L)
        self._check_padding_side(padding_mask)
        if position_ids is not None and padding_mask is None and cache is None and not self.supports_packed_sequences:
            refuse_packed_sequences(position_ids, batch, self.packing_name(self.config))
        embedded = self.embeddings(input_ids, input_values, mask_positions, inputs_embeds=inputs_embeds)  # (B, L, H)
        run = {"capture": output_hidden_states, "attentions": output_attentions}
        mask = self._backbone_mask(attention_mask, length, cache)
        hidden, per_layer, attentions, cache = self._run(
            self.backbone_model, embedded, mask, position_ids, cache, use_cache, **run
        )
        if self.two_directions:
            index = reversal_index(padding_mask, batch, length, embedded.device)  # (B, L)
            reverse_model = self.reverse_model if self.reverse_model is not None else self.backbone_model
            reverse, reverse_layers, _, _ = self._run(
                reverse_model, gather_positions(embedded, index), mask, None, None, False, **run
            )
            hidden = hidden + gather_positions(reverse, index)  # (B, L, H): both directions summed
            per_layer = [h + gather_positions(r, index) for h, r in zip(per_layer, reverse_layers)]
        hidden = self.norm_f(hidden, padding_mask)  # (B, L, H)
        all_hidden = (embedded, *per_layer[:-1], hidden) if output_hidden_states else None
        return BaseModelOutputWithPast(
            last_hidden_state=hidden,
            cache=cache if use_cache else None,
            hidden_states=all_hidden,
            attentions=attentions if output_attentions else None,
        )

    def _check_padding_side(self, padding_mask: torch.Tensor | None) -> None:
        """A decoder without an attention mask respects padding only when it is on the right (padded positions come
        after every real one, in both directions)."""
        if padding_mask is None or self.backbone_model.spt_layout.takes_mask or torch.compiler.is_compiling():
            return
        if (padding_mask[:, 1:] & ~padding_mask[:, :-1]).any():
            raise ValueError(
                f"The {self.backbone_model.spt_layout.model_type} backbone takes no attention mask, so padding must "
                "be on the right (every real position before every padded one); got padding before real positions."
            )


class WrapperForMaskedLM(SequenceForMaskedLM, WrapperPreTrainedModel):
    base_model_class = WrapperModel

    def __init__(self, config: WrapperConfig):
        if config.backbone_input == "tokenizer":
            raise ValueError(
                "Masked SPT replaces masked tokens by spt_hf's mask id, which is not a token of the backbone "
                "tokenizer (`backbone_input: tokenizer`); use causal SPT (`objective: causal`), or "
                "`backbone_input: embeddings`."
            )
        super().__init__(config)


class WrapperForCausalLM(SequenceForCausalLM, WrapperPreTrainedModel, GenerationMixin):
    base_model_class = WrapperModel

    def __init__(self, config: WrapperConfig):
        super().__init__(config)
        if not self.base_model.backbone_model.spt_layout.takes_cache:
            # No cache to continue from: generate() must run the whole sequence at every step (transformers would
            # otherwise feed only the newest token).
            self.generation_config.use_cache = False


class WrapperForSequenceClassification(SequenceForSequenceClassification, WrapperPreTrainedModel):
    base_model_class = WrapperModel


class WrapperForRetrieval(SequenceForRetrieval, WrapperPreTrainedModel):
    base_model_class = WrapperModel


__all__ = [
    "WrapperPreTrainedModel",
    "WrapperModel",
    "WrapperForMaskedLM",
    "WrapperForCausalLM",
    "WrapperForSequenceClassification",
    "WrapperForRetrieval",
]

# Loading aliases: checkpoints saved before the rename name these classes in `auto_map` and `architectures`.
SPTBackbonePreTrainedModel = WrapperPreTrainedModel
SPTBackboneModel = WrapperModel
SPTBackboneForMaskedLM = WrapperForMaskedLM
SPTBackboneForCausalLM = WrapperForCausalLM
SPTBackboneForSequenceClassification = WrapperForSequenceClassification
SPTBackboneForRetrieval = WrapperForRetrieval
