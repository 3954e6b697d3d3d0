"""The studio in a real browser: started the way the README starts it, driven by Playwright in headless
Chromium (the system browser from Debian's `chromium` package), with every request outside localhost blocked.
Loads the Probe page on a fresh runs folder (one line about MiniLM's missing heads, no error), fills a mask and sees the predictions, opens the Attention page and finds the plotly
figures and the offline head view. Screenshots go to test-artifacts/browser/ (CI artefacts)."""
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts the studio and a headless browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"


def test_probe_and_attention_pages_in_chromium(tiny_run, tmp_path, tiny_run_steps, studio_browser):
    start, browser = studio_browser
    import engine
    from engine import probes

    ck = tiny_run / "checkpoints" / f"step-{tiny_run_steps[-1]}"
    text = "the [MASK] said the government would cut [MASK] ."
    expected = probes.fill_mask(engine.load(ck), text, top_k=5)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    studio = start(tiny_run.parent)
    url, blocked = studio.url, studio.blocked
    page = studio.open_page(browser)

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
    assert blocked == [], f"the studio tried to reach the network: {blocked[:5]}"
