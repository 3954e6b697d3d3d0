"""The guided first class in a real browser, as a person would walk it: the studio started the way the README
starts it on a fresh runs folder, Playwright in headless system Chromium, every request outside localhost blocked,
only clicks and typing (no page URLs after the first). Start page -> step 1 (Model page) -> step 2 (Pre-train page
with the run name filled in; the steps, batch, vocabulary and corpus set small through the form's own fields so
the run takes seconds; Launch; the queued run is shown at once and followed to "finished") -> step 3 (Probe page on
that run's checkpoint; a click masks a WordPiece) -> step 4 (Ablations page, New study tab, Table 5 at classroom
scale selected; not launched: the study itself takes 20-30 minutes). The Start page's check marks are read after
each step. A screenshot per step goes to the pytest tmp folder."""
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _small_corpus(path: Path, bbc_docs, n_docs: int = 60) -> Path:
    """The first BBC articles as a plain-text corpus (blank lines between documents): a run on it takes seconds."""
    path.write_text("\n\n".join("\n".join(d) for d in list(bbc_docs)[:n_docs]) + "\n", encoding="utf-8")
    return path


def test_guided_first_class_by_clicks(tmp_path, bbc_docs, studio_browser):
    start, browser = studio_browser
    root = tmp_path / "runs"
    root.mkdir()
    corpus = _small_corpus(tmp_path / "corpus.txt", bbc_docs)
    shots = tmp_path / "screens"
    shots.mkdir()
    studio = start(root)
    url, blocked = studio.url, studio.blocked
    page = studio.open_page(browser)
    page.set_default_timeout(60_000)
    try:
        def start_page():
            page.get_by_role("link", name="Start").first.click()
            page.get_by_text("Your first class").wait_for()

        def marks():
            page.get_by_text("What the paper found").wait_for()
            return [h.inner_text().strip() for h in page.locator("h3").all() if h.inner_text().strip() in ("1", "2", "3", "4", "✅")]

        # the landing page: the guided class and the paper's Table 5 before anything has run
        page.goto(url)
        page.get_by_text("Your first class").wait_for()
        page.get_by_text("BERT-BASE").filter(visible=True).first.wait_for()  # (a collapsed expander holds "BERT-base" too)
        assert marks() == ["1", "2", "3", "4"]
        page.screenshot(path=str(shots / "0-start.png"), full_page=True)

        # step 1: look inside a real model
        page.get_by_role("button", name="Open the Model page").click()
        page.get_by_text("Where next").wait_for()
        page.get_by_text("Parameters").first.wait_for()
        page.screenshot(path=str(shots / "1-model.png"), full_page=True)
        start_page()
        assert marks()[0] == "✅"

        # step 2: pre-train a tiny BERT, kept tiny through the form's own fields
        page.get_by_role("button", name="Set up the classroom run").click()
        name = page.get_by_role("textbox", name="Run name")
        name.wait_for()
        assert name.input_value() == "first-bert"
        page.get_by_role("combobox", name="Corpus").first.click()
        page.get_by_role("option", name="a path on this machine").click()
        page.get_by_role("textbox", name="Corpus path").fill(str(corpus))
        for label, value in (("Steps", "30"), ("Batch size", "4"), ("Vocabulary size", "1000"),
                             ("Checkpoint every (steps)", "30"), ("Evaluate every (steps)", "15")):
            box = page.get_by_role("spinbutton", name=label, exact=True)
            box.fill(value)
            box.press("Tab")
        page.get_by_role("button", name="Launch").click()
        page.get_by_text("Launched").first.wait_for()
        page.get_by_text("first-bert").first.wait_for()  # queued at once, then the run itself
        page.screenshot(path=str(shots / "2-pretrain-launched.png"), full_page=True)
        # visible only: the jobs grid keeps a hidden copy of its cells, which `.first` could pick and wait on
        page.locator("text=✅ finished >> visible=true").first.wait_for(timeout=300_000)
        page.locator(".js-plotly-plot").first.wait_for()
        page.screenshot(path=str(shots / "2-pretrain-finished.png"), full_page=True)
        start_page()
        assert marks()[:2] == ["✅", "✅"]

        # step 3: probe it; a click masks a WordPiece
        page.get_by_role("button", name="Probe your model").click()
        page.get_by_text("Mask and watch").first.wait_for()
        page.get_by_text("The model sees:").first.wait_for()
        assert "first-bert" in page.get_by_text("first-bert").first.inner_text()
        before = page.get_by_text("The model sees:").first.inner_text()
        assert before.count("[MASK]") == 1
        page.locator("[data-testid='stButtonGroup'] button").first.click()
        page.wait_for_function("[...document.querySelectorAll('p')].some(p => p.innerText.startsWith('The model sees:') "
                               "&& p.innerText.split('[MASK]').length === 3)")
        page.get_by_text("Predictions at the masked pieces").first.wait_for()
        page.screenshot(path=str(shots / "3-probe.png"), full_page=True)
        start_page()
        assert marks()[:3] == ["✅", "✅", "✅"]

        # step 4: Table 5 at classroom scale, set up on the Ablations page
        page.get_by_role("button", name="Set up the Table 5 study").click()
        page.get_by_role("tab", name="New study").click()
        page.get_by_text("Table 5").first.wait_for()
        assert page.get_by_label("Classroom scale", exact=False).is_checked()  # the Scale radio's first option
        page.get_by_text("The paper's finding").first.wait_for()
        # the classroom Table 5 compares at equal FLOPs: the budget box shows it, the job list LTR's 2,840 steps
        budget = page.get_by_role("combobox", name="Compare the variants at equal").first
        budget.wait_for()
        assert budget.input_value().startswith("FLOPs"), budget.input_value()
        page.get_by_text("Job commands").first.click()
        code = page.locator("pre", has_text="--objective ltr").first
        code.wait_for()
        ltr = [line for line in code.inner_text().splitlines() if "--objective ltr" in line]
        assert ltr and "--steps 2840" in ltr[0], ltr
        page.screenshot(path=str(shots / "4-table5.png"), full_page=True)

        # beyond the class: the Attention page's per-head statistics grid opens the head that is clicked
        page.get_by_role("link", name="Attention").first.click()
        page.get_by_role("tab", name="Head statistics").click()
        grid = page.locator(".js-plotly-plot", has_text="click a head to open it").first
        grid.wait_for()
        opened = page.get_by_text("Layer 1, head 1 on this input").first
        opened.wait_for()
        point = grid.locator(".scatterlayer .point").nth(13)  # layer 2, head 2 of MiniLM's 6 x 12 grid
        point.scroll_into_view_if_needed()
        box = point.bounding_box()  # plotly takes clicks on its drag layer above the markers
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.get_by_text("Layer 2, head 2 on this input").first.wait_for()
        page.screenshot(path=str(shots / "5-head-statistics.png"), full_page=True)
    finally:
        from engine import jobs
        for job in jobs.refresh(root=str(root)):  # a run left going by a failed step is stopped
            if job.get("status") in ("queued", "running"):
                jobs.cancel(job["id"], root=str(root))
    assert sorted(p.name for p in shots.iterdir()) == ["0-start.png", "1-model.png", "2-pretrain-finished.png",
                                                        "2-pretrain-launched.png", "3-probe.png", "4-table5.png",
                                                        "5-head-statistics.png"]
    assert blocked == [], f"the studio tried to reach the network: {blocked[:5]}"


def _prepared_runs_folder(tmp_path: Path, bbc_docs) -> Path:
    """A runs folder as `class prepare` leaves it, made small: the class's run `first-bert` and the reference run are
    one tiny real run (copied; the reference's run.json records the classroom recipe's settings, as `class status`
    checks), the cache record points at that run's real data folder, the probe-ready model is a fake finished run
    recording its recipe's settings; plus `live-bert`, a running run whose writer is this test (it holds the run
    lock)."""
    import json
    import shutil

    from engine import classroom
    from engine.pretraining.run import PretrainConfig, pretrain
    from engine.runs import mark_complete, write_run_json
    root = tmp_path / "runs"
    corpus = _small_corpus(tmp_path / "corpus.txt", bbc_docs, n_docs=30)
    pretrain(PretrainConfig.classroom(corpus=str(corpus), vocab_size=400, hidden=32, heads=2, layers=1, max_positions=64, seq_len=32,
                            phase2_seq_len=None, batch_size=4, steps=4, save_every=4, eval_every=4, quiet=True,
                            num_threads=1, cache_dir=str(tmp_path / "cache"), out=str(root / classroom.REFERENCE_RUN)))
    shutil.copytree(root / classroom.REFERENCE_RUN, root / "first-bert")
    (root / "first-bert" / "run.lock").unlink(missing_ok=True)
    part = {p.key: p for p in classroom.parts(root)}
    write_run_json(root / classroom.REFERENCE_RUN, config=classroom.recipe_config(part["reference"].argv))
    data = sorted(str(p) for p in (tmp_path / "cache").glob("prepared-mlm_nsp-T*"))  # the tiny run's own data: it opens
    (root / classroom.STATE_DIR).mkdir()
    (root / classroom.STATE_DIR / "cache.json").write_text(json.dumps({"data": data}))
    ready = root / "minilm-continued"
    write_run_json(ready, kind="pretrain", status="finished", total_steps=4,
                   config=classroom.recipe_config(part["probe_ready"].argv))
    (ready / "checkpoints" / "step-4").mkdir(parents=True)
    mark_complete(ready / "checkpoints" / "step-4", step=4)
    write_run_json(root / "live-bert", kind="pretrain", status="running", total_steps=240, config={"objective": "mlm+nsp"})
    (root / "live-bert" / "metrics.jsonl").write_text(json.dumps({"step": 0, "split": "train", "loss": 9.0}) + "\n")
    return root


def test_start_page_walks_its_four_steps_on_a_prepared_runs_folder(tmp_path, bbc_docs, studio_browser):
    """Prepared: the Prepare panel says ready; step 2 is checked by the class's own finished run; the Pre-train
    page's table follows a running run as its live view does; step 3 is not checked until a model was probed, then
    is; step 4's button lands on the New study tab with Table 5 at classroom scale, no tab clicked."""
    start, browser = studio_browser
    import json

    from engine.runs import RunLock, mark_complete
    root = _prepared_runs_folder(tmp_path, bbc_docs)
    lock = RunLock(root / "live-bert").acquire()  # live-bert is running: its writer (this test) is alive
    try:
        studio = start(root)
        url, blocked = studio.url, studio.blocked
        page = studio.open_page(browser)
        page.set_default_timeout(60_000)

        def marks():
            page.get_by_text("What the paper found").wait_for()
            return [h.inner_text().strip() for h in page.locator("h3").all() if h.inner_text().strip() in ("1", "2", "3", "4", "✅")]

        def start_page():
            page.get_by_role("link", name="Start").first.click()
            page.get_by_text("Your first class").wait_for()

        page.goto(url)
        page.get_by_text("This machine is ready for the class.").wait_for(state="attached")  # (in a closed expander)
        assert marks() == ["1", "✅", "3", "4"]

        # step 2's page: the runs table moves with the live view of the running run
        page.get_by_role("button", name="Set up the classroom run").click()
        page.get_by_role("textbox", name="Run name").wait_for()
        assert page.get_by_role("textbox", name="Run name").input_value() == "first-bert-2"
        table = page.locator("[data-testid='stDataFrame']").first
        table.wait_for()
        page.locator("[data-testid='stDataFrame'] >> text=0 / 240").first.wait_for(state="attached")
        ck = root / "live-bert" / "checkpoints" / "step-80"
        ck.mkdir(parents=True)
        mark_complete(ck, step=80)
        with open(root / "live-bert" / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": 80, "split": "train", "loss": 7.0}) + "\n")
        page.locator("[data-testid='stDataFrame'] >> text=80 / 240").first.wait_for(state="attached", timeout=30_000)
        page.screenshot(path=str(tmp_path / "prepared-pretrain.png"), full_page=True)

        # step 3: not checked before a model is probed; the button probes the class's own run
        start_page()
        assert marks()[2] == "3"
        page.get_by_role("button", name="Probe your model").click()
        page.get_by_text("The model sees:").first.wait_for()
        start_page()
        assert marks()[:3] == ["1", "✅", "✅"]

        # step 4: the New study tab is open, with Table 5 at classroom scale (no tab clicked)
        page.get_by_role("button", name="Set up the Table 5 study").click()
        assert page.get_by_role("tab", name="New study").get_attribute("aria-selected") == "true"
        scale = page.get_by_label("Classroom scale", exact=False)
        scale.wait_for()
        assert scale.is_visible() and scale.is_checked()
        page.screenshot(path=str(tmp_path / "prepared-table5.png"), full_page=True)
    finally:
        lock.release()
    assert blocked == [], f"the studio tried to reach the network: {blocked[:5]}"
