"""The playground page at `/`, in real headless Chromium against a real server: tokens stream in the
order a non-streamed request with the same seed produces them, a step's bars carry the trace's
numbers, Stop frees the engine, Compare streams its columns at once, and the Lab shows the seeds'
exercise as the server's `exercise()` computes it. Screenshots of each view go to tests/artifacts/."""

from __future__ import annotations

import dataclasses
import re
import time

import httpx
import pytest

from tests.browser.conftest import expect, screenshot
from tests.server.harness import metric, start_server, stop_server
from tokenstep.sampling.lab import exercise
from tokenstep.server.app import STATIC_DIR

SEEDS_LOGITS = [4, 3, 2, 1, 0.5]  # the seeds' hand exercise
SEEDS_LABELS = ["the", "a", "an", "and", "or"]
LONG_STREAM_TOKENS = 1900  # greedy on the tiny model runs ~1200 tokens before EOS: seconds of streaming
SETTLE_TIMEOUT_S = 10

# Records the token ids of every .tok added to an output, one list per mutation batch, as they arrive.
RECORD_ARRIVALS = """(selector) => {
  window.arrivals = [];
  new MutationObserver((records) => {
    const batch = [];
    for (const record of records) for (const node of record.addedNodes) {
      if (node.classList && node.classList.contains("tok")) batch.push(...node.dataset.tokenIds.split(" ").filter(Boolean));
    }
    if (batch.length) window.arrivals.push(batch);
  }).observe(document.querySelector(selector), { childList: true });
}"""


@pytest.fixture(scope="module")
def server(long_model, tmp_path_factory):
    server = start_server(long_model, tmp_path_factory.mktemp("log") / "server.log", api_key=None)
    yield server
    stop_server(server)


def open_view(page, server, view: str = "generate") -> None:
    page.goto(f"{server.url}/#{view}")
    expect(page.locator("#model-info")).to_contain_text(server.model)
    ids = page.locator("[id]").evaluate_all("nodes => nodes.map((node) => node.id)")
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    unlabelled = page.locator("input, select, textarea").evaluate_all(
        "nodes => nodes.filter((n) => !n.labels.length && !n.getAttribute('aria-label')).map((n) => n.outerHTML)")
    assert not unlabelled


def generate(page, **fields) -> dict:
    """Fill the Generate view's fields (API names), press Generate, and return the request body sent."""
    for name, value in fields.items():
        page.fill(f"#gen-{name}", str(value))
    with page.expect_request("**/v1/completions") as request:
        page.click("#gen-run")
    return request.value.post_data_json


def non_streamed(server, body: dict) -> dict:
    """The same request without streaming: what the stream must reproduce, token for token."""
    body = {key: value for key, value in body.items() if key not in ("stream", "stream_options")}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def format_prob(p: float) -> str:
    """The page's number format (stream.js formatProb)."""
    return f"{p:.3f}" if p == 0 or p >= 0.001 else f"{p:.1e}".replace("e-0", "e-")


def removed_by(candidate: dict) -> str:
    """The stage that removed a sampled (T > 0) step's candidate, as the step view names it."""
    if candidate["final_prob"] > 0:
        return "✓ kept"
    flags = [("kept_top_k", "top-k"), ("kept_top_p", "top-p"), ("kept_min_p", "min-p")]
    return next(f"✗ {name}" for flag, name in flags if not candidate[flag])


def engine_counts(server) -> tuple[float, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return metric(text, "tokenstep_requests_running"), metric(text, "tokenstep_kv_cache_blocks_used")


def wait_for_counts(server, wanted: tuple[float, float]) -> tuple[float, float]:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while (counts := engine_counts(server)) != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return counts


# ---- served files and the lab endpoint (plain HTTP: these run without a browser) ----

def test_page_and_static_files_are_served(server):
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(f"{server.url}/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    missing = httpx.get(f"{server.url}/static/nothing.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for path in STATIC_DIR.iterdir():  # no CDN, no build: every file is ours and names no other host
        assert not re.search(r"https?://", path.read_text()), path.name


def test_lab_endpoint_is_the_exercise(server):
    body = {"logits": SEEDS_LOGITS, "labels": SEEDS_LABELS, "temperature": 0.5, "top_k": 3, "top_p": 0.9, "min_p": 0.0}
    response = httpx.post(f"{server.url}/v1/lab", json=body)
    assert response.status_code == 200, response.text
    expected = dataclasses.asdict(exercise(**body))
    assert response.json() == {"object": "lab", **expected}
    the = response.json()["rows"][0]
    assert (the["label"], round(the["prob"], 3), round(the["temperature_prob"], 3)) == ("the", 0.632, 0.864)


@pytest.mark.parametrize("body, param", [
    ({"logits": [4, "x"]}, "logits[1]"),
    ({"logits": []}, "logits"),
    ({"logits": list(range(101))}, "logits"),
    ({"logits": [4, 3], "top_p": 0}, "top_p"),
    ({"logits": [4, 3], "temperature": -1}, "temperature"),
    ({"logits": [4, 3], "labels": ["a"]}, "labels"),
    ({"logits": [1e308, 1], "temperature": 0.001}, "temperature"),
    ({"logits": [4, 3], "top_n": 2}, "top_n"),
])
def test_lab_endpoint_refuses_bad_input(server, body, param):
    response = httpx.post(f"{server.url}/v1/lab", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_lab_endpoint_refuses_nan(server):
    response = httpx.post(f"{server.url}/v1/lab", content=b'{"logits": [4, NaN]}',
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "logits[1]"


# ---- the page ----

def test_generate_streams_tokens_in_order(page, server):
    open_view(page, server)
    page.evaluate(RECORD_ARRIVALS, "#gen-output")
    body = generate(page, seed=1234, max_tokens=48, temperature=0.9, top_p=0.95)
    expect(page.locator("#gen-status")).to_contain_text("Finished")
    assert (body["seed"], body["stream"], body["trace"], body["logprobs"]) == (1234, True, 10, 5)
    reference = non_streamed(server, body)
    reference_ids = [str(step["chosen_token_id"]) for step in reference["trace"]]
    arrivals = page.evaluate("window.arrivals")
    assert [token for batch in arrivals for token in batch] == reference_ids
    assert len(arrivals) > 1, "the tokens arrived all at once, not as a stream"
    assert "".join(page.locator("#gen-output .tok:not(.held)").all_text_contents()) == reference["text"]
    stats = page.locator("#gen-stats")
    assert re.fullmatch(r"\d+ ms", stats.locator("[data-stat=ttft]").inner_text())
    assert stats.locator("[data-stat=tokens]").inner_text() == str(len(reference_ids))
    assert float(stats.locator("[data-stat=rate]").inner_text()) > 0
    assert stats.locator("[data-stat=finish]").inner_text() == reference["finish_reason"]
    page.check("#gen-numbers")  # probabilities as numbers, not only as shading
    first = page.locator("#gen-output .tok").first
    assert re.fullmatch(r"[0-9.e-]+", first.get_attribute("data-p"))
    page.locator("#gen-output .tok").nth(6).click()
    expect(page.locator("#gen-step table.bars")).to_be_visible()
    screenshot(page, "generate")


def test_step_view_draws_the_trace(page, server):
    open_view(page, server)
    body = generate(page, seed=5, max_tokens=24, temperature=1, top_k=5, top_p=0.8, trace=8)
    expect(page.locator("#gen-status")).to_contain_text("Finished")
    token = page.locator("#gen-output .tok").nth(2)
    token.click()
    step = non_streamed(server, body)["trace"][int(token.get_attribute("data-first-step")) - 1]
    view = page.locator("#gen-step")
    expect(view.locator("h2")).to_have_text(f"Step {token.get_attribute('data-first-step')}")
    rows = view.locator("table.bars tbody tr")
    assert rows.count() == len(step["candidates"])
    reasons = []
    for row, candidate in zip(rows.all(), step["candidates"]):
        assert row.get_attribute("data-token-id") == str(candidate["token_id"])
        numbers = [cell.inner_text() for cell in row.locator(".barcell .num").all()]
        assert numbers == [format_prob(candidate[key]) for key in ("raw_prob", "scaled_prob", "final_prob")]
        chosen = candidate["token_id"] == step["chosen_token_id"]
        assert ("chosen" in row.get_attribute("class")) == chosen and (row.locator(".mark").inner_text() != "") == chosen
        reasons.append(row.locator(".removed-by").inner_text())
    assert reasons == [removed_by(candidate) for candidate in step["candidates"]]
    assert reasons.count("✗ top-k") >= len(step["candidates"]) - body["top_k"]
    width = rows.first.locator(".barcell.raw .fill").evaluate("node => node.getBoundingClientRect().width")
    assert width > 0
    assert f"nucleus size{step['nucleus_size']}" in view.locator("dl.params").inner_text().replace("\n", "")
    screenshot(page, "step", view)


def test_stop_cancels_the_stream_and_frees_the_engine(page, server):
    open_view(page, server)
    generate(page, temperature=0, max_tokens=LONG_STREAM_TOKENS)
    page.locator("#gen-output .tok").nth(9).wait_for()
    assert engine_counts(server)[0] == 1, "the request should still be running"
    screenshot(page, "streaming")
    page.click("#gen-cancel")
    expect(page.locator("#gen-status")).to_contain_text("Stopped after")
    assert wait_for_counts(server, (0, 0)) == (0, 0), server.log_text()[-2000:]
    shown = int(page.locator("#gen-stats [data-stat=tokens]").inner_text())
    assert 10 <= shown < LONG_STREAM_TOKENS
    assert page.locator("#gen-stats [data-stat=finish]").inner_text() == "stopped"
    expect(page.locator("#gen-run")).to_be_enabled()
    expect(page.locator("#gen-cancel")).to_be_disabled()


def test_keyboard_generates_and_opens_a_step(page, server):
    open_view(page, server)
    page.fill("#gen-max_tokens", "12")
    page.focus("#gen-prompt")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#gen-status")).to_contain_text("Finished")
    page.locator("#gen-output .tok[tabindex='0']").focus()  # one tab stop for all tokens (roving tabindex)
    assert page.locator("#gen-output .tok[tabindex='0']").count() == 1
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    focused = page.locator("#gen-output .tok:focus")
    assert focused.get_attribute("data-piece") == "2"
    expect(page.locator("#gen-step h2")).to_have_text(f"Step {focused.get_attribute('data-first-step')}")
    page.click("#tab-generate")
    page.keyboard.press("ArrowRight")  # tabs follow the arrow keys
    expect(page.locator("#tab-compare")).to_be_focused()
    expect(page.locator("#view-compare")).to_be_visible()


def test_compare_streams_the_columns_at_once(page, server):
    open_view(page, server, "compare")
    page.fill("#cmp-max-tokens", "160")
    page.fill("#cmp-seed", "3")
    page.evaluate("""() => {
      window.firsts = []; window.finishes = [];
      const columns = () => [...document.querySelectorAll("#cmp-columns .column")];
      new MutationObserver((records) => {
        for (const record of records) {
          const index = columns().indexOf(record.target.closest(".column"));
          if (record.type === "childList" && [...record.addedNodes].some((n) => n.classList?.contains("tok")))
            window.firsts[index] ??= performance.now();
          if (record.type === "attributes" && record.target.dataset.finish) window.finishes[index] = performance.now();
        }
      }).observe(document.getElementById("cmp-columns"), { childList: true, subtree: true, attributes: true,
                                                            attributeFilter: ["data-finish"] });
    }""")
    bodies = []
    page.on("request", lambda request: bodies.append(request.post_data_json) if "/v1/completions" in request.url else None)
    page.click("#cmp-run")
    expect(page.locator("#cmp-status")).to_contain_text("Done")
    assert [body["temperature"] for body in bodies] == [0, 0.7, 1.5]
    assert {(body["seed"], body["prompt"], body["max_tokens"]) for body in bodies} == {(3, "Once upon a time", 160)}
    firsts, finishes = page.evaluate("[window.firsts, window.finishes]")
    assert len(firsts) == len(finishes) == 3
    assert max(firsts) < min(finishes), "each column's first token should come before any column finishes"
    columns = page.locator("#cmp-columns .column").all()
    walks = [" ".join(column.locator(".tok").evaluate_all("nodes => nodes.map((n) => n.dataset.tokenIds)"))
             for column in columns]
    greedy = non_streamed(server, next(body for body in bodies if body["temperature"] == 0))
    assert walks[0].split() == [str(step["chosen_token_id"]) for step in greedy["trace"]]
    assert len(set(walks)) == 3, "different settings should walk different paths"
    for column in columns:
        expect(column.locator(".repetition")).to_contain_text(re.compile(r"repetition: \d+% of tokens"))
    columns[1].locator(".tok").nth(4).click()
    expect(page.locator("#cmp-step h2")).to_contain_text("Column 2: T=0.7 · top-p 0.9 · Step")
    screenshot(page, "compare")


def test_lab_shows_the_seeds_exercise(page, server):
    open_view(page, server, "lab")
    page.fill("#lab-logits", ", ".join(map(str, SEEDS_LOGITS)))
    page.fill("#lab-labels", ", ".join(SEEDS_LABELS))
    for name, value in [("temperature", 1), ("top_k", 3), ("top_p", 0.9), ("min_p", 0)]:
        page.fill(f"#lab-{name}", str(value))
    cell = lambda label, column: page.locator(f'#lab-table tr[data-label="{label}"] td[data-col="{column}"]')  # noqa: E731
    expect(cell("the", "prob")).to_have_text("0.632")
    expect(cell("an", "cumulative")).to_have_text("0.949")
    expect(cell("the", "top_k_prob")).to_have_text("0.665")
    expect(page.locator("#lab-line-nucleus")).to_contain_text("nucleus at p=0.9: {the, a, an}")
    expect(page.locator("#lab-line-top-k")).to_contain_text("top-3 set: {the, a, an}")
    page.fill("#lab-temperature", "0.5")  # the seeds' 0.866 is a slip: exactly 0.864
    expect(cell("the", "temperature_prob")).to_have_text("0.864")
    expect(page.locator("#lab-table thead")).to_contain_text("T=0.5")
    page.focus("#lab-top_k-range")  # the sliders work from the keyboard
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#lab-line-top-k")).to_contain_text("top-2 set: {the, a}")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#lab-line-top-k")).to_contain_text("top-3 set: {the, a, an}")
    screenshot(page, "lab")

    page.fill("#lab-labels", "the, a")  # the server's 400 is shown, naming the field
    expect(page.locator("#alert")).to_contain_text("labels has 2 entries for 5 logits (field: labels)")
    page.errors.clear()  # the browser logs the 400 response
    page.fill("#lab-labels", ", ".join(SEEDS_LABELS))
    expect(page.locator("#alert")).to_be_hidden()
    page.fill("#lab-logits", "4, 3, x")
    expect(page.locator("#alert")).to_contain_text('"x" is not a number')
