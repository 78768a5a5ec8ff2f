"""The local Hub server (test infrastructure) answers errors the way the Hub does, so the clients raise their usual
exceptions, and says so plainly when a client calls an endpoint it does not implement."""

import json
import urllib.error
import urllib.request

import pytest
from hub_testing import TOKEN


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
