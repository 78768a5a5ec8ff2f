"""Push and pull through the real huggingface_hub and transformers clients against the local Hub server.

Client code runs in subprocesses (see conftest.py); this process builds local references and inspects what the
server stored. The module's pushes happen once, in the `pushed` fixture: `spt-hf push` of a run folder (SPT
checkpoint to main, finetuned checkpoint to a branch and to a private repository), a checkpoint over 10 MiB, and a
push with a wrong token that must fail cleanly.
"""

import hashlib
import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from hub_testing import TINY_RUN, TOKEN
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

from spt_hf.checkpoints import verify_backbone_transfer
from spt_hf.cli import main as cli_main
from spt_hf.hub import MissingHubCredentialsError, check_credentials, ensure_push_credentials
from spt_hf.recipes.arguments import PhaseTrainingArguments

WRONG_TOKEN = "hf_wrong_" + hashlib.sha256(TOKEN.encode()).hexdigest()[:20]
MODELING_FILES = {
    "blocks.py",
    "cache.py",
    "checkpoint_files.py",
    "configuration_rotary_transformer.py",
    "configuration_sequence.py",
    "heads.py",
    "modeling_rotary_transformer.py",
    "modeling_sequence.py",
    "precision.py",  # the parameters kept in float32 under mixed precision
}

PUSH = """
import sys
from spt_hf.hub import HubPushError, push_checkpoint, push_phase
from spt_hf.cli import main as cli_main
from spt_hf.recipes.arguments import PhaseTrainingArguments
run = ARGS["run"]
assert cli_main(["push", run, "--repo-id", "tester/tiny-spt"]) == 0
assert cli_main(["push", run, "--phase", "finetune", "--repo-id", "tester/tiny-spt", "--revision", "finetuned"]) == 0
assert cli_main(["push", run, "--phase", "finetune", "--repo-id", "tester/tiny-finetuned", "--private"]) == 0
push_checkpoint(ARGS["big"], "tester/big")
push_checkpoint(ARGS["causal"], "tester/tiny-causal")
# A card alone, through huggingface_hub's own card push (the Hub validates its YAML first).
from huggingface_hub import HfApi, ModelCard
HfApi().create_repo("tester/card-only")
ModelCard.load(run + "/finetune/README.md").push_to_hub("tester/card-only")
# What the pipeline calls at the end of a phase, from the recipe's push_to_hub / hub_model_id / hub_private_repo.
phase = PhaseTrainingArguments(output_dir=run, push_to_hub=True, hub_model_id="tester/tiny-scratch",
                             hub_private_repo=True)
print("PHASE PUSH", push_phase(phase, run + "/scratch"))
assert push_phase(PhaseTrainingArguments(output_dir=run + "/scratch")) is None
try:
    push_checkpoint(run + "/spt", "tester/tiny-spt-retry", token=ARGS["wrong_token"])
except HubPushError as error:
    print("FAILED PUSH:", error)
else:
    sys.exit("a push with a wrong token succeeded")

# With spt_hf installed, no trust_remote_code: the registered classes load the pushed repos.
import torch
import spt_hf
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification
inputs = torch.load(ARGS["inputs"], weights_only=True)
mlm = AutoModelForMaskedLM.from_pretrained("tester/tiny-spt").eval()
cls = AutoModelForSequenceClassification.from_pretrained("tester/tiny-spt", revision="finetuned").eval()
assert type(mlm).__module__.startswith("spt_hf.")
with torch.no_grad():
    torch.save({"spt_mlm": mlm(**inputs).logits, "branch_cls": cls(**inputs).logits}, ARGS["logits"])
"""

PULL_WITHOUT_SPT_HF = """
import hashlib, sys, torch
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification
from transformers import GenerationConfig
inputs = torch.load(ARGS["inputs"], weights_only=True)
heads = {
    "causal_lm": (AutoModelForCausalLM, "tester/tiny-causal", None),
    "spt_mlm": (AutoModelForMaskedLM, "tester/tiny-spt", None),
    "spt_backbone": (AutoModel, "tester/tiny-spt", None),
    "branch_cls": (AutoModelForSequenceClassification, "tester/tiny-spt", "finetuned"),
    "finetuned_cls": (AutoModelForSequenceClassification, "tester/tiny-finetuned", None),
}
outputs, modules = {}, {}
for name, (auto, repo, revision) in heads.items():
    model = auto.from_pretrained(repo, revision=revision, trust_remote_code=True).eval()
    modules[name] = type(model).__module__
    with torch.no_grad():
        out = model(**inputs)
    outputs[name] = out.logits if hasattr(out, "logits") else out.last_hidden_state
torch.save(outputs, ARGS["logits"])
assert "spt_hf" not in sys.modules
api = HfApi()
info = {
    "modules": modules,
    "files": {repo: sorted(api.list_repo_files(repo)) for repo in ("tester/tiny-spt", "tester/tiny-finetuned")},
    "branch_files": sorted(api.list_repo_files("tester/tiny-spt", revision="finetuned")),
    "big_sha256": hashlib.sha256(open(hf_hub_download("tester/big", "model.safetensors"), "rb").read()).hexdigest(),
    "results": open(hf_hub_download("tester/tiny-spt", "results.json")).read(),
    "generation_config": GenerationConfig.from_pretrained("tester/tiny-causal").to_dict(),
    "card_metrics": {},
}
for repo in ("tester/tiny-spt", "tester/tiny-finetuned", "tester/card-only"):
    card = ModelCard.load(repo)
    metrics = [[r.dataset_split, r.metric_type, r.metric_value] for r in card.data.eval_results]
    listed = [[r.dataset_split, r.metric_type, r.metric_value] for r in api.model_info(repo).card_data.eval_results]
    assert metrics == listed
    info["card_metrics"][repo] = metrics
print("INFO", json.dumps(info))
"""


def file_hashes(folder: Path) -> dict[str, str]:
    files = (path for path in folder.rglob("*") if path.is_file())
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def big_checkpoint(folder: Path) -> Path:
    """A model over 10 MiB (a large vocabulary): its safetensors file must go the LFS way."""
    config = AutoConfig.for_model(
        "spt_rotary_transformer",
        vocab_size=24000,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    assert (folder / "model.safetensors").stat().st_size > 10 * 2**20
    return folder


def causal_checkpoint(folder: Path) -> Path:
    """A causal LM (what causal SPT saves): it comes with a generation config."""
    config = AutoConfig.for_model(
        "spt_rotary_transformer",
        vocab_size=21,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        bidirectional=False,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pushed(tiny_run, hub_client, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pushed")
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(4, 21, (3, 20), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, 15:] = 0
    torch.save({"input_ids": input_ids, "attention_mask": attention_mask}, tmp / "inputs.pt")
    big = big_checkpoint(tmp / "big")
    causal = causal_checkpoint(tmp / "causal")
    before = file_hashes(tiny_run / "spt")
    args = {"run": str(tiny_run), "big": str(big), "causal": str(causal), "inputs": str(tmp / "inputs.pt")}
    process = hub_client.run(PUSH, {**args, "wrong_token": WRONG_TOKEN, "logits": str(tmp / "logits_with_spt_hf.pt")})
    return {"tmp": tmp, "big": big, "causal": causal, "before": before, "push_output": process.stdout + process.stderr}


@pytest.fixture(scope="module")
def pulled(pushed, hub_client):
    """What a fresh process without spt_hf gets from the server."""
    args = {"inputs": str(pushed["tmp"] / "inputs.pt"), "logits": str(pushed["tmp"] / "logits_without_spt_hf.pt")}
    process = hub_client.run(PULL_WITHOUT_SPT_HF, args, without_spt_hf=True)
    info = json.loads(process.stdout.split("INFO ", 1)[1])
    return {"info": info, "logits": torch.load(args["logits"], weights_only=True)}


def local_outputs(tiny_run: Path, causal: Path, inputs: dict) -> dict:
    heads = {
        "causal_lm": (AutoModelForCausalLM, causal),
        "spt_mlm": (AutoModelForMaskedLM, tiny_run / "spt"),
        "spt_backbone": (AutoModel, tiny_run / "spt"),
        "branch_cls": (AutoModelForSequenceClassification, tiny_run / "finetune"),
        "finetuned_cls": (AutoModelForSequenceClassification, tiny_run / "finetune"),
    }
    outputs = {}
    for name, (auto, folder) in heads.items():
        model = auto.from_pretrained(folder).eval()
        with torch.no_grad():
            out = model(**inputs)
        outputs[name] = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return outputs


def repo_files(hub_server, repo: str, branch: str = "main") -> dict:
    state = hub_server.state()[repo]
    return state["commits"][state["branches"][branch]]["files"]


def test_push_of_a_run_uploads_the_checkpoint_and_nothing_else(pushed, hub_server, tiny_run):
    files = repo_files(hub_server, "tester/tiny-spt")
    tensorboard = {p for p in files if p.startswith("runs/")}
    expected = {".gitattributes", "README.md", "config.json", "model.safetensors", "results.json"}
    expected |= {"spt_fingerprint.npy", "tokenizer.json", "tokenizer_config.json"}  # digits as tokens: its tokenizer
    assert set(files) == expected | MODELING_FILES | tensorboard
    assert tensorboard and all("tfevents" in p for p in tensorboard)
    assert files["model.safetensors"]["lfs"] and not files["config.json"]["lfs"]
    local = (tiny_run / "spt" / "model.safetensors").read_bytes()
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(local).hexdigest()
    config = json.loads((hub_server.root / "store" / "objects" / files["config.json"]["sha256"]).read_text())
    assert set(config["auto_map"]) >= {
        "AutoConfig",
        "AutoModel",
        "AutoModelForMaskedLM",
        "AutoModelForSequenceClassification",
    }
    assert hub_server.state()["tester/tiny-finetuned"]["private"]
    with pytest.raises(urllib.error.HTTPError, match="404"):  # a private repository is invisible without a token
        urllib.request.urlopen(f"{hub_server.url}/api/models/tester/tiny-finetuned", timeout=30)
    assert "Pushed " + str(tiny_run / "spt") + " to tester/tiny-spt: http://127.0.0.1" in pushed["push_output"]


def test_push_phase_pushes_what_the_recipe_asks(pushed, hub_server):
    scratch = hub_server.state()["tester/tiny-scratch"]
    assert scratch["private"] and "model.safetensors" in repo_files(hub_server, "tester/tiny-scratch")
    assert f"PHASE PUSH {hub_server.url}/tester/tiny-scratch/commit/" in pushed["push_output"]


def test_pushed_heads_load_without_spt_hf_and_give_the_local_logits(pulled, pushed, tiny_run):
    inputs = torch.load(pushed["tmp"] / "inputs.pt", weights_only=True)
    local = local_outputs(tiny_run, pushed["causal"], inputs)
    assert set(pulled["logits"]) == set(local)
    for name, expected in local.items():
        torch.testing.assert_close(pulled["logits"][name], expected, rtol=0, atol=1e-6, msg=name)
        assert pulled["info"]["modules"][name].startswith("transformers_modules.")  # the pushed remote code


def test_spt_hf_loads_the_pushed_repo_without_trust_remote_code(pushed, tiny_run):
    inputs = torch.load(pushed["tmp"] / "inputs.pt", weights_only=True)
    with_spt_hf = torch.load(pushed["tmp"] / "logits_with_spt_hf.pt", weights_only=True)
    local = local_outputs(tiny_run, pushed["causal"], inputs)
    for name in ("spt_mlm", "branch_cls"):
        torch.testing.assert_close(with_spt_hf[name], local[name], rtol=0, atol=1e-6, msg=name)


def test_causal_checkpoint_comes_with_its_generation_config(pulled, pushed, hub_server):
    assert {"generation_config.json", "config.json"} <= set(repo_files(hub_server, "tester/tiny-causal"))
    local = json.loads((pushed["causal"] / "generation_config.json").read_text())
    assert pulled["info"]["generation_config"]["eos_token_id"] == local["eos_token_id"]


def test_push_to_a_branch_leaves_main_alone(pulled, hub_server):
    main = repo_files(hub_server, "tester/tiny-spt")
    branch = repo_files(hub_server, "tester/tiny-spt", "finetuned")
    assert main["config.json"] != branch["config.json"] and "spt_fingerprint.npy" not in branch
    assert "spt_fingerprint.npy" in pulled["info"]["files"]["tester/tiny-spt"]
    assert "spt_fingerprint.npy" not in pulled["info"]["branch_files"]


def test_checkpoint_over_10_mib_goes_the_lfs_way(pushed, pulled, hub_server):
    files = repo_files(hub_server, "tester/big")
    local = (pushed["big"] / "model.safetensors").read_bytes()
    assert files["model.safetensors"]["lfs"] and files["model.safetensors"]["size"] == len(local) > 10 * 2**20
    assert pulled["info"]["big_sha256"] == hashlib.sha256(local).hexdigest()
    assert "README.md" in files  # a card from config and weights, without results.json


def test_card_model_index_on_the_hub_equals_the_results_file(pulled, tiny_run):
    assert json.loads(pulled["info"]["results"]) == json.loads((tiny_run / "spt" / "results.json").read_text())
    pushed_cards = (("tester/tiny-spt", "spt"), ("tester/tiny-finetuned", "finetune"), ("tester/card-only", "finetune"))
    for repo, phase in pushed_cards:
        results = json.loads((tiny_run / phase / "results.json").read_text())
        prefixes = {"test": "test_", "validation": "eval_"}
        metrics = pulled["info"]["card_metrics"][repo]
        assert len(metrics) == 4
        for split, name, value in metrics:
            assert results["metrics"][split][prefixes[split] + name] == value


def test_failed_push_keeps_the_local_checkpoint_and_says_how_to_retry(pushed, tiny_run, hub_server):
    output = pushed["push_output"]
    folder = tiny_run / "spt"
    assert f"The local checkpoint in {folder} is intact" in output
    assert f"spt-hf push {folder} --repo_id tester/tiny-spt-retry" in output
    assert "tester/tiny-spt-retry" not in hub_server.state()
    after = file_hashes(folder)
    assert {k: v for k, v in after.items() if k != "README.md"} == pushed["before"]


PIPELINE_PUSH = """
from spt_hf.cli import main
assert main(["pretrain", "--config", ARGS["recipe"], "--push_to_hub", "true", "--hub_model_id", "tester/pipeline-spt",
             "--hub_strategy", "every_save"]) == 0
"""


def test_trainer_pushes_during_training(hub_client, hub_server, tmp_path):
    recipe = tmp_path / "spt.yaml"
    # One save during training, and no TensorBoard: the Trainer uploads in the background while training goes on, so
    # a file rewritten meanwhile (the next save's weights, growing event files) no longer matches the hash it
    # announced, and that push fails (on the Hub as here) at random.
    recipe.write_text(
        json.dumps(
            {
                **TINY_RUN,
                "objective": "masked",
                "output_dir": str(tmp_path / "out"),
                "report_to": "none",
                "save_steps": 4,
                "eval_steps": 4,
            }
        )
    )
    hub_client.run(PIPELINE_PUSH, {"recipe": str(recipe)})
    state = hub_server.state()["tester/pipeline-spt"]
    titles = [commit["title"] for commit in state["commits"].values()]
    assert "Training in progress, step 4" in titles, titles
    files = repo_files(hub_server, "tester/pipeline-spt")
    assert {"config.json", "model.safetensors"} <= set(files)
    assert not any(path.startswith("checkpoint-") for path in files)


FINETUNE_FROM_HUB = """
from spt_hf.cli import main
from spt_hf.hub import checkpoint_folder
assert main(["finetune", "--config", ARGS["recipe"], "--model_name_or_path", "tester/tiny-spt",
             "--learning_rate", "0"]) == 0
print("SNAPSHOT", checkpoint_folder("tester/tiny-spt"))
"""


def test_finetune_from_the_pushed_spt_checkpoint(pushed, hub_client, tiny_run, tmp_path):
    recipe = tmp_path / "finetune.yaml"
    recipe.write_text(json.dumps({**TINY_RUN, "output_dir": str(tmp_path / "out")}))
    process = hub_client.run(FINETUNE_FROM_HUB, {"recipe": str(recipe)})
    (results_path,) = (tmp_path / "out").rglob("results.json")  # the phase's folder (out/ or out/finetune/)
    results = json.loads(results_path.read_text())
    assert results["init"]["model_name_or_path"] == "tester/tiny-spt" and results["budget"]["steps"] == 4
    # With a learning rate of 0 the backbone is still the one pushed: bit-exact against the local SPT checkpoint.
    model = AutoModelForSequenceClassification.from_pretrained(results_path.parent)
    assert verify_backbone_transfer(model, tiny_run / "spt") > 0
    snapshot = Path(process.stdout.split("SNAPSHOT ", 1)[1].strip())
    fingerprint = (snapshot / "spt_fingerprint.npy").read_bytes()
    assert fingerprint == (tiny_run / "spt" / "spt_fingerprint.npy").read_bytes()


def test_push_without_credentials_fails_before_anything(tiny_run, monkeypatch, capsys, tmp_path):
    import huggingface_hub.constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(MissingHubCredentialsError, match=r"HF_TOKEN.*`hf auth login`"):
        check_credentials()
    folder = tmp_path / "scratch"
    shutil.copytree(tiny_run / "scratch", folder, ignore=shutil.ignore_patterns("checkpoint-*", "README.md"))
    assert cli_main(["push", str(folder), "--repo-id", "tester/x"]) == 1
    assert "needs a token with write access" in capsys.readouterr().err and not (folder / "README.md").exists()
    arguments = PhaseTrainingArguments(output_dir=str(tmp_path / "o"), push_to_hub=True, hub_model_id="tester/x")
    with pytest.raises(MissingHubCredentialsError):
        ensure_push_credentials(arguments)  # what the pipeline calls before loading data or training
    ensure_push_credentials(PhaseTrainingArguments(output_dir=str(tmp_path / "o")))  # no push: nothing needed


def test_push_arguments_are_checked_before_training(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spt = PhaseTrainingArguments(output_dir=str(tmp_path / "spt"), push_to_hub=True, hub_model_id="tester/a")
    with pytest.raises(ValueError, match="would both push to tester/a"):
        ensure_push_credentials(spt, PhaseTrainingArguments(output_dir="f", push_to_hub=True, hub_model_id="tester/a"))
    with pytest.raises(ValueError, match="needs `hub_model_id"):
        ensure_push_credentials(PhaseTrainingArguments(output_dir="f", push_to_hub=True))
    with_token = PhaseTrainingArguments(output_dir="f", push_to_hub=True, hub_model_id="t/b", hub_token="x")
    with pytest.raises(ValueError, match="training_args.bin"):
        ensure_push_credentials(with_token)
    ensure_push_credentials(spt, PhaseTrainingArguments(output_dir="f", push_to_hub=True, hub_model_id="tester/b"))


def test_zz_token_never_written_printed_or_logged(pushed, pulled, hub_client, hub_server, tmp_path_factory):
    """Runs last in this module: no file of this test session (the pushed folders, the pipeline and finetuning
    outputs, the server's objects, state and request log, the client cache) and no client output holds a token."""
    secrets = [TOKEN.encode(), WRONG_TOKEN.encode()]
    files = [path for path in tmp_path_factory.getbasetemp().rglob("*") if path.is_file()]
    assert any(path.is_relative_to(hub_server.root) for path in files)
    assert [str(path) for path in files if any(secret in path.read_bytes() for secret in secrets)] == []
    assert hub_server.state()  # the server did store pushes (so the scan above saw them)
    assert hub_client.outputs and not any(TOKEN in out or WRONG_TOKEN in out for out in hub_client.outputs)
