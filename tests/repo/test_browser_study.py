"""A study cancelled in a real browser, as a teacher would: the studio started as the README starts it, Playwright in
headless system Chromium, every request outside localhost blocked. A Table 5 study whose rows are each one real tiny
pre-training (until cancelled) and one fine-tune of it is queued one job at a time. On the Jobs page
the running BERT pre-training alone is cancelled (its one job, the teacher's click): its fine-tune is cancelled
unrun, the next row's pre-training starts. On the Ablations page the study says which job runs, "Cancel the study"
stops it (as it starts up), and the page then says "cancelled", offers Resume, and shows the measured Table 5 beside
the study's own table. No fine-tune ever started on a half-trained checkpoint."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _small_study(corpus: Path, cache: Path):
    """Table 5 at the smallest real settings the browser tests use, evaluated on BBC topic: a
    pre-training of many steps (it runs until cancelled, then saves its checkpoint)."""
    from engine import ablations as A
    study = A.get_study("pretraining-tasks", scale="classroom", evaluations=(A.BBC,))
    base = replace(study.base, corpus=str(corpus), vocab_size=400, hidden=32, heads=2, layers=1, max_positions=64,
                   seq_len=32, phase2_seq_len=None, batch_size=4, steps=100_000, save_every=100_000, eval_every=100_000,
                   num_threads=1, cache_dir=str(cache))
    return replace(study, base=base, budget="steps")


def _queue(root: Path) -> dict:
    """{job name: its queue record}."""
    from engine import jobs
    return {j["name"]: j for j in jobs.list_jobs(root=str(root))}


def _wait(pred, page, timeout_ms=60_000):
    for _ in range(timeout_ms // 250):
        value = pred()
        if value:
            return value
        page.wait_for_timeout(250)
    raise AssertionError("timed out waiting")


def test_cancelling_a_studys_pretraining_starts_no_finetune_and_the_page_says_cancelled(tmp_path, bbc_docs, studio_browser):
    from engine import ablations as A
    from engine import jobs
    start, browser = studio_browser
    root = tmp_path / "runs"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(d) for d in list(bbc_docs)[:60]) + "\n", encoding="utf-8")
    d = A.launch(_small_study(corpus, tmp_path / "cache"), runs_root=root, name="t5", reuse=False, log=lambda *a: None)
    keys = [j["key"] for j in A.read_study(d)["jobs"]]  # BERT, its fine-tune, No NSP, its fine-tune, ... (7 jobs)
    bert_pre, bert_ft, nonsp_pre = (f"t5: {k}" for k in keys[:3])
    try:
        studio = start(root)
        page = studio.open_page(browser)
        page.set_default_timeout(60_000)
        page.goto(studio.url)
        page.get_by_role("link", name="Jobs").first.click()
        # the BERT pre-training trains (its first metrics logged), then its one job is cancelled from the Jobs page
        _wait(lambda: any((d / "runs").glob("*/metrics.jsonl")), page)
        job = page.locator("[data-testid='stExpander']", has_text=f"{bert_pre} — running").first
        job.get_by_text(f"{bert_pre} — running").click()
        job.get_by_role("button", name="Cancel", exact=True).click()
        _wait(lambda: _queue(root)[bert_ft]["status"] == "cancelled", page)
        page.screenshot(path=str(tmp_path / "jobs-cancelled.png"), full_page=True)
        page.get_by_role("link", name="Ablations").first.click()
        page.get_by_text(f"running {keys[2]} (0 of 7 done)").first.wait_for()  # the next row goes on
        page.get_by_role("button", name="Cancel the study").click()
        page.get_by_text("cancelled (0 of 7 done)").first.wait_for()
        page.get_by_text("At classroom scale, as we measured it").first.wait_for()  # the measured Table 5 stays
        page.get_by_text("39.6 ± 2.4").first.wait_for()
        assert page.get_by_role("button", name="Resume the study").is_enabled()
        assert page.get_by_role("button", name="Cancel the study").is_disabled()
        page.screenshot(path=str(tmp_path / "study-cancelled.png"), full_page=True)
        q = _queue(root)
        assert [r["status"] for r in q.values()] == ["cancelled"] * 7
        assert q[bert_ft]["error"].startswith(f"not run: {bert_pre} was cancelled; resume the study with")
        assert [n for n, r in q.items() if r["started"]] == [nonsp_pre, bert_pre]  # no fine-tune ever started
        for job in A.read_study(d)["jobs"][1:]:
            if job["kind"] != "pretrain":
                assert not (d / job["out"] / "run.json").exists() and not (d / job["out"] / "eval.json").exists()
        out = d / A.read_study(d)["jobs"][0]["out"]  # the BERT pre-training stopped part way, its checkpoint saved
        assert json.loads((out / "run.json").read_text())["status"] == "cancelled"
        assert any(out.glob("checkpoints/step-*/COMPLETE"))
        assert studio.blocked == [], f"the studio tried to reach the network: {studio.blocked[:5]}"
    finally:
        for job in jobs.refresh(root=str(root)):  # a run left going by a failed step is stopped
            if job.get("status") in ("queued", "running"):
                jobs.cancel(job["id"], root=str(root))
