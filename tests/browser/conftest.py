"""Browser test fixtures: one real `tokenstep serve` per module on a tiny random checkpoint, and
Debian's headless Chromium driven by Playwright (its driver only: `playwright install` is never run).

A test that needs the browser skips, saying why, only when /usr/bin/chromium or the playwright
package is missing (`make install` installs both where it can)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; Playwright's own browser download is not used
# Without the background-networking flags Chromium's own connections are refused on these machines,
# and each refusal slows the browser down.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1366, "height": 768}  # the laptop screen the page must be readable on
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"  # tests/artifacts/, gitignored
LONG_CONTEXT = 2048  # room for a stream long enough to press Stop in (the tiny model decodes ~400 tokens/s)


@pytest.fixture(scope="module")
def long_model(checkpoint_factory, tmp_path_factory) -> Path:
    """The tiny llama checkpoint with a 2048-token context window (rotary positions need no new weights)."""
    source, _ = checkpoint_factory("llama-gqa-untied")
    directory = tmp_path_factory.mktemp("browser") / "tiny-llama"
    shutil.copytree(source, directory)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = LONG_CONTEXT
    config_path.write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    """A headless Chromium with a fresh profile directory, for the whole module."""
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed ({CHROMIUM} is missing; `make install` installs it "
                    "where apt-get works)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport=VIEWPORT)
        context.set_default_timeout(30_000)
        yield context
        context.close()


@pytest.fixture
def page(browser_context):
    """A fresh tab; the test fails if the page logs a JavaScript error it did not clear (`page.errors`)."""
    page = browser_context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    yield page
    page.close()
    assert not page.errors, page.errors


def screenshot(page, name: str, locator=None) -> Path:
    """Save a PNG under tests/artifacts/ (the whole viewport, or one element)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"playground-{name}.png"
    (locator or page).screenshot(path=str(path))
    return path


def expect(target):
    """Playwright's auto-waiting assertions (imported late: without playwright, the HTTP tests still run)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)
