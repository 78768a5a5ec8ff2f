"""The pure parts of a comparison push: which folders are its checkpoints, their repository names (refused in one
line when the Hub would refuse them or two would collide), the listing, and the fairness check of an extension."""

import dataclasses
import json
from pathlib import Path

import pytest

from spt_hf.compare.plan import CompareSpec
from spt_hf.compare.published import comparison_settings, extension_problems, record_settings
from spt_hf.hub.comparison import DEFAULT_REPO_NAME, find_cells, listing, published_repos, repo_ids
from spt_hf.hub.sync import RepoFiles, git_blob_id, size_text


def phase(root: Path, path: str, **results) -> Path:
    folder = root / path
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"phase": path.rsplit("/", 1)[-1], **results}))
    return folder


def test_cells_are_the_phase_folders_of_the_layout_and_the_published_results(tmp_path):
    phase(tmp_path, "digits/s4/full/seed0/spt")
    phase(tmp_path, "digits/s4/n100/seed12/scratch")
    phase(tmp_path, "tuning/digits/s4/spt/trial3/spt")  # a search's trial: not a cell (nor the wrong depth)
    trial = phase(tmp_path, "digits/s4/full/trial/finetune")  # not seedN
    (trial.parent / "tune_trial.json").write_text("{}")
    phase(tmp_path, "published/me__cmp/results/digits/dlr/full/seed0/finetune")
    (tmp_path / "published/me__cmp/comparison.json").write_text(
        json.dumps({"models": [{"path": "digits/dlr/full/seed0/finetune", "repo_id": "me/cmp-dlr-finetune-seed0"}]})
    )
    cells = find_cells(tmp_path)
    assert [(c.path, c.published) for c in cells] == [
        ("digits/s4/full/seed0/spt", False),
        ("digits/s4/n100/seed12/scratch", False),
        ("digits/dlr/full/seed0/finetune", True),
    ]
    assert (
        cells[1].seed == 12 and cells[1].variant == "n100" and cells[0].sibling("finetune").endswith("seed0/finetune")
    )
    assert published_repos(tmp_path) == {"digits/dlr/full/seed0/finetune": "me/cmp-dlr-finetune-seed0"}


def test_repository_names_are_predictable_and_refused_when_they_collide_or_break_the_hubs_rule(tmp_path):
    phase(tmp_path, "digits/s4/full/seed0/spt")
    phase(tmp_path, "digits/s4/n100/seed0/spt")
    cells = find_cells(tmp_path)
    with pytest.raises(ValueError, match=r"would both push to me/cmp-digits-s4-spt-seed0: add .*\{variant\}"):
        repo_ids(cells, "me", "cmp", DEFAULT_REPO_NAME)
    named = repo_ids(cells, "me", "cmp", "{name}-{task}-{architecture}-{variant}-{phase}-{seed}")
    assert named == {
        "digits/s4/full/seed0/spt": "me/cmp-digits-s4-full-spt-0",
        "digits/s4/n100/seed0/spt": "me/cmp-digits-s4-n100-spt-0",
    }
    with pytest.raises(ValueError, match=r"--repo_name gives 'cmp--digits' .* not a Hub repository name"):
        repo_ids(cells[:1], "me", "cmp", "{name}--{task}")
    with pytest.raises(ValueError, match=r"does not fill .*use the fields \{name\}"):
        repo_ids(cells, "me", "cmp", "{name}-{lr}")


def test_a_folder_that_is_not_a_comparison_is_refused_before_anything(tmp_path):
    from spt_hf.hub.publish import publish_comparison

    with pytest.raises(FileNotFoundError, match=r"^No comparison folder .*missing: give the --output_dir"):
        publish_comparison(tmp_path / "missing", "me", dry_run=True)
    with pytest.raises(FileNotFoundError, match=r"holds no finished phase of a comparison"):
        publish_comparison(tmp_path, "me", dry_run=True)


def test_listing_gives_every_repository_its_files_and_size():
    uploads = [RepoFiles("me/a", "model", {"x": b"1" * 1500}), RepoFiles("me/cmp", "dataset", {"a": b"", "b": b"22"})]
    assert listing(uploads).splitlines() == [
        "  model   me/a  1 files, 1.5 kB",
        "  dataset me/cmp  2 files, 2 B",
        "  2 repositories, 3 files, 1.5 kB in all",
    ]
    assert size_text(3_100_000) == "3.1 MB" and git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_an_extension_must_keep_every_setting_of_the_published_comparison(tmp_path):
    published = CompareSpec(tasks=["digits", "listops"], architectures=["transformer"], seeds=[0, 1, 2], budget="tied")
    theirs = comparison_settings(published)
    fair = CompareSpec(tasks=["digits"], architectures=["dlr"], seeds=[0, 1, 2], budget="tied")
    assert extension_problems(comparison_settings(fair), theirs) == []
    unfair = CompareSpec(tasks=["digits", "text"], architectures=["dlr", "transformer"], seeds=[0], budget="equal")
    problems = extension_problems(comparison_settings(unfair), theirs)
    assert problems == [
        "seeds [0] (published: [0, 1, 2])",
        "budget 'equal' (published: 'tied')",
        "architectures ['transformer'] are already in it (give only those to add)",
        "tasks ['text'] are not in it (its tasks: ['digits', 'listops'])",
    ]
    other_recipes = CompareSpec(tasks=["digits"], architectures=["dlr"], budget="tied", recipes_dir="cpu")
    assert extension_problems(comparison_settings(other_recipes), theirs) == [
        "recipes 'recipes/cpu' (published: 'recipes')"
    ]
    patience = CompareSpec(
        tasks=["digits"], architectures=["dlr"], seeds=[0, 1, 2], budget="tied", early_stopping_patience=3
    )
    assert extension_problems(comparison_settings(patience), theirs) == ["early_stopping_patience 3 (published: None)"]


def test_settings_never_hold_the_study_storage(tmp_path):
    from spt_hf.tuning import TuneSpec

    secret = "mysql+pymysql://optuna:s3cret@db.example/studies"
    spec = CompareSpec(tasks=["digits"], architectures=["s4"], tune=TuneSpec(trials=4, storage=secret))
    path = record_settings(dataclasses.replace(spec, output_dir=str(tmp_path)))
    assert "s3cret" not in path.read_text() and json.loads(path.read_text())["settings"]["tune"]["trials"] == 4


def test_settings_recorded_keep_the_architectures_of_earlier_calls(tmp_path):
    record_settings(CompareSpec(tasks=["digits"], architectures=["transformer"], output_dir=str(tmp_path)))
    path = record_settings(CompareSpec(tasks=["digits"], architectures=["s4", "transformer"], output_dir=str(tmp_path)))
    assert json.loads(path.read_text())["settings"]["architectures"] == ["transformer", "s4"]


def test_a_hub_without_collections_gets_a_note_not_a_failure():
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    from spt_hf.hub.publish import group_in_collection

    class NoCollections:
        def create_collection(self, *args, **kwargs):
            request = httpx2.Request("POST", "http://127.0.0.1:1/api/collections")
            raise HfHubHTTPError("404 unsupported endpoint", response=httpx2.Response(404, request=request))

    note = group_in_collection(NoCollections(), "me/cmp", [("me/a", "model")], private=False)
    assert note.startswith("no collection: the Hub at ") and note.endswith("has no collections API (HTTP 404)")

    class Broken(NoCollections):
        def create_collection(self, *args, **kwargs):
            request = httpx2.Request("POST", "http://127.0.0.1:1/api/collections")
            raise HfHubHTTPError("500 server error", response=httpx2.Response(500, request=request))

    with pytest.raises(HfHubHTTPError, match="500"):  # any other failure is one, and the push says how to resume
        group_in_collection(Broken(), "me/cmp", [("me/a", "model")], private=False)
