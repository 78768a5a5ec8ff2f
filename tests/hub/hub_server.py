"""A local stand-in for the Hugging Face Hub's HTTP API, for spt_hf's tests. TEST INFRASTRUCTURE ONLY.

Nothing in spt_hf imports or depends on this file. It exists because no real Hub is reachable from the test machines
and no self-hostable Hub accepts pushes; the tests in tests/hub/ push and pull through the *real* huggingface_hub and
transformers clients against it (HF_ENDPOINT=<its URL>, HF_HUB_DISABLE_XET=1).

    python tests/hub/hub_server.py --root DIR [--port 0] [--no_collections]
    # prints one line: "LOCAL_HUB_READY http://127.0.0.1:PORT"

It binds 127.0.0.1 only and uses the standard library plus PyYAML (for card metadata). Accepted tokens come from the
environment variable LOCAL_HUB_TOKENS (comma-separated; never from the command line, never logged). Every token is
the user `tester`, who may write to any namespace. `--no_collections` (or LOCAL_HUB_NO_COLLECTIONS=1) leaves out the
collection endpoints: they answer 404 "unsupported endpoint", like a Hub without collections.

Storage under --root: `objects/<sha256>` holds each file content once (content-addressed; LFS objects are named by
their LFS oid, which is the same sha256), `state.json` the repositories under their URL path (`{ns}/{name}` for a
model, `datasets/{ns}/{name}` for a dataset, so a model and a dataset of one name are distinct): per repository the
commits (id, parent, message, and the full {path: file entry} map) and the branch and tag heads. Commit ids are sha1
digests of the commit. The key `collections` of state.json (never a repository: those keys hold a slash) holds the
collections by slug.

Endpoints (what huggingface_hub 2.4 and transformers 5 call to create, push, pull, tag, branch). {type} is `models`
or `datasets`; {repo} is `{ns}/{name}` for a model and `datasets/{ns}/{name}` for a dataset:
    GET  /api/whoami-v2                                  GET /api/agent-harnesses (the client's registry: empty)
    POST /api/repos/create                               "type" model|dataset; 409 + {"url"} when it exists
    GET  /api/{type}/{ns}/{name}[/revision/{rev}]        id, sha, siblings (?blobs=1: size, blobId, lfs), cardData,
                                                         lastModified, private; models also model-index, config
    POST /api/{type}/{ns}/{name}/preupload/{rev}         uploadMode regular|lfs, shouldIgnore, oid (git blob sha1 of
                                                         a regular file, sha256 of an LFS one: unchanged files skip)
    POST /{repo}.git/info/lfs/objects/batch              transfer "basic"; no actions when the object exists
    PUT  /lfs-upload/{oid}                               the upload href; sha256 and size are checked
    POST /api/{type}/{ns}/{name}/commit/{branch}         NDJSON header / file / lfsFile / deletedFile / deletedFolder
    POST /api/validate-yaml                              checks model-index like the Hub does (400 + message)
    HEAD|GET /{repo}/resolve/{rev}/{path}                X-Repo-Commit, ETag, X-Linked-Etag/-Size (LFS), Range
    GET  /api/{type}/{ns}/{name}/tree/{rev}[/{path}]     ?recursive=1
    POST /api/{type}/{ns}/{name}/paths-info/{rev}
    GET  /api/{type}/{ns}/{name}/refs
    POST|DELETE /api/{type}/{ns}/{name}/branch/{branch}  POST /api/{type}/{ns}/{name}/tag/{rev}
    POST /api/collections                                title, namespace, description, private; 409 + {"slug"} when
                                                         the namespace has a collection of that title
    GET  /api/collections?owner={ns}[&limit=N]           newest first, at most 4 items each, no position
    GET  /api/collections/{ns}/{slug}-{24 hex}           slug, title, owner {name}, items, position, lastUpdated...
    POST /api/collections/{ns}/{slug}-{24 hex}/items     {"item": {"type": model|dataset, "id"}, "note"}; 404 for an
                                                         unknown repository, 409 for an item already there
Errors carry the Hub's `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound) and a JSON {"error": ...}.
Anything else answers 404 "unsupported endpoint" and is logged as UNHANDLED on stderr, so a new client call shows up.
"""

import argparse
import base64
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

LFS_THRESHOLD = 10 * 1024 * 1024
# The .gitattributes the Hub writes into new repositories (abridged): these patterns always go the LFS way.
LFS_PATTERNS = (
    "*.bin",
    "*.safetensors",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.npy",
    "*.npz",
    "*.pkl",
    "*.onnx",
    "*.msgpack",
    "*.zip",
    "*.gz",
    "*.tar",
    "*tfevents*",
)
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS).encode()
USER = "tester"
REPO_TYPES = ("model", "dataset")


class HubError(Exception):
    """An error answer: HTTP status, the Hub's X-Error-Code (if any), and a message."""

    def __init__(self, status: int, message: str, code: str | None = None, extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra or {}


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


class HubStore:
    """Repositories, commits and content-addressed objects on disk; every access holds one lock."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.state_path = root / "state.json"
        state = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        self.collections: dict = state.pop("collections", {})  # by slug
        self.repos: dict = state  # by repo_path(): every other key of state.json
        self.lock = threading.RLock()

    def save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.repos, "collections": self.collections}, indent=1))
        os.replace(tmp, self.state_path)

    # objects
    def put_object(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.objects / sha256
        if not path.is_file():
            tmp = path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return sha256

    def has_object(self, sha256: str, size: int | None = None) -> bool:
        path = self.objects / sha256
        return path.is_file() and (size is None or path.stat().st_size == size)

    def read_object(self, sha256: str) -> bytes:
        return (self.objects / sha256).read_bytes()

    # repositories and revisions
    def repo(self, key: str, user: str | None) -> dict:
        repo = self.repos.get(key)
        if repo is None or (repo["private"] and user is None):
            raise HubError(404, f"Repository {key} not found", "RepoNotFound")
        return repo

    def create_repo(self, key: str, repo_type: str, private: bool) -> dict:
        if key in self.repos:
            raise HubError(409, f"You already created this {repo_type} repo")
        self.repos[key] = {"private": private, "createdAt": now(), "commits": {}, "branches": {}, "tags": {}}
        entry = self.file_entry(GITATTRIBUTES, lfs=False)
        self.commit(key, "main", "initial commit", "", {".gitattributes": entry}, parent=None)
        return self.repos[key]

    def resolve(self, repo: dict, revision: str) -> dict:
        commit_id = repo["branches"].get(revision) or repo["tags"].get(revision)
        if commit_id is None and revision in repo["commits"]:
            commit_id = revision
        if commit_id is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo["commits"][commit_id]

    def file_entry(self, data: bytes, lfs: bool) -> dict:
        sha256 = self.put_object(data)
        oid = git_blob_oid(lfs_pointer(sha256, len(data)) if lfs else data)  # git's oid of the pointer or the file
        return {"oid": oid, "size": len(data), "sha256": sha256, "lfs": lfs}

    def commit(self, key: str, branch: str, title: str, description: str, files: dict, parent: str | None) -> str:
        repo = self.repos[key]
        body = {"parent": parent, "title": title, "message": description, "date": now(), "files": files}
        unique = json.dumps([key, branch, time.time_ns(), body], sort_keys=True)
        commit_id = hashlib.sha1(unique.encode()).hexdigest()
        repo["commits"][commit_id] = {"id": commit_id, **body}
        repo["branches"][branch] = commit_id
        self.save()
        return commit_id

    # collections
    def collection(self, slug: str, user: str | None) -> dict:
        collection = self.collections.get(slug)
        if collection is None or (collection["private"] and user is None):
            raise HubError(404, f"Collection {slug} not found")
        return collection

    def create_collection(self, namespace: str, title: str, description: str | None, private: bool) -> dict:
        for slug, existing in self.collections.items():
            if existing["namespace"] == namespace and existing["title"] == title:
                message = f"A collection titled {title!r} already exists in {namespace}"
                raise HubError(409, message, extra={"slug": slug})
        object_id = hashlib.sha1(f"{namespace}/{title}/{time.time_ns()}".encode()).hexdigest()[:24]
        slug = f"{namespace}/{slugify(title)}-{object_id}"
        self.collections[slug] = {
            "slug": slug,
            "id": object_id,
            "namespace": namespace,
            "title": title,
            "description": description,
            "private": private,
            "lastUpdated": now(),
            "items": [],
        }
        self.save()
        return self.collections[slug]

    def add_collection_item(self, collection: dict, item_type: str, item_id: str, note: str | None) -> None:
        if any((item["type"], item["id"]) == (item_type, item_id) for item in collection["items"]):
            raise HubError(409, f"The {item_type} {item_id} is already in the collection {collection['slug']}")
        object_id = hashlib.sha1(f"{collection['slug']}/{item_type}/{item_id}".encode()).hexdigest()[:24]
        collection["items"].append({"_id": object_id, "id": item_id, "type": item_type, "note": note})
        collection["lastUpdated"] = now()
        self.save()


def repo_path(repo_type: str, repo_id: str) -> str:
    """The Hub's URL path of a repository (models at `ns/name`, datasets at `datasets/ns/name`), which is also its key
    in state.json (so state files written when only models existed stay readable)."""
    return repo_id if repo_type == "model" else f"{repo_type}s/{repo_id}"


def slugify(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "collection"


def wants_lfs(path: str, size: int, sample: bytes) -> bool:
    name = path.rsplit("/", 1)[-1]
    return size >= LFS_THRESHOLD or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS) or b"\0" in sample


def card_metadata(files: dict, store: HubStore) -> dict:
    entry = files.get("README.md")
    if entry is None:
        return {}
    text = store.read_object(entry["sha256"]).decode("utf-8", "replace")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.DOTALL)
    return (yaml.safe_load(match.group(1)) or {}) if match else {}


def validate_model_index(metadata: dict) -> None:
    """The checks the Hub applies to `model-index` (name; results with task.type, dataset.type/name, metrics)."""
    index = metadata.get("model-index")
    if index is None:
        return
    problems = []
    if not isinstance(index, list):
        problems.append("model-index must be a list")
    for i, model in enumerate(index if isinstance(index, list) else []):
        if not isinstance(model, dict) or not model.get("name"):
            problems.append(f"model-index[{i}].name is required")
            continue
        for j, result in enumerate(model.get("results") or []):
            where = f"model-index[{i}].results[{j}]"
            if not (result.get("task") or {}).get("type"):
                problems.append(f"{where}.task.type is required")
            dataset = result.get("dataset") or {}
            if not dataset.get("type") or not dataset.get("name"):
                problems.append(f"{where}.dataset.type and .name are required")
            metrics = result.get("metrics")
            if not metrics:
                problems.append(f"{where}.metrics must be a non-empty list")
            for k, metric in enumerate(metrics or []):
                if not metric.get("type") or not isinstance(metric.get("value"), int | float | str):
                    problems.append(f"{where}.metrics[{k}] needs a type and a value")
    if problems:
        raise HubError(400, "Invalid model-index: " + "; ".join(problems))


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LocalHubTestServer/1.0"
    store: HubStore
    tokens: frozenset[str]
    routes: list  # ROUTES, and COLLECTION_ROUTES unless the server runs with --no_collections

    # plumbing
    def log_message(self, format, *args):  # request lines only (no headers, so never a token)
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def base_url(self) -> str:
        return f"http://{self.headers.get('Host', '127.0.0.1')}"

    def user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None
        if auth.startswith("Bearer ") and auth[7:] in self.tokens:
            return USER
        raise HubError(401, "Invalid credentials in Authorization header")

    def require_user(self) -> str:
        user = self.user()
        if user is None:
            raise HubError(401, "You must be authenticated to do this (no token in the Authorization header)")
        return user

    def find_repo(self, repo_type: str, ns: str, name: str, write: bool = False) -> tuple[str, dict]:
        """The repository's key (its repo_path) and record; `write` requires a valid token."""
        key = repo_path(repo_type, f"{ns}/{name}")
        return key, self.store.repo(key, self.require_user() if write else self.user())

    def read_body(self) -> bytes:
        """The request body (read once, before routing, so that an error answer never leaves it in the stream)."""
        if self._body is not None:
            return self._body
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            self._body = b"".join(chunks)
        else:
            self._body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return self._body

    def json_body(self) -> dict:
        body = self.read_body()
        return json.loads(body) if body else {}

    def send(self, status: int, payload=None, headers: dict | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle_any(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(part) for part in url.path.strip("/").split("/")]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self._body = None
        try:
            self.read_body()
            with self.store.lock:
                for method, pattern, handler in self.routes:
                    if self.command in method and (match := pattern(parts)) is not None:
                        return handler(self, *match, query=query)
            sys.stderr.write(f"UNHANDLED {self.command} {self.path}\n")
            raise HubError(404, f"local hub test server: unsupported endpoint {self.command} {url.path}")
        except HubError as error:
            headers = {"X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            self.send(error.status, {"error": error.message, **error.extra}, headers)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = handle_any

    # API
    def whoami(self, query):
        self.require_user()
        token = {"displayName": "local-test-token", "role": "write", "createdAt": now()}
        auth = {"type": "access_token", "accessToken": token}
        self.send(200, {"type": "user", "id": "0" * 24, "name": USER, "fullname": "Tester", "orgs": [], "auth": auth})

    def agent_harnesses(self, query):  # huggingface_hub's best-effort telemetry registry: answer "none known"
        self.send(200, {"standardEnvVars": [], "harnesses": {}})

    def create_repo(self, query):
        self.require_user()
        body = self.json_body()
        repo_type = body.get("type") or "model"
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"local hub test server: repo type {repo_type!r} is not supported (use {REPO_TYPES})")
        repo_id = f"{body.get('organization') or USER}/{body['name']}"
        key = repo_path(repo_type, repo_id)
        url = f"{self.base_url()}/{key}"
        try:
            private = body.get("visibility", "private" if body.get("private") else "public") != "public"
            self.store.create_repo(key, repo_type, private)
        except HubError as error:
            error.extra["url"] = url
            raise
        self.send(200, {"url": url, "name": repo_id, "id": hashlib.sha1(key.encode()).hexdigest()[:24]})

    def repo_info(self, repo_type, ns, name, revision="main", *, query):
        key, repo = self.find_repo(repo_type, ns, name)
        commit = self.store.resolve(repo, revision)
        files = commit["files"]
        metadata = card_metadata(files, self.store)
        blobs = query.get("blobs", "false").lower() in ("1", "true")
        siblings = [sibling_json(path, files[path], blobs) for path in sorted(files)]
        payload = {
            "_id": hashlib.sha1(key.encode()).hexdigest()[:24],
            "id": f"{ns}/{name}",
            "author": ns,
            "sha": commit["id"],
            "lastModified": commit["date"],
            "createdAt": repo["createdAt"],
            "private": repo["private"],
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": metadata.get("tags") or [],
            "cardData": metadata or None,
            "siblings": siblings,
        }
        if repo_type == "model":
            payload.update(model_fields(files, metadata, self.store), modelId=payload["id"])
        self.send(200, payload)

    def preupload(self, repo_type, ns, name, revision, query):
        _, repo = self.find_repo(repo_type, ns, name, write=True)
        files = self.store.resolve(repo, revision)["files"]
        answers = []
        for item in self.json_body()["files"]:
            lfs = wants_lfs(item["path"], item["size"], base64.b64decode(item.get("sample", "")))
            existing = files.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing["sha256"] if existing["lfs"] else existing["oid"]
            answers.append(
                {"path": item["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        self.send(200, {"files": answers, "commitOid": self.store.resolve(repo, revision)["id"]})

    def lfs_batch(self, repo_type, ns, name, query):
        self.find_repo(repo_type, ns, name, write=True)
        body = self.json_body()
        if body.get("operation") != "upload":
            raise HubError(400, "local hub test server: only LFS uploads are supported (downloads use /resolve)")
        objects = []
        for item in body["objects"]:
            answer = {"oid": item["oid"], "size": item["size"], "authenticated": True}
            if not self.store.has_object(item["oid"], item["size"]):
                href = f"{self.base_url()}/lfs-upload/{item['oid']}?size={item['size']}"
                answer["actions"] = {"upload": {"href": href, "header": {}}}
            objects.append(answer)
        self.send(200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"})

    def lfs_upload(self, oid, query):
        data = self.read_body()
        if hashlib.sha256(data).hexdigest() != oid or len(data) != int(query.get("size", len(data))):
            raise HubError(400, f"LFS upload of {oid}: content does not match its oid and size")
        self.store.put_object(data)
        self.send(200, {})

    def commit(self, repo_type, ns, name, branch, query):
        key, repo = self.find_repo(repo_type, ns, name, write=True)
        if query.get("create_pr"):
            raise HubError(400, "local hub test server: pull requests are not supported")
        if branch not in repo["branches"]:
            raise HubError(404, f"Invalid rev id: {branch} (commits go to a branch)", "RevisionNotFound")
        head = repo["commits"][repo["branches"][branch]]
        files = dict(head["files"])
        header = {}
        for line in self.read_body().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            kind, value = item["key"], item["value"]
            if kind == "header":
                header = value
            elif kind == "file":
                files[value["path"]] = self.store.file_entry(base64.b64decode(value["content"]), lfs=False)
            elif kind == "lfsFile":
                if not self.store.has_object(value["oid"], value.get("size")):
                    raise HubError(400, f"LFS object {value['oid']} for {value['path']} was not uploaded")
                size = (self.store.objects / value["oid"]).stat().st_size
                pointer_oid = git_blob_oid(lfs_pointer(value["oid"], size))
                files[value["path"]] = {"oid": pointer_oid, "size": size, "sha256": value["oid"], "lfs": True}
            elif kind == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"{value['path']} does not exist in {key}@{branch}", "EntryNotFound")
            elif kind == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {path: entry for path, entry in files.items() if not path.startswith(prefix)}
            else:
                raise HubError(400, f"local hub test server: unsupported commit operation {kind!r}")
        parent = header.get("parentCommit")
        if parent and parent != head["id"]:
            raise HubError(412, f"A commit has happened since {parent} on {branch}; pull and retry")
        metadata = card_metadata(files, self.store)
        validate_model_index(metadata)
        commit_id = self.store.commit(
            key, branch, header.get("summary", ""), header.get("description", ""), files, head["id"]
        )
        url = f"{self.base_url()}/{key}/commit/{commit_id}"
        self.send(
            200, {"success": True, "commitOid": commit_id, "commitUrl": url, "hookOutput": "", "pullRequestUrl": None}
        )

    def validate_yaml(self, query):
        body = self.json_body()
        match = re.match(r"^---\s*\n(.*?)\n---\s*\n", body.get("content", ""), re.DOTALL)
        try:
            metadata = (yaml.safe_load(match.group(1)) or {}) if match else {}
        except yaml.YAMLError as error:
            raise HubError(400, f"Invalid YAML metadata: {error}") from error
        validate_model_index(metadata)
        self.send(200, {"errors": [], "warnings": []})

    def resolve_file(self, repo_type, ns, name, revision, *path, query):
        _, repo = self.find_repo(repo_type, ns, name)
        commit = self.store.resolve(repo, revision)
        entry = commit["files"].get("/".join(path))
        if entry is None:
            raise HubError(404, f"Entry not found: {'/'.join(path)}", "EntryNotFound")
        headers = {"X-Repo-Commit": commit["id"], "ETag": f'"{entry["oid"]}"', "Accept-Ranges": "bytes"}
        if entry["lfs"]:
            headers.update({"X-Linked-Etag": f'"{entry["sha256"]}"', "X-Linked-Size": entry["size"]})
        data = self.store.read_object(entry["sha256"]) if self.command == "GET" else b""
        status, span = 200, self.headers.get("Range")
        if span and self.command == "GET":
            start, _, end = span.removeprefix("bytes=").partition("-")
            start, end = int(start), (int(end) if end else len(data) - 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start : end + 1], 206
        if self.command == "HEAD":
            self.send_response(200)
            for key, value in {**headers, "Content-Length": entry["size"]}.items():
                self.send_header(key, str(value))
            self.end_headers()
            return
        self.send(status, headers=headers, raw=data)

    def tree(self, repo_type, ns, name, revision, *path, query):
        files = self.store.resolve(self.find_repo(repo_type, ns, name)[1], revision)["files"]
        folder = "/".join(path)
        prefix = folder + "/" if folder else ""
        if folder and not any(p.startswith(prefix) for p in files):
            raise HubError(404, f"Folder {folder} not found", "EntryNotFound")
        recursive = query.get("recursive", "false").lower() in ("1", "true")
        entries, folders = [], set()
        for file_path, entry in sorted(files.items()):
            if not file_path.startswith(prefix):
                continue
            rest = file_path[len(prefix) :].split("/")  # [name] or [folder, ..., name]
            if len(rest) == 1 or recursive:
                entries.append(file_json(file_path, entry))
            depth = len(rest) - 1 if recursive else min(len(rest) - 1, 1)
            folders.update(prefix + "/".join(rest[: i + 1]) for i in range(depth))
        self.send(200, entries + [folder_json(f) for f in sorted(folders)])

    def paths_info(self, repo_type, ns, name, revision, query):
        files = self.store.resolve(self.find_repo(repo_type, ns, name)[1], revision)["files"]
        body = self.read_body()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(body).get("paths", [])
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        entries = []
        for wanted in paths:
            if wanted in files:
                entries.append(file_json(wanted, files[wanted]))
            elif any(p.startswith(wanted.rstrip("/") + "/") for p in files):
                entries.append(folder_json(wanted.rstrip("/")))
        self.send(200, entries)

    def refs(self, repo_type, ns, name, query):
        _, repo = self.find_repo(repo_type, ns, name)

        def listing(refs: dict, kind: str) -> list[dict]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(refs.items())]

        payload = {
            "branches": listing(repo["branches"], "heads"),
            "tags": listing(repo["tags"], "tags"),
            "converts": [],
        }
        if query.get("include_prs"):
            payload["pullRequests"] = []
        self.send(200, payload)

    def branch(self, repo_type, ns, name, branch, query):
        _, repo = self.find_repo(repo_type, ns, name, write=True)
        if self.command == "DELETE":
            if repo["branches"].pop(branch, None) is None:
                raise HubError(404, f"Branch {branch} not found", "RevisionNotFound")
        else:
            start = self.json_body().get("startingPoint", "main")
            if branch in repo["branches"]:
                raise HubError(409, f"Branch {branch} already exists")
            repo["branches"][branch] = self.store.resolve(repo, start)["id"]
        self.store.save()
        self.send(200, {})

    def tag(self, repo_type, ns, name, revision, query):
        _, repo = self.find_repo(repo_type, ns, name, write=True)
        tag = self.json_body()["tag"]
        if tag in repo["tags"]:
            raise HubError(409, f"Tag {tag} already exists")
        repo["tags"][tag] = self.store.resolve(repo, revision)["id"]
        self.store.save()
        self.send(200, {})

    # collections
    def list_collections(self, query):
        if "item" in query:
            raise HubError(400, "local hub test server: list_collections filters by owner only (drop `item`)")
        user, owner = self.user(), query.get("owner")
        listed = [
            c
            for c in self.store.collections.values()
            if (owner is None or c["namespace"] == owner) and not (c["private"] and user is None)
        ]
        listed.sort(key=lambda c: c["lastUpdated"], reverse=True)
        limit = int(query.get("limit", len(listed)))
        self.send(200, [self.collection_json(c, listing=True) for c in listed[:limit]])

    def create_collection(self, query):
        self.require_user()
        body = self.json_body()
        if not body.get("title") or not body.get("namespace"):
            raise HubError(400, "A collection needs a non-empty title and a namespace")
        collection = self.store.create_collection(
            body["namespace"], body["title"], body.get("description"), bool(body.get("private"))
        )
        self.send(200, self.collection_json(collection))

    def get_collection(self, ns, slug, query):
        self.send(200, self.collection_json(self.store.collection(f"{ns}/{slug}", self.user())))

    def add_collection_item(self, ns, slug, query):
        collection = self.store.collection(f"{ns}/{slug}", self.require_user())
        body = self.json_body()
        item_type, item_id = body["item"]["type"], body["item"]["id"]
        if item_type not in REPO_TYPES:
            raise HubError(400, f"local hub test server: collection items are repositories of type {REPO_TYPES}")
        self.store.repo(repo_path(item_type, item_id), USER)  # the Hub answers 404 for an item it does not have
        self.store.add_collection_item(collection, item_type, item_id, body.get("note"))
        self.send(200, self.collection_json(collection))

    def collection_json(self, collection: dict, listing: bool = False) -> dict:
        """A collection as the Hub answers it (owner object, items with their positions, lastUpdated, theme...) and
        its position among its owner's collections; in a `listing`, at most 4 items and no position (the client
        numbers the listing itself)."""
        namespace = collection["namespace"]
        items = [
            {
                "_id": item["_id"],
                "id": item["id"],
                "type": item["type"],
                "repoType": item["type"],
                "author": item["id"].split("/")[0],
                "position": index,
                **({"note": {"text": item["note"], "html": item["note"]}} if item["note"] is not None else {}),
            }
            for index, item in enumerate(collection["items"][: 4 if listing else None])
        ]
        payload = {
            "slug": collection["slug"],
            "id": collection["id"],
            "title": collection["title"],
            "description": collection["description"],
            "owner": {"_id": "0" * 24, "name": namespace, "fullname": namespace, "type": "user", "avatarUrl": ""},
            "items": items,
            "lastUpdated": collection["lastUpdated"],
            "theme": "orange",
            "private": collection["private"],
            "gating": False,
            "upvotes": 0,
            "isUpvotedByUser": False,
            "shareUrl": f"{self.base_url()}/collections/{collection['slug']}",
        }
        if not listing:
            owned = [slug for slug, c in self.store.collections.items() if c["namespace"] == namespace]
            payload["position"] = owned.index(collection["slug"])
        return payload


def model_fields(files: dict, metadata: dict, store: HubStore) -> dict:
    """What the Hub adds to the info of a model repository: library, pipeline, model-index, config."""
    config = {}
    if "config.json" in files:
        full = json.loads(store.read_object(files["config.json"]["sha256"]))
        config = {k: full[k] for k in ("architectures", "model_type", "auto_map") if k in full}
    return {
        "library_name": metadata.get("library_name"),
        "pipeline_tag": metadata.get("pipeline_tag"),
        "model-index": metadata.get("model-index"),
        "config": config,
    }


def lfs_json(entry: dict) -> dict:
    pointer_size = len(lfs_pointer(entry["sha256"], entry["size"]))
    return {"oid": entry["sha256"], "size": entry["size"], "pointerSize": pointer_size}


def sibling_json(path: str, entry: dict, blobs: bool) -> dict:
    """A repo info's sibling; with `?blobs=true`, also its size, blob id and LFS details."""
    if not blobs:
        return {"rfilename": path}
    sibling = {"rfilename": path, "size": entry["size"], "blobId": entry["oid"]}
    if entry["lfs"]:
        lfs = lfs_json(entry)
        sibling["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
    return sibling


def file_json(path: str, entry: dict) -> dict:
    item = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": path}
    if entry["lfs"]:
        item["lfs"] = lfs_json(entry)
    return item


def folder_json(path: str) -> dict:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def route(*template: str, repo_type: str | None = None):
    """Match URL segments against a template: literals, `{}` one segment, `{}.git` one segment ending in .git, `{*}`
    the rest (one or more). The handler gets `repo_type` (when given) and the captured segments as arguments."""

    def match(parts: list[str]):
        captured = [] if repo_type is None else [repo_type]
        for index, piece in enumerate(template):
            if piece == "{*}":
                rest = parts[index:]
                return captured + rest if rest else None
            if index >= len(parts):
                return None
            if piece == "{}":
                captured.append(parts[index])
            elif piece == "{}.git":
                if not parts[index].endswith(".git"):
                    return None
                captured.append(parts[index].removesuffix(".git"))
            elif piece != parts[index]:
                return None
        return captured if len(parts) == len(template) else None

    return match


H = HubHandler


def repo_routes(repo_type: str) -> list:
    """The routes of one repository type: its API under /api/{type}s/{ns}/{name}, its git and files under its
    repo_path (/{ns}/{name} for models, /datasets/{ns}/{name} for datasets)."""
    api = ("api", f"{repo_type}s", "{}", "{}")
    *web_prefix, _ = repo_path(repo_type, "{}/{}").split("/")  # ("datasets", "{}") or ("{}",)
    web, git = (*web_prefix, "{}"), (*web_prefix, "{}.git")

    def typed(*template: str):
        return route(*template, repo_type=repo_type)

    return [
        (("GET",), typed(*api), H.repo_info),
        (("GET",), typed(*api, "revision", "{}"), H.repo_info),
        (("POST",), typed(*api, "preupload", "{}"), H.preupload),
        (("POST",), typed(*git, "info", "lfs", "objects", "batch"), H.lfs_batch),
        (("POST",), typed(*api, "commit", "{}"), H.commit),
        (("GET", "HEAD"), typed(*web, "resolve", "{}", "{*}"), H.resolve_file),
        (("GET",), typed(*api, "tree", "{}"), H.tree),
        (("GET",), typed(*api, "tree", "{}", "{*}"), H.tree),
        (("POST",), typed(*api, "paths-info", "{}"), H.paths_info),
        (("GET",), typed(*api, "refs"), H.refs),
        (("POST", "DELETE"), typed(*api, "branch", "{}"), H.branch),
        (("POST",), typed(*api, "tag", "{}"), H.tag),
    ]


ROUTES = [
    (("GET",), route("api", "whoami-v2"), H.whoami),
    (("GET",), route("api", "agent-harnesses"), H.agent_harnesses),
    (("POST",), route("api", "repos", "create"), H.create_repo),
    (("PUT",), route("lfs-upload", "{}"), H.lfs_upload),
    (("POST",), route("api", "validate-yaml"), H.validate_yaml),
    # dataset routes first: a /datasets/... URL is a dataset's even where it would also parse as a model's
    *(entry for repo_type in ("dataset", "model") for entry in repo_routes(repo_type)),
]
COLLECTION_ROUTES = [
    (("GET",), route("api", "collections"), H.list_collections),
    (("POST",), route("api", "collections"), H.create_collection),
    (("GET",), route("api", "collections", "{}", "{}"), H.get_collection),
    (("POST",), route("api", "collections", "{}", "{}", "items"), H.add_collection_item),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local Hub HTTP API for spt_hf's tests (test infrastructure).")
    parser.add_argument("--root", required=True, help="folder for objects/ and state.json")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed on the ready line)")
    parser.add_argument(
        "--no_collections",
        action="store_true",
        default=os.environ.get("LOCAL_HUB_NO_COLLECTIONS") == "1",
        help="answer 404 (unsupported endpoint) on every /api/collections endpoint, like a Hub without collections",
    )
    args = parser.parse_args(argv)
    handler = type("Handler", (HubHandler,), {})
    handler.store = HubStore(Path(args.root))
    handler.tokens = frozenset(t for t in os.environ.get("LOCAL_HUB_TOKENS", "").split(",") if t)
    handler.routes = ROUTES + ([] if args.no_collections else COLLECTION_ROUTES)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    print(f"LOCAL_HUB_READY http://127.0.0.1:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
