"""The local Hub server (test infrastructure) answers errors the way the Hub does, so the clients raise their usual
exceptions, and says so plainly when a client calls an endpoint it does not implement. Dataset repositories work
through the real huggingface_hub client as model ones do, collections hold both, and a server started without
collections answers 404 on them."""

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hub_testing import SERVER, TOKEN, HubClient, HubServer


def request(url: str, method: str = "GET", body: dict | None = None, token: str | None = None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=30) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read() or b"null")


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("/api/models/nobody/nothing", 404, "RepoNotFound"),
        ("/nobody/nothing/resolve/main/config.json", 404, "RepoNotFound"),
        ("/api/models/tester/server-check/revision/no-such-branch", 404, "RevisionNotFound"),
        ("/tester/server-check/resolve/main/missing.txt", 404, "EntryNotFound"),
    ],
)
def test_errors_carry_the_hub_error_codes(hub_server, path, status, code):
    request(f"{hub_server.url}/api/repos/create", "POST", {"name": "server-check"}, TOKEN)
    answer_status, headers, body = request(hub_server.url + path, token=TOKEN)
    assert (answer_status, headers.get("X-Error-Code")) == (status, code) and body["error"]


def test_writes_need_a_valid_token_and_unknown_endpoints_say_so(hub_server):
    assert request(f"{hub_server.url}/api/repos/create", "POST", {"name": "x"})[0] == 401
    assert request(f"{hub_server.url}/api/repos/create", "POST", {"name": "x"}, "hf_not_the_token")[0] == 401
    status, _, body = request(f"{hub_server.url}/api/spaces/tester/x/runtime", token=TOKEN)
    assert status == 404 and "unsupported endpoint GET /api/spaces/tester/x/runtime" in body["error"]
    status, _, body = request(f"{hub_server.url}/api/repos/create", "POST", {"name": "server-check"}, TOKEN)
    assert status == 409 and body["url"].endswith("/tester/server-check")


@contextlib.contextmanager
def local_hub(root: Path, *options: str, env: dict | None = None):
    """A second local Hub server (as conftest.py starts the session's), for options the session's server lacks."""
    with open(root / "server.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "--root", str(root / "store"), "--port", "0", *options],
            env={**os.environ, "LOCAL_HUB_TOKENS": TOKEN, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        ready = process.stdout.readline().split()
        assert ready[:1] == ["LOCAL_HUB_READY"], (root / "server.log").read_text()
        yield HubServer(url=ready[1], root=root, pid=process.pid)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def result(process) -> dict:
    """The JSON a client process printed after `RESULT `."""
    return json.loads(process.stdout.split("RESULT ", 1)[1])


DATASET_ROUND_TRIP = """
from pathlib import Path
from huggingface_hub import HfApi, RepoFile, hf_hub_download, snapshot_download
api = HfApi()
repo = ARGS["repo"]
print("URL", api.create_repo(repo, repo_type="dataset"))
first = api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=ARGS["folder"], commit_message="data")
again = api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=ARGS["folder"], commit_message="same")
tree = {
    f.path: {"blob_id": f.blob_id, "sha256": f.lfs.sha256 if f.lfs else None}
    for f in api.list_repo_tree(repo, repo_type="dataset", recursive=True)
    if isinstance(f, RepoFile)
}
info = api.dataset_info(repo, files_metadata=True)
snapshot = snapshot_download(repo, repo_type="dataset")
one = hf_hub_download(repo, "data/train.npy", repo_type="dataset", revision=first.oid)
print("RESULT", json.dumps({
    "first": first.oid, "again": again.oid, "tree": tree, "snapshot": snapshot, "one": one, "sha": info.sha,
    "card": info.card_data.to_dict(), "siblings": {s.rfilename: s.blob_id for s in info.siblings},
}))
"""


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_dataset_repositories_upload_and_download_like_models(hub_server, hub_client, tmp_path):
    files = {
        "README.md": b"---\nlicense: mit\ntask_categories:\n- text-classification\n---\n# Digits\n",
        "data/notes.txt": b"a small text file\n",
        "data/train.npy": bytes(range(256)) * 64,  # *.npy: the LFS way
    }
    for name, data in files.items():
        (tmp_path / "folder" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "folder" / name).write_bytes(data)

    process = hub_client.run(DATASET_ROUND_TRIP, {"repo": "tester/digits-data", "folder": str(tmp_path / "folder")})
    out = result(process)

    assert "URL http://" in process.stdout and "/datasets/tester/digits-data" in process.stdout
    assert out["again"] == out["first"] == out["sha"]  # the second upload changed nothing: no new commit
    assert len(hub_server.state()["datasets/tester/digits-data"]["commits"]) == 2  # the repository's first, "data"
    snapshot = Path(out["snapshot"])
    assert {name: (snapshot / name).read_bytes() for name in files} == files
    assert Path(out["one"]).read_bytes() == files["data/train.npy"]
    npy, txt = files["data/train.npy"], files["data/notes.txt"]
    assert out["tree"]["data/train.npy"]["sha256"] == hashlib.sha256(npy).hexdigest()
    assert out["tree"]["data/notes.txt"] == {"blob_id": git_blob_sha1(txt), "sha256": None}
    assert out["siblings"]["data/notes.txt"] == git_blob_sha1(txt)
    assert out["card"] == {"license": "mit", "task_categories": ["text-classification"]}


TWINS = """
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
for repo_type in ("model", "dataset"):
    api.create_repo("tester/twin", repo_type=repo_type)
    api.upload_file(path_or_fileobj=repo_type.encode(), path_in_repo="kind.txt", repo_id="tester/twin",
                    repo_type=repo_type)
api.create_repo("tester/twin", repo_type="dataset", exist_ok=True)
texts = {t: open(hf_hub_download("tester/twin", "kind.txt", repo_type=t)).read() for t in ("model", "dataset")}
model, dataset = api.model_info("tester/twin"), api.dataset_info("tester/twin")
print("RESULT", json.dumps({"texts": texts, "shas": [model.sha, dataset.sha], "ids": [model.id, dataset.id]}))
"""


def test_a_model_and_a_dataset_of_the_same_name_are_distinct(hub_server, hub_client):
    out = result(hub_client.run(TWINS))
    assert out["texts"] == {"model": "model", "dataset": "dataset"}
    assert out["ids"] == ["tester/twin", "tester/twin"] and out["shas"][0] != out["shas"][1]
    state = hub_server.state()
    assert state["tester/twin"] is not state["datasets/tester/twin"]
    status, _, body = request(f"{hub_server.url}/api/repos/create", "POST", {"name": "twin", "type": "dataset"}, TOKEN)
    assert status == 409 and body["url"].endswith("/datasets/tester/twin")


COLLECTIONS = """
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError
api = HfApi()
api.create_repo("tester/shelf-model")
api.create_repo("tester/shelf-data", repo_type="dataset")
made = api.create_collection("SPT runs: digits", namespace="tester", description="models and data")
api.add_collection_item(made.slug, "tester/shelf-model", "model", note="the SPT checkpoint")
api.add_collection_item(made.slug, "tester/shelf-data", "dataset")
api.add_collection_item(made.slug, "tester/shelf-data", "dataset", exists_ok=True)
statuses = []
for call in (
    lambda: api.add_collection_item(made.slug, "tester/shelf-data", "dataset"),
    lambda: api.add_collection_item(made.slug, "tester/no-such-model", "model"),
    lambda: api.create_collection("SPT runs: digits", namespace="tester"),
):
    try:
        call()
    except HfHubHTTPError as error:
        statuses.append(error.response.status_code)
again = api.create_collection("SPT runs: digits", namespace="tester", exists_ok=True)
got = api.get_collection(made.slug)
listed = [c.slug for c in api.list_collections(owner="tester")]
print("RESULT", json.dumps({
    "slug": made.slug, "again": again.slug, "title": got.title, "description": got.description,
    "owner": got.owner["name"], "position": got.position, "url": got.url, "statuses": statuses, "listed": listed,
    "items": [[i.item_id, i.item_type, i.position, i.note] for i in got.items],
}))
"""


def test_collections_hold_models_and_datasets(hub_server, hub_client):
    out = result(hub_client.run(COLLECTIONS))
    assert re.fullmatch(r"tester/spt-runs-digits-[0-9a-f]{24}", out["slug"]) and out["again"] == out["slug"]
    assert (out["title"], out["description"], out["owner"]) == ("SPT runs: digits", "models and data", "tester")
    assert out["items"] == [
        ["tester/shelf-model", "model", 0, "the SPT checkpoint"],
        ["tester/shelf-data", "dataset", 1, None],
    ]
    assert out["statuses"] == [409, 404, 409]  # duplicate item, unknown repository, existing title
    assert out["url"] == f"{hub_server.url}/collections/{out['slug']}" and out["slug"] in out["listed"]
    assert len(hub_server.state()["collections"][out["slug"]]["items"]) == 2  # persisted


NO_COLLECTIONS = """
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError
api = HfApi()
api.create_repo("tester/plain", repo_type="dataset")
status = None
try:
    api.create_collection("anything", namespace="tester")
except HfHubHTTPError as error:
    status = error.response.status_code
print("RESULT", json.dumps({"status": status}))
"""


@pytest.mark.parametrize("options, env", [(["--no_collections"], {}), ([], {"LOCAL_HUB_NO_COLLECTIONS": "1"})])
def test_a_hub_without_collections_answers_404(tmp_path, options, env):
    with local_hub(tmp_path, *options, env=env) as server:
        client = HubClient(server, tmp_path / "home", tmp_path / "tasks")
        (tmp_path / "home").mkdir()
        assert result(client.run(NO_COLLECTIONS)) == {"status": 404}
        status, _, body = request(f"{server.url}/api/collections?owner=tester", token=TOKEN)
    assert status == 404 and "unsupported endpoint GET /api/collections" in body["error"]
    assert "UNHANDLED POST /api/collections" in (tmp_path / "server.log").read_text()
