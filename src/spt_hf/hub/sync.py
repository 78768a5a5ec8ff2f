"""Bringing a Hub repository to a given set of files in one commit, uploading only what differs.

A `RepoFiles` is what one repository should hold: {path in the repository: local file or bytes}. `sync_repo` lists
the repository's files with their digests (the git blob id of regular files, the sha256 of LFS files), adds the files
whose content differs, deletes the files that `owned` says this set manages and that it no longer holds, and makes
no commit at all when nothing differs. So a second push of the same folder uploads nothing, and a push that was cut
short resumes: the repositories it finished are left alone, and the LFS objects of an unfinished commit that already
reached the server are not sent again (the server says it has them).
"""

import fnmatch
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Content = Path | bytes


@dataclass
class RepoFiles:
    """What one repository should hold after a push: its id, type ("model" or "dataset") and {path: content}.
    `owned(path)`: the repository files this push manages (deleted when not in `files`); the others are kept."""

    repo_id: str
    repo_type: str
    files: dict[str, Content] = field(default_factory=dict)
    owned: Callable[[str], bool] = lambda path: path != ".gitattributes"

    @property
    def size(self) -> int:
        return sum(content_size(content) for content in self.files.values())


@dataclass
class SyncOutcome:
    """What `sync_repo` did to one repository: the files added or changed, those deleted, and the commit (None when
    the repository already held exactly these files)."""

    repo_id: str
    repo_type: str
    uploaded: list[str]
    deleted: list[str]
    uploaded_bytes: int
    commit_url: str | None


def content_size(content: Content) -> int:
    return len(content) if isinstance(content, bytes) else content.stat().st_size


def read_bytes(content: Content) -> bytes:
    return content if isinstance(content, bytes) else content.read_bytes()


def git_blob_id(data: bytes) -> str:
    """The id git (and so the Hub) gives a regular file's content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_unchanged(remote, content: Content) -> bool:
    """Whether the repository's `remote` file (a huggingface_hub RepoFile) holds `content`."""
    if remote.size != content_size(content):
        return False
    data = read_bytes(content)
    if remote.lfs is not None:
        return hashlib.sha256(data).hexdigest() == remote.lfs.sha256
    return git_blob_id(data) == remote.blob_id


def remote_files(api, repo: RepoFiles) -> dict:
    """{path: RepoFile} of the repository's main branch (empty for a repository without a commit)."""
    from huggingface_hub import RepoFile

    entries = api.list_repo_tree(repo.repo_id, repo_type=repo.repo_type, recursive=True)
    return {entry.path: entry for entry in entries if isinstance(entry, RepoFile)}


def sync_repo(api, repo: RepoFiles, private: bool, message: str) -> SyncOutcome:
    """Create the repository if needed and commit what differs from `repo.files` (nothing when it is up to date)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    api.create_repo(repo.repo_id, repo_type=repo.repo_type, private=private, exist_ok=True)
    remote = remote_files(api, repo)
    changed = [
        path for path, content in repo.files.items() if path not in remote or not is_unchanged(remote[path], content)
    ]
    stale = sorted(path for path in remote if repo.owned(path) and path not in repo.files)
    if not changed and not stale:
        return SyncOutcome(repo.repo_id, repo.repo_type, [], [], 0, None)
    operations = [CommitOperationAdd(path, source(repo.files[path])) for path in changed]
    operations += [CommitOperationDelete(path) for path in stale]
    commit = api.create_commit(repo.repo_id, operations, commit_message=message, repo_type=repo.repo_type)
    size = sum(content_size(repo.files[path]) for path in changed)
    return SyncOutcome(repo.repo_id, repo.repo_type, sorted(changed), stale, size, commit.commit_url)


def source(content: Content) -> bytes | str:
    """What CommitOperationAdd reads: the bytes, or the file's path (read by the client as it uploads)."""
    return content if isinstance(content, bytes) else str(content)


def matches_any(path: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in patterns)


def size_text(size: int) -> str:
    """A byte count as a listing shows it: `812 B`, `14.2 kB`, `3.1 MB`, `1.25 GB`."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{size} B"
