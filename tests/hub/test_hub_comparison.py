"""A whole comparison on the Hub (`spt-hf push --comparison`), against the local Hub server through the real clients:
the dry run's listing, a push cut short and resumed, every checkpoint in its own repository with cards that link
the comparison and each other, the dataset repository, a second push that uploads nothing, the table rebuilt from
the Hub equal to the local one, `pipeline()` on a pushed model without spt_hf, and an architecture added to the
published comparison under its settings (an unfair extension refused)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_PHASE
from hub_testing import TOKEN

from spt_hf.compare import CompareSpec, run_compare

pytestmark = pytest.mark.slow  # (2-3 min: `make test-hub`, which CI runs)
NAME = "digits-cmp"
SEEDS = [0, 1]
PUSH = """
from spt_hf.cli import main as cli_main
assert cli_main(["push", "--comparison", ARGS["folder"], "--namespace", "tester", "--name", ARGS["name"]]) == 0
"""
# A push cut short: the connection "fails" once three repositories are done.
CUT_PUSH = """
import spt_hf.hub.publish as publish
from spt_hf.hub import HubPushError
real, done = publish.sync_repo, []
def cut(*args, **kwargs):
    if len(done) == 3:
        raise ConnectionError("connection reset by peer")
    done.append(real(*args, **kwargs))
    return done[-1]
publish.sync_repo = cut
try:
    publish.publish_comparison(ARGS["folder"], "tester", name=ARGS["name"])
except HubPushError as error:
    print("CUT", str(error).replace(chr(10), " "))
"""
READ_BACK = """
from huggingface_hub import HfApi, ModelCard, hf_hub_download
api = HfApi()
repos = json.load(open(hf_hub_download("tester/" + ARGS["name"], "comparison.json", repo_type="dataset")))["models"]
cards = {m["path"]: ModelCard.load(m["repo_id"]) for m in repos}
print("INFO " + json.dumps({
    "models": repos,
    "cards": {path: card.text for path, card in cards.items()},
    "base_model": {path: card.data.base_model for path, card in cards.items()},
    "model_index": {path: [[r.metric_type, r.metric_value, r.dataset_split] for r in card.data.eval_results or []]
                    for path, card in cards.items()},
    "files": {m["repo_id"]: sorted(api.list_repo_files(m["repo_id"])) for m in repos},
    "dataset_files": sorted(api.list_repo_files("tester/" + ARGS["name"], repo_type="dataset")),
    "dataset_card": open(hf_hub_download("tester/" + ARGS["name"], "README.md", repo_type="dataset")).read(),
    "collection": [[i.item_id, i.item_type] for i in api.get_collection(ARGS["slug"]).items] if ARGS["slug"] else None,
}))
"""
REPORT = """
from spt_hf.cli import main as cli_main
assert cli_main(["report", "--from_hub", "tester/" + ARGS["name"], "--output_dir", ARGS["out"]]) == 0
"""
PIPELINE = """
import sys
from transformers import pipeline
classify = pipeline("text-classification", model=ARGS["repo"], trust_remote_code=True)
print("LABELS " + json.dumps([out["label"] for out in classify(ARGS["texts"])]))
assert "spt_hf" not in sys.modules
"""


def compare_spec(root: Path, **changes) -> CompareSpec:
    values = {
        "tasks": ["digits"],
        "architectures": ["transformer"],
        "seeds": SEEDS,
        "recipes_dir": "recipes/cpu",
        "output_dir": str(root),
        "max_parallel": 2,
        "overrides": dict(TINY_PHASE),
    }
    return CompareSpec(**{**values, **changes})


def commits(hub_server) -> int:
    """Every commit the server holds, in any repository (none before its first repository)."""
    if not (hub_server.root / "store" / "state.json").is_file():
        return 0
    state = hub_server.state()
    repos = state.get("repos", state)
    return sum(len(repo["commits"]) for repo in repos.values() if isinstance(repo, dict) and "commits" in repo)


def push(hub_client, folder: Path, name: str = NAME) -> str:
    process = hub_client.run(PUSH, {"folder": str(folder), "name": name})
    return process.stdout


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> Path:
    """A tiny comparison: digits, the Transformer, 2 seeds (6 phases)."""
    folder = tmp_path_factory.mktemp("comparison") / NAME
    assert run_compare(compare_spec(folder)).ok
    return folder


@pytest.fixture(scope="module")
def published(comparison, hub_client, hub_server):
    """The comparison pushed: first a dry run, then a push cut short after three repositories, then the push again."""
    before = commits(hub_server)
    dry = subprocess.run(
        [sys.executable, "-m", "spt_hf", "push", "--comparison", str(comparison), "--namespace", "tester", "--dry_run"],
        capture_output=True,
        text=True,
        env={**hub_client.env(token=None), "HF_HUB_OFFLINE": "1"},  # a dry run needs no token and no network
    )
    assert dry.returncode == 0, dry.stderr
    assert commits(hub_server) == before
    cut = hub_client.run(CUT_PUSH, {"folder": str(comparison), "name": NAME}).stdout
    after_cut = commits(hub_server)
    resumed = push(hub_client, comparison)
    return {"dry": dry.stdout, "cut": cut, "after_cut": after_cut, "before": before, "resumed": resumed}


def read_back(hub_client, slug: str | None, name: str = NAME) -> dict:
    process = hub_client.run(READ_BACK, {"name": name, "slug": slug})
    return json.loads(process.stdout.split("INFO ", 1)[1])


def test_dry_run_lists_every_repository_with_files_and_sizes(published):
    lines = published["dry"].splitlines()
    models = [line for line in lines if line.strip().startswith("model ")]
    assert len(models) == 6  # SPT, finetuning and baseline of 2 seeds
    for phase in ("spt", "finetune", "scratch"):
        for seed in SEEDS:
            assert any(f"tester/{NAME}-digits-transformer-{phase}-seed{seed} " in line for line in models)
    assert any(line.strip().startswith(f"dataset tester/{NAME} ") for line in lines)
    assert re.search(r"7 repositories, \d+ files, [\d.]+ [kM]B in all", published["dry"])
    assert all(re.search(r"\d+ files, [\d.]+ (B|kB|MB)$", line) for line in models)


def test_a_push_cut_short_resumes_where_it_stopped(published, hub_server):
    cut = published["cut"]
    assert "CUT Pushing the comparison" in cut and "rerun to resume: spt-hf push --comparison" in cut
    assert published["after_cut"] == published["before"] + 3 * 2  # three repositories: created, then one commit each
    resumed = published["resumed"]
    assert resumed.count("up to date, nothing uploaded") == 3  # the three done before the cut are left alone
    uploaded = re.findall(r"^spt_hf: (model|dataset) tester/\S+: \d+ files uploaded", resumed, re.MULTILINE)
    assert uploaded == ["model"] * 3 + ["dataset"], resumed  # the other three checkpoints, then the dataset


def test_checkpoints_cards_and_links(published, hub_client, comparison):
    slug = published["resumed"].rsplit("collection: ", 1)[1].strip()
    info = read_back(hub_client, slug)
    by_path = {m["path"]: m for m in info["models"]}
    assert len(by_path) == 6
    for path, model in by_path.items():
        assert model["repo_id"] == f"tester/{NAME}-digits-transformer-{model['phase']}-seed{model['seed']}"
        files = info["files"][model["repo_id"]]
        assert {"config.json", "model.safetensors", "README.md", "results.json"} <= set(files)
        assert not any(f.startswith("checkpoint-") or f == "training_args.bin" for f in files)
        results = json.loads((comparison / path / "results.json").read_text())
        card = info["cards"][path]
        assert f"[tester/{NAME}](" in card and f"spt-hf report --from_hub tester/{NAME}" in card
        metric = "accuracy" if model["phase"] != "spt" else "loss"  # SPT's: its objective's test loss
        test = results["metrics"]["test"][f"test_{metric}"]  # in the model-index as results.json holds it
        assert [metric, test, "test"] in info["model_index"][path]
    for seed in SEEDS:
        spt, finetune, scratch = (f"digits/transformer/full/seed{seed}/{p}" for p in ("spt", "finetune", "scratch"))
        repo = {path: by_path[path]["repo_id"] for path in (spt, finetune, scratch)}
        assert f"Finetuned from this checkpoint: [{repo[finetune]}]" in info["cards"][spt]
        assert f"Finetuned from the self-pretrained checkpoint [{repo[spt]}]" in info["cards"][finetune]
        assert info["base_model"][finetune] == repo[spt]
        assert f"[{repo[scratch]}]" in info["cards"][finetune] and f"[{repo[finetune]}]" in info["cards"][scratch]
    dataset = set(info["dataset_files"])
    assert {"README.md", "runs.csv", "runs.json", "comparison.json", "learning_curves.png"} <= dataset
    assert {f"results/{path}/results.json" for path in by_path} <= dataset
    assert not any(f.startswith("data/") for f in dataset)  # no training data unless asked
    card = info["dataset_card"]
    assert (comparison / "report.md").read_text().split("\n", 1)[1] in card  # the report is its card
    assert all(f"[{m['repo_id']}](" in card for m in by_path.values())
    items = [[m["repo_id"], "model"] for m in by_path.values()] + [[f"tester/{NAME}", "dataset"]]
    assert sorted(info["collection"]) == sorted(items)


def test_a_second_push_uploads_nothing(published, hub_client, hub_server, comparison):
    before = commits(hub_server)
    out = push(hub_client, comparison)
    assert commits(hub_server) == before
    assert out.count("up to date, nothing uploaded") == 7 and "spt_hf: 0 files uploaded" in out


def test_table_rebuilt_from_the_hub_equals_the_local_one(published, hub_client, comparison, tmp_path):
    out = tmp_path / "from_hub"
    hub_client.run(REPORT, {"name": NAME, "out": str(out)})
    local, rebuilt = ((folder / "report.md").read_text().splitlines() for folder in (comparison, out))
    assert rebuilt[3:] == local[3:] and len(local) > 10  # all but the line naming the folders read
    columns = lambda folder: [line.rsplit(",", 1)[0] for line in (folder / "runs.csv").read_text().splitlines()]  # noqa: E731
    assert columns(out) == columns(comparison)  # every number of every run; `path` (last) is where it was read


def test_pushed_finetuned_model_classifies_through_the_pipeline_without_spt_hf(published, hub_client, comparison):
    from transformers import pipeline

    texts = ["0 0 5 13 9 1 0 0", "0 0 0 12 13 5 0 0 0 0"]
    local = pipeline("text-classification", model=str(comparison / "digits/transformer/full/seed0/finetune"))
    process = hub_client.run(
        PIPELINE, {"repo": f"tester/{NAME}-digits-transformer-finetune-seed0", "texts": texts}, without_spt_hf=True
    )
    assert json.loads(process.stdout.split("LABELS ", 1)[1]) == [out["label"] for out in local(texts)]


def extend(hub_client, folder: Path, seeds: list[int]) -> subprocess.CompletedProcess:
    """`spt-hf compare --extends` in a process talking to the Hub: DLR added, with the published overrides."""
    overrides = [f"--{key}={value}" for key, value in TINY_PHASE.items()]
    args = ["compare", "--tasks", "digits", "--architectures", "dlr", "--seeds", *map(str, seeds)]
    args += ["--recipes_dir", "recipes/cpu", "--output_dir", str(folder), "--max_parallel", "2"]
    args += ["--extends", f"tester/{NAME}", *overrides]
    return subprocess.run(
        [sys.executable, "-m", "spt_hf", *args], capture_output=True, text=True, env=hub_client.env(), timeout=900
    )


def test_an_architecture_added_to_the_published_comparison_and_the_union_pushed(published, hub_client, tmp_path):
    folder = tmp_path / NAME
    unfair = extend(hub_client, folder, seeds=[0])  # other seeds than the published rows: refused before training
    assert unfair.returncode != 0
    assert f"cannot extend tester/{NAME}: seeds [0] (published: [0, 1])" in unfair.stderr
    assert not list(folder.glob("digits/dlr/*/*/*/results.json"))
    fair = extend(hub_client, folder, seeds=SEEDS)
    assert fair.returncode == 0, fair.stderr
    report = (folder / "report.md").read_text()
    assert "| digits | spt_dlr |" in report and "| digits | spt_rotary_transformer |" in report  # fetched + new rows
    pushed = push(hub_client, folder)
    assert pushed.count("model tester/") >= 6 and "transformer" not in "".join(
        line for line in pushed.splitlines() if "files uploaded" in line
    )  # the published checkpoints keep their repositories, untouched
    info = read_back(hub_client, None)
    assert len(info["models"]) == 12 and {m["architecture"] for m in info["models"]} == {"dlr", "transformer"}


def test_zz_tokens_are_never_written(published, comparison, hub_client):
    for path in comparison.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert not any(TOKEN in text for text in hub_client.outputs)
