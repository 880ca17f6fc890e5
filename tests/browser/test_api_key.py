"""The playground on a server with an API key: /v1/lab needs the key like every /v1 route, and the
page asks for the key, sends it, and keeps it in the tab's sessionStorage only."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import expect
from tests.server.harness import start_server, stop_server

LAB_BODY = {"logits": [4, 3, 2, 1, 0.5], "labels": ["the", "a", "an", "and", "or"], "top_k": 3, "top_p": 0.9}


@pytest.fixture(scope="module")
def server(long_model, tmp_path_factory):
    server = start_server(long_model, tmp_path_factory.mktemp("log") / "server.log")  # the harness's key
    yield server
    stop_server(server)


def test_lab_endpoint_needs_the_key(server):
    refused = httpx.post(f"{server.url}/v1/lab", json=LAB_BODY)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert httpx.post(f"{server.url}/v1/lab", json=LAB_BODY, headers=server.headers).status_code == 200


def test_the_page_itself_opens_without_the_key(server):
    """A page load cannot carry a key: "/" and /static/ are open; every /v1 route is not."""
    assert httpx.get(f"{server.url}/").status_code == 200
    assert httpx.get(f"{server.url}/static/style.css").status_code == 200
    assert httpx.get(f"{server.url}/v1/models").status_code == 401


def test_the_page_asks_for_the_key_and_keeps_it_in_the_tab(page, server):
    page.goto(f"{server.url}/")
    expect(page.locator("#alert")).to_contain_text("This server needs an API key")
    expect(page.locator("#api-key")).to_be_focused()
    page.errors.clear()  # the browser logs the 401s

    page.fill("#api-key", "wrong-key")
    page.keyboard.press("Tab")
    expect(page.locator("#alert")).to_contain_text("incorrect API key")
    page.errors.clear()

    page.fill("#api-key", server.api_key)
    page.keyboard.press("Tab")
    expect(page.locator("#model-info")).to_contain_text(server.model)
    expect(page.locator("#alert")).to_be_hidden()
    page.fill("#gen-max_tokens", "8")
    with page.expect_request("**/v1/completions") as request:
        page.click("#gen-run")
    assert request.value.headers["authorization"] == f"Bearer {server.api_key}"
    expect(page.locator("#gen-status")).to_contain_text("Finished")
    page.click("#tab-lab")
    expect(page.locator('#lab-table tr[data-label="the"] td[data-col="prob"]')).to_have_text("0.632")

    stored = page.evaluate("[sessionStorage.getItem('tokenstep.apiKey'), localStorage.length, document.cookie]")
    assert stored == [server.api_key, 0, ""]
    page.reload()  # the same tab remembers it
    expect(page.locator("#model-info")).to_contain_text(server.model)
    assert page.input_value("#api-key") == server.api_key
