"""Model cards: metadata the Hub accepts, and every number in the card equal to the one in results.json."""

import copy
import json
import shutil
from pathlib import Path

import pytest
from hub_server import HubError, validate_model_index
from huggingface_hub import ModelCard

from spt_hf.hub import render_model_card, resolve_push_folder, results_from_folder, write_model_card
from spt_hf.hub.cards import SPLITS, TEMPLATES_DIR
from spt_hf.hub.push import related_results

REPO_ROOT = Path(__file__).resolve().parents[2]


def load(run: Path, phase: str) -> dict:
    return json.loads((run / phase / "results.json").read_text())


def expected_metrics(results: dict) -> dict:
    """{(split, metric): value} of the results file's numeric test/validation metrics (runtimes excluded)."""
    out = {}
    for split, prefix in SPLITS.items():
        for key, value in results["metrics"][split].items():
            name = key.removeprefix(prefix)
            if not name.endswith(("runtime", "samples_per_second", "steps_per_second", "epoch")):
                out[(split, name)] = value
    return out


def check_metadata(card: ModelCard, results: dict) -> None:
    """The card's metadata as the Hub reads it: license, tags, and a model-index equal to the results file."""
    reread = ModelCard(str(card))  # parse the rendered text, as the Hub does
    data = reread.data
    assert data.license == "apache-2.0" and data.library_name == "transformers"
    assert {"spt_hf", "self-pretraining", results["model_type"], results["task"]} <= set(data.tags)
    validate_model_index(data.to_dict())  # the Hub's model-index checks (the local server applies the same)
    found = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    assert found == expected_metrics(results)
    assert len(found) >= 2


def test_spt_card_metadata_and_numbers_equal_the_results_file(tiny_run):
    results, finetune, scratch = (load(tiny_run, phase) for phase in ("spt", "finetune", "scratch"))
    card = render_model_card(results, scratch, finetune_results=finetune, repo_id="tester/tiny-spt")
    check_metadata(card, results)
    assert card.data.eval_results[0].task_type == "fill-mask"
    assert card.data.get("datasets") is None  # digits has no Hub dataset id
    text = card.text
    fingerprint = results["data"]["pretraining_fingerprint"]
    budget = results["budget"]
    expected = [
        f"| parameters | {results['num_parameters']} |",
        f"| hidden_size | {results['model_config']['hidden_size']} |",
        f"train {results['data']['split_sizes']['train']}, validation {results['data']['split_sizes']['validation']}",
        f"sha256 `{fingerprint['digest']}` over {fingerprint['num_examples']} training examples "
        f"({fingerprint['num_unique']} unique)",
        f"probability **{results['recipe']['spt']['mask_rate']}**",
        f"| {budget['steps']} | {budget['epochs']} | {budget['per_device_batch_size']} | {budget['processes']} | "
        f"{budget['gradient_accumulation_steps']} | {budget['global_batch_size']} | {budget['train_runtime_s']} | "
        f"{budget['wall_time_s']} |",
        f"| finetuned from this checkpoint | accuracy | {finetune['metrics']['test']['test_accuracy']} |",
        f"| from scratch (same recipe and budget) | accuracy | {scratch['metrics']['test']['test_accuracy']} |",
        'from_pretrained("tester/tiny-spt", num_labels=10)',
        "--model_name_or_path tester/tiny-spt",
        "## Limitations",
        "Amos, Ido and Berant, Jonathan and Gupta, Ankit",
        "arxiv.org/abs/2310.02980",
    ]
    expected += [f"| {split} | {name} | {value} |" for (split, name), value in expected_metrics(results).items()]
    for line in expected:
        assert line in text, line


def test_finetuned_card_reports_the_scratch_baseline_and_its_spt_phase(tiny_run):
    results, pretrain, scratch = (load(tiny_run, phase) for phase in ("finetune", "spt", "scratch"))
    card = render_model_card(results, scratch, spt_results=pretrain, repo_id="tester/tiny-finetuned")
    check_metadata(card, results)
    assert card.data.eval_results[0].task_type == "image-classification"
    assert card.data.get("base_model") is None  # started from a local folder, not a Hub model
    spt_acc, scratch_acc = results["metrics"]["test"]["test_accuracy"], scratch["metrics"]["test"]["test_accuracy"]
    text = card.text
    for line in (
        "from a **self-pretrained** (SPT) checkpoint",
        f"| this model (initialised: spt) | accuracy | {spt_acc} |",
        f"| from scratch (same recipe and budget) | accuracy | {scratch_acc} |",
        f"Difference (accuracy): {spt_acc - scratch_acc:+.4f}.",
        f"The SPT phase ({pretrain['budget']['steps']} steps) used masked denoising",
        f"**{pretrain['recipe']['spt']['mask_rate']}**",
        pretrain["data"]["pretraining_fingerprint"]["digest"],
        f"| num_labels | {len(results['model_config']['id2label'])} |",
        'from_pretrained("tester/tiny-finetuned")',
    ):
        assert line in text, line


def test_cards_of_other_objectives_tasks_and_sources(tiny_run):
    results = load(tiny_run, "spt")
    causal = copy.deepcopy(results)
    causal["recipe"]["spt"]["objective"] = "causal"
    card = render_model_card(causal)
    assert card.data.eval_results[0].task_type == "text-generation"
    assert "Causal denoising" in card.text and "NAMESPACE/NAME" in card.text  # no repo id: a placeholder
    text_task = copy.deepcopy(load(tiny_run, "finetune"))
    text_task["task"] = "text"
    text_task["init"] = {"kind": "pretrained", "model_name_or_path": "someone/text-spt"}
    card = render_model_card(text_task)
    assert card.data.datasets == ["stanfordnlp/imdb"] and card.data.base_model == "someone/text-spt"
    assert card.data.eval_results[0].task_type == "text-classification"
    text_task["recipe"]["data"]["task_options"] = {"hub_id": "me/my-imdb"}
    assert render_model_card(text_task).data.datasets == ["me/my-imdb"]


def test_card_of_a_folder_without_results(tiny_run, tmp_path):
    """A Trainer checkpoint-N (or a model trained elsewhere): a card from config and weights, no metrics."""
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(tiny_run / "spt" / "checkpoint-4", checkpoint)
    results = results_from_folder(checkpoint)
    assert results["phase"] == "spt" and results["budget"]["steps"] == 4
    assert results["num_parameters"] == load(tiny_run, "spt")["num_parameters"]
    card = ModelCard(str(render_model_card(results, repo_id="tester/ckpt")))
    assert card.data.get("model-index") is None and card.data.eval_results is None
    assert "No evaluation results were recorded" in card.text and "self-pretrained" in card.text


def test_write_model_card_is_atomic_and_uses_the_run_siblings(tiny_run):
    assert related_results(tiny_run / "scratch") == {}
    spt_related = related_results(tiny_run / "spt")
    assert spt_related["finetune_results"]["phase"] == "finetune" and spt_related["scratch_results"]["init"]
    finetune_related = related_results(tiny_run / "finetune")
    assert finetune_related["spt_results"]["phase"] == "spt"
    path = write_model_card(tiny_run / "finetune", "tester/tiny-finetuned")
    assert ModelCard.load(path).data.model_name == "tiny-finetuned"
    assert not list((tiny_run / "finetune").glob(".README.md*"))  # no temporary file left behind
    path.unlink()


def test_resolve_push_folder(tiny_run, tmp_path):
    assert resolve_push_folder(tiny_run) == tiny_run / "spt"
    assert resolve_push_folder(tiny_run, "scratch") == tiny_run / "scratch"
    assert resolve_push_folder(tiny_run / "finetune") == tiny_run / "finetune"
    with pytest.raises(ValueError, match="only selects a phase"):
        resolve_push_folder(tiny_run / "spt", "finetune")
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder"):
        resolve_push_folder(tmp_path)


def test_server_rejects_a_bad_model_index():
    result = {"task": {"type": "t"}, "dataset": {"type": "d", "name": "D"}}
    with pytest.raises(HubError, match="metrics must be a non-empty list"):
        validate_model_index({"model-index": [{"name": "x", "results": [result]}]})


def test_model_card_templates_exist_once_in_the_package():
    """The packaged templates are the only copies; hub_cards/README.md documents them and links to each."""
    packaged = {p.name for p in TEMPLATES_DIR.glob("*.md")}
    assert packaged == {"spt_checkpoint.md", "finetuned_checkpoint.md"}
    assert [p.name for p in (REPO_ROOT / "hub_cards").iterdir()] == ["README.md"]
    readme = (REPO_ROOT / "hub_cards" / "README.md").read_text()
    assert all(f"src/spt_hf/hub/templates/{name}" in readme for name in packaged)


def test_an_spt_backbone_card_names_its_backbone(tiny_run):
    results = load(tiny_run, "spt")
    backbone = {"model_type": "mamba", "hidden_size": 16, "num_hidden_layers": 1}
    results["model_type"] = "spt_backbone"
    results["model_config"] = {
        **results["model_config"],
        "model_type": "spt_backbone",
        "backbone_config": backbone,
        "backbone_input": "embeddings",
    }
    card = render_model_card(results)
    assert "A `spt_backbone (mamba)` model" in card.text and "| model type | `spt_backbone (mamba)` |" in card.text
    assert "| backbone_input | embeddings |" in card.text
    assert "mamba" in card.data.tags and card.data.model_name == "backbone-mamba-digits-spt"


def test_cards_say_what_a_model_started_from_in_old_and_new_results(tiny_run):
    """results.json files written before `StartKind` recorded a text-pretrained baseline as "scratch" and a Hub
    checkpoint as "pretrained"; their cards read like those of files in `StartKind`'s words, and name the weights."""
    scratch = load(tiny_run, "scratch")
    assert "from random initialisation (the scratch baseline" in render_model_card(scratch).text
    cards = {}
    for era, baseline_kind, hub_kind in (
        ("old", "scratch", "pretrained"),
        ("new", "text-pretrained", "text-pretrained"),
    ):
        baseline = copy.deepcopy(scratch)
        baseline["recipe"]["model_config"]["backbone_name_or_path"] = "EleutherAI/pythia-70m"
        baseline["init"]["kind"] = baseline_kind
        hub = copy.deepcopy(load(tiny_run, "finetune"))
        hub["init"] = {"kind": hub_kind, "model_name_or_path": "someone/text-model"}
        cards[era] = [render_model_card(results).text for results in (baseline, hub)]
    assert cards["old"] == cards["new"]
    baseline_card, hub_card = cards["new"]
    assert "from the pretrained backbone weights its config names" in baseline_card
    assert "random initialisation" not in baseline_card
    assert "from the pretrained model `someone/text-model`" in hub_card
