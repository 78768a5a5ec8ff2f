"""Model cards for spt_hf checkpoints, rendered from a phase's `results.json` with `huggingface_hub.ModelCard`.

Two Jinja templates (`templates/spt_checkpoint.md`, `templates/finetuned_checkpoint.md`, documented in the
top-level `hub_cards/README.md`) are filled from the results file: architecture and size, task and data (split sizes,
the SPT data fingerprint), objective and masking rate, steps and compute, metrics, and the scratch baseline when
known. The metrics also go into the card's `model-index` metadata, so the Hub shows them; every number is copied from
the results file unrounded.
"""

import json
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..data.tasks import hub_task_type
from ..phases import FINETUNE_PHASE, RESULTS_FILE, SPT_PHASE, recorded_start_kind
from .data_card import data_context

TEMPLATES_DIR = Path(__file__).parent / "templates"
SPT_TEMPLATE = TEMPLATES_DIR / "spt_checkpoint.md"
FINETUNE_TEMPLATE = TEMPLATES_DIR / "finetuned_checkpoint.md"
PLACEHOLDER_REPO_ID = "NAMESPACE/NAME"
SPLITS = {"test": "test_", "validation": "eval_"}  # results.json metrics group -> key prefix
NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch")
# Architecture fields shown in the card, when the config has them (spt_hf config names).
ARCHITECTURE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "position_embedding_type",
    "attention_window",
    "state_size",
    "n_ssm",
    "kernel",
    "init",
    "bidirectional",
    "norm_type",
    "prenorm",
    "max_position_embeddings",
    "backbone_name_or_path",
    "backbone_input",
    "reverse_weights",
)
HEAD_FIELDS = ("pooling", "classifier_type", "problem_type")
SPT_TASK_TYPES = {
    "masked": ("fill-mask", "Masked self-pretraining (SPT)"),
    "causal": ("text-generation", "Causal self-pretraining (SPT)"),
}
CITATION = """@inproceedings{amos2024never,
  title     = {Never Train from Scratch: Fair Comparison of Long-Sequence Models Requires Data-Driven Priors},
  author    = {Amos, Ido and Berant, Jonathan and Gupta, Ankit},
  booktitle = {The Twelfth International Conference on Learning Representations (ICLR)},
  year      = {2024},
  url       = {https://arxiv.org/abs/2310.02980}
}"""


def render_model_card(
    results: dict,
    scratch_results: dict | None = None,
    *,
    spt_results: dict | None = None,
    finetune_results: dict | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
    task_card: dict | None = None,
    preprocessing: str | None = None,
) -> ModelCard:
    """The model card of one phase's checkpoint, from its `results.json` content.

    Args:
        results: the phase's results (`phase` "spt" -> the SPT template, otherwise the finetuned template).
        scratch_results: the scratch baseline trained with the same recipe and budget, when known.
        spt_results: for a finetuned checkpoint, the results of the SPT phase it started from (objective,
            masking rate, data fingerprint), when known.
        finetune_results: for an SPT checkpoint, the results of finetuning from it in the same run, when known.
        repo_id: the Hub repository, for the loading snippets (a placeholder if not given).
        license: the card's license (the Hub's identifier).
        task_card: the checkpoint's `task_card.json` content, shown in the Data section.
        preprocessing: what the checkpoint carries for raw inputs ("tokenizer", "feature_extractor" or None).
    """
    is_spt = results["phase"] == SPT_PHASE
    context = card_context(results, scratch_results, spt_results, finetune_results, repo_id)
    context.update(data_context(results, task_card, preprocessing, context["dataset_id"]))
    card_data = ModelCardData(
        license=license,
        library_name="transformers",
        tags=[tag for tag in ("spt_hf", "self-pretraining", *model_types(results), results["task"]) if tag],
        datasets=[context["dataset_id"]] if context["dataset_id"] else None,
        base_model=context["base_model"],
        model_name=context["model_name"],
        eval_results=eval_results(results, context["model_name"]) or None,
    )
    template = SPT_TEMPLATE if is_spt else FINETUNE_TEMPLATE
    return ModelCard.from_template(card_data, template_path=str(template), **context)


def eval_results(results: dict, model_name: str) -> list[EvalResult]:
    """One `EvalResult` per test and validation metric of the results file (the numbers unchanged)."""
    task = results["task"]
    if results["phase"] == SPT_PHASE:
        task_type, task_name = SPT_TASK_TYPES[results["recipe"]["spt"]["objective"]]
    else:
        task_type, task_name = hub_task_type(task), f"{task} (finetuned)"
    dataset_type = hub_dataset_id(results) or task
    evals = []
    for split, name, value in metric_rows(results):
        evals.append(
            EvalResult(
                task_type=task_type,
                task_name=task_name,
                dataset_type=dataset_type,
                dataset_name=f"{task} ({split})",
                dataset_split=split,
                metric_type=name,
                metric_name=f"{split} {name}",
                metric_value=value,
            )
        )
    return evals


def metric_rows(results: dict) -> list[tuple[str, str, float]]:
    """(split, metric, value) for every numeric test and validation metric, runtimes and throughput excluded."""
    rows = []
    for split, prefix in SPLITS.items():
        for key, value in (results.get("metrics", {}).get(split) or {}).items():
            name = key.removeprefix(prefix)
            if isinstance(value, int | float) and not isinstance(value, bool) and not name.endswith(NOT_METRICS):
                rows.append((split, name, value))
    return rows


def headline_metric(results: dict | None) -> tuple[str, float] | None:
    """The test metric a comparison is made on: accuracy (classification), R² (regression), else the first."""
    if not results:
        return None
    rows = {name: value for split, name, value in metric_rows(results) if split == "test"}
    for name in ("accuracy", "r2", "masked_accuracy", "next_token_accuracy", "loss"):
        if name in rows:
            return name, rows[name]
    return next(iter(rows.items()), None)


def hub_dataset_id(results: dict) -> str | None:
    """The Hub dataset the task reads (recipe option `hub_id`, else the task's default), if it has one."""
    data = results.get("recipe", {}).get("data", {})
    hub_id = (data.get("task_options") or {}).get("hub_id")
    if hub_id:
        return hub_id
    from ..data.tasks import TASKS

    default = getattr(TASKS.get(results["task"] or ""), "hub_id", None)
    return default if isinstance(default, str) else None


def is_hub_id(name: str | None) -> bool:
    """`namespace/name` that is not a local path (so it can be a card's `base_model`)."""
    return bool(name) and re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not Path(name).exists()


def card_context(results, scratch_results, spt_results, finetune_results, repo_id) -> dict:
    """Everything the templates show, read from the results files (numbers as they are)."""
    config = results.get("model_config") or {}
    recipe = results.get("recipe") or {}
    spt_source = results if results["phase"] == SPT_PHASE else (spt_results or {})
    init = start(results)
    repo_id = repo_id or PLACEHOLDER_REPO_ID
    budget = results.get("budget") or {}
    head_rows = [(k, config[k]) for k in HEAD_FIELDS if config.get(k) is not None]
    if results["phase"] != SPT_PHASE:
        head_rows.append(("num_labels", num_labels(results)))
    return {
        "model_name": repo_id.split("/")[-1] if repo_id != PLACEHOLDER_REPO_ID else default_name(results),
        "repo_id": repo_id,
        "task": results["task"],
        "model_type": model_type_label(results),
        "architecture": (config.get("architectures") or [results["model_type"]])[0],
        "num_parameters": results.get("num_parameters"),
        "architecture_rows": [(k, config[k]) for k in ARCHITECTURE_FIELDS if config.get(k) is not None],
        "head_rows": head_rows,
        "inputs": describe_inputs(config),
        "num_labels": num_labels(finetune_results if results["phase"] == SPT_PHASE else results),
        "dataset_id": hub_dataset_id(results),
        "split_sizes": (results.get("data") or {}).get("split_sizes") or {},
        "fingerprint": (spt_source.get("data") or {}).get("pretraining_fingerprint"),
        "overlap_checked": not (recipe.get("spt") or {}).get("allow_eval_overlap", True),
        "spt": (spt_source.get("recipe") or {}).get("spt"),
        "spt_steps": (spt_source.get("budget") or {}).get("steps"),
        "budget": budget,
        "total_flos": ((results.get("metrics") or {}).get("train") or {}).get("total_flos"),
        "metric_rows": metric_rows(results),
        "best": (results.get("metrics") or {}).get("metric_for_best_model"),
        "best_metric": (results.get("metrics") or {}).get("best_metric"),
        "comparison": comparison_rows(results, scratch_results, finetune_results),
        "init": init,
        "base_model": init.get("model_name_or_path") if is_hub_id(init.get("model_name_or_path")) else None,
        "code_version": results.get("code_version") or {},
        "seed": (recipe.get("training") or {}).get("seed"),
        "citation": CITATION,
    }


def start(results: dict) -> dict:
    """results.json's `init` (what a finetuned model started from), its kind read in `phases.StartKind`'s words
    whatever version of spt_hf wrote it; empty when not recorded."""
    init = results.get("init") or {}
    return {**init, "kind": recorded_start_kind(results)} if init else {}


def backbone_type(results: dict) -> str | None:
    """The transformers model type inside an spt_backbone model (`mamba`, `llama`, ...), else None."""
    backbone = (results.get("model_config") or {}).get("backbone_config")
    return backbone.get("model_type") if isinstance(backbone, dict) else None


def model_types(results: dict) -> tuple:
    """The model type and, for spt_backbone, its backbone's (both are card tags)."""
    return results["model_type"], backbone_type(results)


def model_type_label(results: dict) -> str:
    """`spt_s4`, or `spt_backbone (mamba)`: spt_backbone models name their backbone."""
    backbone = backbone_type(results)
    return f"{results['model_type']} ({backbone})" if backbone else results["model_type"]


def num_labels(results: dict | None) -> int | None:
    config = (results or {}).get("model_config") or {}
    return config.get("num_labels") or len(config.get("id2label") or {}) or None


def default_name(results: dict) -> str:
    suffix = "spt" if results["phase"] == SPT_PHASE else "finetuned"
    parts = (results["model_type"].removeprefix("spt_"), backbone_type(results), results["task"], suffix)
    return "-".join(str(part) for part in parts if part)


def describe_inputs(config: dict) -> str:
    if config.get("vocab_size"):
        return f"token ids (`input_ids`), vocabulary of {config['vocab_size']}"
    if config.get("num_channels"):
        return f"continuous values (`input_values`), {config['num_channels']} channel(s) per step"
    return "see config.json"


def comparison_rows(results: dict, scratch: dict | None, finetuned: dict | None) -> list[tuple[str, str, float]]:
    """(initialisation, metric, test value) of the finetuned models to compare: from SPT, and from scratch."""
    baseline = ("from scratch (same recipe and budget)", scratch)
    if results["phase"] == SPT_PHASE:
        candidates = (("finetuned from this checkpoint", finetuned), baseline)
    elif scratch:
        candidates = ((f"this model (initialised: {start(results).get('kind', '?')})", results), baseline)
    else:
        return []
    return [(label, *headline) for label, source in candidates if (headline := headline_metric(source))]


def results_from_folder(folder: str | Path) -> dict:
    """The `results.json` of a checkpoint folder, or (a checkpoint trained elsewhere, or a Trainer `checkpoint-N`)
    the few facts its config and weights give: phase from the head class, model type, size, steps."""
    folder = Path(folder)
    path = folder / RESULTS_FILE
    if path.is_file():
        return json.loads(path.read_text())
    config = json.loads((folder / "config.json").read_text())
    head = (config.get("architectures") or [""])[0]
    state = folder / "trainer_state.json"
    steps = json.loads(state.read_text()).get("global_step") if state.is_file() else None
    return {
        "phase": SPT_PHASE if head.endswith(("ForMaskedLM", "ForCausalLM")) else FINETUNE_PHASE,
        "task": None,
        "model_type": config.get("model_type", "unknown"),
        "num_parameters": count_parameters(folder),
        "model_config": config,
        "recipe": {"spt": {"objective": "causal" if head.endswith("ForCausalLM") else "masked"}},
        "budget": {"steps": steps},
        "metrics": {},
    }


def count_parameters(folder: Path) -> int:
    """Number of weights in the folder's safetensors files (read from their headers only)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = handle.get_slice(name).get_shape()
                count = 1
                for size in shape:
                    count *= size
                total += count
    return total
