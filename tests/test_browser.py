"""The studio in a real browser: started the way the README starts it, driven by Playwright in headless
Chromium (the system browser from Debian's `chromium` package), with every request outside localhost blocked.
Loads the Probe page on a fresh runs folder (one line about MiniLM's missing heads, no error), fills a mask and sees the predictions, opens the Attention page and finds the plotly
figures and the offline head view. Screenshots go to test-artifacts/browser/ (CI artefacts)."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.slow  # starts the studio and a headless browser

REPO = Path(__file__).resolve().parents[1]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts" / "browser"
LOCAL = {"127.0.0.1", "localhost", "::1", "[::1]"}
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc, timeout: float = 45.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit did not answer at {url} within {timeout:.0f}s")


def test_probe_and_attention_pages_in_chromium(tiny_run, tmp_path, tiny_run_steps):
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Chromium is not installed at {CHROMIUM}; install it with `apt-get install -y chromium` (.ci/run does)")
    sync_playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed").sync_playwright
    import engine
    from engine import probes

    ck = tiny_run / "checkpoints" / f"step-{tiny_run_steps[-1]}"
    text = "the [MASK] said the government would cut [MASK] ."
    expected = probes.fill_mask(engine.load(ck), text, top_k=5)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, BERT_STUDIO_RUNS=str(tiny_run.parent), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    log = open(ARTIFACTS / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port),
                             "--server.headless", "true"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    blocked = []
    try:
        _wait_healthy(url, proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})

                def route(r):
                    host = urlparse(r.request.url).hostname or ""
                    if r.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL:
                        r.continue_()
                    else:
                        blocked.append(r.request.url)
                        r.abort()

                page.route("**/*", route)
                page.set_default_timeout(30_000)

                # Probe page on a fresh runs folder (typed into the sidebar of the landing page, then the Probe link):
                # only MiniLM, which has no MLM or NSP head, so one line says so and offers the build; no red error
                page.goto(url)
                runs_box = page.get_by_label("Runs folder", exact=True)
                runs_box.fill(str(tmp_path / "fresh-runs"))
                runs_box.press("Enter")
                page.locator("[data-testid='stSidebarNav'] a", has_text="Probe").first.click()
                page.get_by_text("No pre-training run with saved checkpoints").first.wait_for()
                page.get_by_role("button", name="Continue pre-training MiniLM (MLM + NSP)").wait_for()
                page.locator(".js-plotly-plot").first.wait_for()  # mask and watch: where the masked token looks
                assert page.locator("[data-testid='stException']").count() == 0
                assert page.locator("[data-testid='stAlertContentError']").count() == 0
                assert page.locator("[data-testid='stAlertContentInfo']", has_text="has no MLM or NSP head").count() == 1
                page.screenshot(path=str(ARTIFACTS / "probe_fresh.png"), full_page=True)

                # Probe page: point it at the tiny checkpoint, type a sentence with two masks
                page.get_by_role("textbox", name="…or a checkpoint / Hugging Face BERT folder").fill(str(ck))
                page.keyboard.press("Enter")
                page.get_by_text("P(IsNext)").first.wait_for()
                box = page.get_by_label("Sentence with one or more [MASK]")
                box.fill(text)
                box.press("Enter")
                second = page.locator("[data-testid='stMarkdownContainer']", has_text="[MASK] 2 →")
                second.first.wait_for()
                first = page.locator("[data-testid='stMarkdownContainer']", has_text="[MASK] 1 →").first.inner_text()
                tok, p = expected[0][0]
                assert f"{tok} {p:.3f}" in first
                tok2, p2 = expected[1][0]
                assert f"{tok2} {p2:.3f}" in second.first.inner_text()
                page.locator(".js-plotly-plot").first.wait_for()
                page.screenshot(path=str(ARTIFACTS / "probe.png"), full_page=True)

                # Attention page (MiniLM, real weights, is the default model)
                page.goto(url + "/Attention")
                page.locator(".js-plotly-plot").first.wait_for()
                assert page.locator(".js-plotly-plot").count() >= 1
                page.screenshot(path=str(ARTIFACTS / "attention.png"), full_page=True)
                page.get_by_role("tab", name="Head view").click()
                frame = page.frame_locator("iframe").first
                frame.locator("#bs-head-view[data-drawn='1']").wait_for()
                assert frame.locator(".bs-left .bs-tok").count() == frame.locator(".bs-right .bs-tok").count() > 5
                frame.locator(".bs-left .bs-tok").nth(2).hover()
                page.screenshot(path=str(ARTIFACTS / "head_view.png"), full_page=True)
                page.get_by_role("tab", name="Model view").click()
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 2")
                page.screenshot(path=str(ARTIFACTS / "model_view.png"), full_page=True)
            finally:
                browser.close()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()
    assert blocked == [], f"the studio tried to reach the network: {blocked[:5]}"
