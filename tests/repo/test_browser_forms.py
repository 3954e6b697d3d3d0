"""The Pre-train form in a real browser (headless Chromium, every request outside localhost blocked): Enter in its
boxes queues nothing (an st.form submitted on Enter, and its submit button was Launch), and a Steps value beyond the
form's range shows its one line beside a disabled Launch (a number box with bounds refused it with a small red mark
and sent nothing, so Launch did nothing)."""
import pytest

pytestmark = pytest.mark.slow  # starts the studio and a headless browser


def _settled(page):
    page.wait_for_timeout(300)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    page.wait_for_timeout(300)


def test_enter_queues_nothing_and_an_out_of_range_step_count_disables_launch(tmp_path, studio_browser):
    from engine import jobs
    start, browser = studio_browser
    root = tmp_path / "runs"
    studio = start(root)
    page = studio.open_page(browser)
    try:
        page.goto(f"{studio.url}/Pretrain")
        page.get_by_text("New pre-training run").first.wait_for()
        _settled(page)
        name = page.get_by_role("textbox", name="Run name")
        name.fill("typed-then-enter")
        name.press("Enter")
        _settled(page)
        steps = page.get_by_role("spinbutton", name="Steps", exact=True)
        steps.fill("40")
        steps.press("Enter")
        _settled(page)
        assert jobs.list_jobs(root) == [], "Enter in a box queued a run"
        assert page.get_by_text("Launched").count() == 0
        launch = page.get_by_role("button", name="Launch")
        assert launch.is_enabled()

        steps.fill("999999999999")
        steps.press("Enter")
        line = page.get_by_text("'Steps' 999,999,999,999 is above 10,000,000")
        line.first.wait_for()
        assert launch.is_disabled()
        assert "lower it" in line.first.inner_text()
        assert jobs.list_jobs(root) == []
        assert page.locator("[data-testid='stException']").count() == 0
        assert studio.blocked == [], f"the studio tried to reach the network: {studio.blocked[:5]}"
    finally:  # a run queued by a regression is not left training after the test
        for job in jobs.list_jobs(root):
            jobs.cancel(job["id"], root=root)
