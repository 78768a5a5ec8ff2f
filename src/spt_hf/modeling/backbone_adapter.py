"""Adapting a transformers backbone to spt_backbone: build it without the modules spt_hf replaces (token embedding,
pooler, final norm), describe what its forward takes (`BackboneLayout`), and load a pretrained checkpoint into it.

Nothing here is a per-model table: the layers are the ModuleList of `num_hidden_layers` modules, the input embedding is
what `get_input_embeddings()` returns, the final norm is a norm registered beside the layers and after them (or under
a final-norm name), and the arguments are read from the signature of the backbone's `forward`.
"""

import copy
import inspect
import logging
from contextlib import contextmanager

import torch
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, PreTrainedModel
from transformers.utils.import_utils import is_mambapy_available

from .configuration_backbone import WrapperConfig, backbone_checkpoint, backbone_direction

# Names under which transformers models keep their final norm (beside the layer list); norms registered after the
# layer list count too. Bloom's `word_embeddings_layernorm` sits before the layers and is kept.
FINAL_NORM_NAMES = ("norm", "norm_f", "ln_f", "final_layer_norm", "final_layernorm", "final_norm", "ln_out", "out_norm")


class RemovedInputEmbedding(nn.Module):
    """Stands in for the backbone's own token embedding: spt_hf's embedding feeds the backbone through
    `inputs_embeds`, so the backbone's table would be an unused (and untrained) parameter. It has none."""

    def forward(self, *args, **kwargs):
        raise RuntimeError(
            "spt_backbone feeds the backbone through `inputs_embeds`: its own input embedding was removed "
            "(spt_hf's embedding replaces it)."
        )


class RemovedFinalNorm(nn.Module):
    """Stands in for the backbone's own final norm: spt_hf's final norm (config.norm_type) follows the backbone, and
    two norms in a row would differ from spt_hf's other architectures."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return hidden_states


def is_norm(module: nn.Module) -> bool:
    norms = nn.LayerNorm | nn.GroupNorm | nn.RMSNorm
    return isinstance(module, norms) or type(module).__name__.lower().endswith("norm")


def find_layer_list(model: nn.Module, num_layers: int) -> str | None:
    """The dotted name of the ModuleList holding the backbone's `num_layers` layers (the shortest such name)."""
    found = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and len(module) == num_layers and name
    ]
    return min(found, key=len) if found else None


def find_final_norms(model: nn.Module, layers_name: str | None) -> list[str]:
    """Dotted names of the norms beside the layer list that run after it: registered after it, or named as final."""
    if layers_name is None:
        return []
    parent_name, _, attribute = layers_name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    names = list(parent._modules)
    after = names.index(attribute)
    return [
        f"{parent_name}.{name}" if parent_name else name
        for index, name in enumerate(names)
        if parent._modules[name] is not None
        and is_norm(parent._modules[name])
        and (index > after or name in FINAL_NORM_NAMES)
    ]


def length_multiple(backbone_config) -> int:
    """The length the backbone pads its inputs to a multiple of (BigBird block-sparse blocks, Longformer windows);
    spt_backbone pads to it itself, because those backbones pad by looking up their own (removed) token embedding."""
    if getattr(backbone_config, "attention_type", None) == "block_sparse":
        return int(backbone_config.block_size)
    window = getattr(backbone_config, "attention_window", None)
    if isinstance(window, int | list) and window:
        return int(max(window) if isinstance(window, list) else window)
    return 1


# Backbones whose own masks keep packed sequences apart (transformers' `create_causal_mask` reads restarting
# position_ids when no attention mask is given), run as a one-direction decoder; tests/models/test_backbone.py checks
# that a packed row equals its sequences run alone for each. Any other backbone refuses packed input: Mamba's scan,
# BERT's and BigBird's masks and the reversed pass of a bidirectional decoder would let the sequences mix.
PACKED_SEQUENCE_BACKBONES = ("llama", "gpt_neox", "qwen2")
# transformers' notices that a Mamba kernel falls back to PyTorch because a CUDA-only package is missing: with
# mambapy's parallel scan in use they ask for packages the fast path does not need (and a CPU cannot use).
CUDA_KERNEL_NOTICES = ("because `mamba_ssm` is not installed", "because `causal_conv1d` is not installed")


class _DropCudaKernelNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(notice in message for notice in CUDA_KERNEL_NOTICES)


_KERNEL_NOTICE_FILTER = _DropCudaKernelNotices()


@contextmanager
def cuda_kernel_notices_silenced():
    """Within the block, transformers' CUDA_KERNEL_NOTICES are dropped. transformers shows each once a process
    (`warning_once`), so a loop-scan model run later in the same process does not show them either."""
    kernel_logger = logging.getLogger("transformers.integrations.hub_kernels")
    kernel_logger.addFilter(_KERNEL_NOTICE_FILTER)
    try:
        yield
    finally:
        kernel_logger.removeFilter(_KERNEL_NOTICE_FILTER)


class BackboneLayout:
    """What spt_backbone needs to know about one built backbone: the arguments its forward takes, where its layers
    are, whether it keeps a cache and of which kind. Clear errors for a backbone that lacks what is needed."""

    def __init__(self, model: PreTrainedModel, kind: str):
        config = model.config
        self.model_type = config.model_type
        self.arguments = set(inspect.signature(model.forward).parameters)
        missing = [name for name in ("inputs_embeds",) if name not in self.arguments]
        if kind == "encoder" and "attention_mask" not in self.arguments:
            missing.append("attention_mask")  # a bidirectional model cannot respect padding without one
        if missing:
            raise ValueError(
                f"The {self.model_type} backbone ({type(model).__name__}.forward) takes no {' and no '.join(missing)}"
                ", which spt_backbone needs: `inputs_embeds` to feed spt_hf's embedding, and an attention mask to "
                "keep padding out of a bidirectional model."
            )
        self.layers = find_layer_list(model, config.num_hidden_layers)
        self.takes_mask = "attention_mask" in self.arguments
        self.takes_cache = "cache" in self.arguments
        self.records_attentions = "attentions" in (getattr(model, "_can_record_outputs", None) or {}) or (
            "output_attentions" in self.arguments
        )
        # The cache generate() would give the backbone's own causal LM: a DynamicCache built from its config, unless
        # that class makes its own (xLSTM, ...): then the backbone creates it in its first forward pass.
        causal_lm = AutoModelForCausalLM._model_mapping.get(type(config), None)
        self.default_cache = self.takes_cache and (causal_lm is None or causal_lm._supports_default_dynamic_cache())
        self.stateful = bool(type(model)._is_stateful)
        self.supports_gradient_checkpointing = bool(type(model).supports_gradient_checkpointing)
        self.length_multiple = length_multiple(config)
        # mambapy's parallel scan runs (configuration_backbone.fast_path_defaults): no CUDA kernel is wanted
        self.parallel_scan = bool(getattr(config, "use_mambapy", False)) and is_mambapy_available()


def build_backbone_model(config: WrapperConfig) -> PreTrainedModel:
    """The transformers base model (`AutoModel`) of `config.backbone_config`, without its token embedding, pooler and
    final norm. Encoders run causally (`is_decoder=True`) when `bidirectional` is False."""
    backbone_config = copy.deepcopy(config.backbone_config)
    kind, has_causal_mode = backbone_direction(backbone_config)
    if kind == "encoder":
        if not config.bidirectional and not has_causal_mode:
            raise ValueError(f"The {backbone_config.model_type} backbone has no causal mode; keep bidirectional=True.")
        backbone_config.is_decoder = not config.bidirectional
    model = AutoModel.from_config(backbone_config, **_pooling_kwargs(AutoModel._model_mapping[type(backbone_config)]))
    model.set_input_embeddings(RemovedInputEmbedding())
    layout = BackboneLayout(model, kind)
    for name in find_final_norms(model, layout.layers):
        parent, _, attribute = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attribute, RemovedFinalNorm())
    model.spt_layout = layout
    return model


def _pooling_kwargs(model_cls) -> dict:
    """`add_pooling_layer=False` for the encoders that build a pooler by default (spt_hf pools in its heads)."""
    takes_it = "add_pooling_layer" in inspect.signature(model_cls.__init__).parameters
    return {"add_pooling_layer": False} if takes_it else {}


def load_pretrained_backbone(model: nn.Module) -> None:
    """Copy the weights of `config.backbone_name_or_path` (a local folder or Hub id, safetensors only) into the
    backbone of an WrapperModel (into both directions' backbones), the token embedding when the inputs are the
    backbone tokenizer's (`backbone_input: tokenizer`), and the final norm when the checkpoint's is a LayerNorm like
    spt_hf's. ValueError naming the tensors when the checkpoint does not fit `backbone_config`."""
    config = model.config
    source_cls = AutoModel._model_mapping[type(config.backbone_config)]
    with backbone_checkpoint(config.backbone_name_or_path):
        source = AutoModel.from_pretrained(
            config.backbone_name_or_path, use_safetensors=True, dtype=torch.float32, **_pooling_kwargs(source_cls)
        )
    embedding = source.get_input_embeddings()
    final_norms = find_final_norms(source, find_layer_list(source, source.config.num_hidden_layers))
    replaced = [
        name
        for name, tensor in source.named_parameters()
        if any(
            tensor is param
            for module in [embedding] + [source.get_submodule(n) for n in final_norms]
            for param in module.parameters()
        )
    ]
    state = {name: tensor for name, tensor in source.state_dict().items() if name not in replaced}
    for backbone in (model.backbone_model, model.reverse_model):
        if backbone is None:
            continue
        missing, unexpected = backbone.load_state_dict(_checked(state, backbone, config), strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{config.backbone_name_or_path} does not fit `backbone_config`: missing {missing}, unexpected "
                f"{unexpected}."
            )
    with torch.no_grad():
        if config.backbone_input == "tokenizer":
            _copy(model.embeddings.word_embeddings.weight, embedding.weight, "the token embedding", config)
        norm = source.get_submodule(final_norms[0]) if final_norms else None
        if isinstance(norm, nn.LayerNorm) and isinstance(model.norm_f.norm, nn.LayerNorm):
            _copy(model.norm_f.norm.weight, norm.weight, "the final LayerNorm", config)
            if norm.bias is not None:
                _copy(model.norm_f.norm.bias, norm.bias, "the final LayerNorm", config)


def _checked(state: dict, backbone: nn.Module, config: WrapperConfig) -> dict:
    own = backbone.state_dict()
    wrong = [
        f"{name} {tuple(tensor.shape)} vs {tuple(own[name].shape)}"
        for name, tensor in state.items()
        if name in own and own[name].shape != tensor.shape
    ]
    if wrong:
        raise ValueError(
            f"{config.backbone_name_or_path} does not fit `backbone_config` (checkpoint vs config shapes): {wrong}; "
            "leave `backbone_config` out to take the checkpoint's own."
        )
    return state


def _copy(target: torch.Tensor, source: torch.Tensor, what: str, config: WrapperConfig) -> None:
    if target.shape != source.shape:
        raise ValueError(
            f"{what} of {config.backbone_name_or_path} has shape {tuple(source.shape)}, the model's "
            f"{tuple(target.shape)}."
        )
    target.copy_(source.to(target.dtype))
