"""Every page of the studio in a real browser on a fresh runs folder, as a newcomer first sees it (every request
outside localhost aborted): no page shows a traceback, cites a stop, an issue or a commit, or states a measured
time or accuracy other than the one table of measured facts holds (engine/measured.py)."""
import re

import pytest

from engine import measured

REPO_ARTIFACTS = __import__("pathlib").Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
pytestmark = pytest.mark.slow  # starts the studio and a headless browser

PAGES = ["", "Model", "Pre-train", "Fine-tune", "Features", "Probe", "Attention", "Ablations", "Jobs", "Compare", "Layers"]
HISTORY = re.compile(r"\bstop \d+|\bissue \d+|\bcommit [0-9a-f]{7,40}\b", re.I)
MINUTES = re.compile(r"\b\d+\.\d+ ?min\b")  # a measured time: estimates on this machine are rounded ("about 5 min")
ACCURACY = re.compile(r"(?<![\d.])0\.\d{3}(?!\d)")


def _settled(page):
    """Wait until the script has run (the status widget gone) and the page has a title."""
    page.locator("h1").first.wait_for()
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    page.wait_for_timeout(500)


def _known_texts() -> set:
    facts = list(measured.FACTS.values()) + [s.minutes for s in measured.STUDIES.values()] \
        + [lesson.minutes for lesson in measured.LESSONS.values()]
    return {m.text(d).replace(" min", "") for m in facts for d in (1, 2, 3)}


def test_every_page_on_a_fresh_machine_states_the_tables_figures_and_no_history(studio_browser, tmp_path):
    start, browser = studio_browser
    studio = start(tmp_path / "runs")
    page = studio.open_page(browser)
    known, seen = _known_texts(), {}
    for name in PAGES:
        page.goto(f"{studio.url}/{name.replace('-', '')}" if name else studio.url)
        _settled(page)
        text = page.inner_text("body")
        assert page.locator("[data-testid='stException']").count() == 0, f"a traceback on the {name or 'Start'} page"
        assert not HISTORY.findall(text), f"the {name or 'Start'} page cites {HISTORY.findall(text)}"
        for figure in MINUTES.findall(text) + ACCURACY.findall(text):
            number = re.sub(r" ?min$", "", figure)
            seen.setdefault(number, set()).add(name or "Start")
            assert number in known, f"the {name or 'Start'} page states {figure}, which engine/measured.py does not hold"
    # the Start page shows Table 5 as measured, beside the paper's, before anything has run
    page.goto(studio.url)
    _settled(page)
    t5 = measured.study("pretraining-tasks")
    page.get_by_text(t5.table["BERT (MLM + NSP)"]["BBC cloze span (F1)"]).first.wait_for()  # the tables drawn
    body = page.inner_text("body")
    (REPO_ARTIFACTS / "start-text.txt").write_text(body, encoding="utf-8")
    assert t5.minutes.where in body and t5.table["BERT (MLM + NSP)"]["BBC cloze span (F1)"] in body
    assert studio.blocked == [], f"the studio tried to reach the network: {studio.blocked[:5]}"
