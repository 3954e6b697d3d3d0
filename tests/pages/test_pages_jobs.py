"""The Jobs page (AppTest): lists queued / running / finished / failed jobs of a fake queue with counts, command,
log tail and error line; Cancel and Retry act on the queue. One real tiny job (under conftest's `fake_engine`)
checks that a failure shows its error line."""
import json
import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.jobs import TERMINAL, Jobs

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]

PAGE = str(REPO / "pages" / "8_Jobs.py")


def _start_time(pid: int) -> int:
    data = open(f"/proc/{pid}/stat").read()
    return int(data[data.rfind(")") + 2:].split()[19])


def job(root: Path, jid: str, status: str, argv: list, log: str = "", **kw) -> dict:
    run_dir = root / f"run-{jid}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.log").write_text(log)
    rec = {"id": jid, "name": f"job {jid}", "argv": argv + ["--out", str(run_dir)], "status": status, "pid": None, "pgid": None,
           "proc_start": None, "created": f"2026-01-01T10:0{len(jid)}:00", "started": None, "ended": None, "returncode": None,
           "error": None, "log": str(run_dir / "job.log"), "log_offset": 0, "run_dir": str(run_dir), "cancel_requested": False}
    rec.update(kw)
    return rec


@pytest.fixture
def queue_root(tmp_path):
    root = tmp_path / "runs"
    (root / ".jobs").mkdir(parents=True)
    me = os.getpid()  # a live process stands in for the running job (never cancelled here), so nothing is launched
    jobs = [job(root, "a1", "finished", ["pretrain", "--corpus", "bbc"], "step 10 loss 7.1\nstep 20 loss 6.5\ndone\n", returncode=0),
            job(root, "b2", "failed", ["finetune", "--model", "nowhere"], "loading\nerror: no model at nowhere; give a run folder\n",
                returncode=2, error="error: no model at nowhere; give a run folder"),
            job(root, "c3", "running", ["pretrain", "--steps", "600"], "step 1\n", pid=me, proc_start=_start_time(me)),
            job(root, "d4", "queued", ["features", "--model", "minilm"])]
    (root / ".jobs" / "queue.json").write_text(json.dumps({"version": 1, "jobs": jobs}))
    # the running job's run folder reports progress 300 / 600
    (root / "run-c3" / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "running", "total_steps": 600}))
    (root / "run-c3" / "metrics.jsonl").write_text(json.dumps({"step": 300, "loss": 5.0}) + "\n")
    return root


def app(root) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    return at


def test_lists_jobs_with_counts_logs_and_errors(queue_root):
    at = app(queue_root).run()
    assert not at.exception, at.exception
    counts = {m.label.split()[-1]: m.value for m in at.metric}
    assert counts == {"queued": "1", "running": "1", "finished": "1", "failed": "1", "cancelled": "0"}
    table = at.dataframe[0].value
    assert list(table["id"]) == ["d4", "c3", "b2", "a1"]  # newest first
    assert table.set_index("id").loc["c3", "progress"] == 50.0 and table.set_index("id").loc["a1", "progress"] == 100.0
    codes = [c.value for c in at.code]
    assert f"python -m engine pretrain --steps 600 --out {queue_root / 'run-c3'}" in codes
    assert "step 10 loss 7.1\nstep 20 loss 6.5\ndone" in codes  # the finished job's log tail
    assert [e.value for e in at.error] == ["error: no model at nowhere; give a run folder"]
    labels = {b.key: b.label for b in at.button}
    assert labels == {"cancel-d4": "Cancel", "cancel-c3": "Cancel", "retry-b2": "Retry", "retry-a1": "Retry"}


def test_cancel_and_retry(queue_root):
    at = app(queue_root).run()
    at.button(key="cancel-d4").click().run()
    assert not at.exception, at.exception
    assert any("d4: cancelled" in i.value for i in at.info)
    at.button(key="retry-b2").click().run()
    assert not at.exception, at.exception
    assert any("a retry of b2" in s.value for s in at.success)
    q = {j["id"]: j for j in json.loads((queue_root / ".jobs" / "queue.json").read_text())["jobs"]}
    assert q["d4"]["status"] == "cancelled"
    new = [j for j in q.values() if j["id"] not in ("a1", "b2", "c3", "d4")]
    assert len(new) == 1 and new[0]["argv"] == q["b2"]["argv"] and new[0]["status"] == "queued"  # c3 still holds the slot
    counts = {m.label.split()[-1]: m.value for m in at.metric}
    assert counts["cancelled"] == "1" and counts["queued"] == "1"


def test_status_filter(queue_root):
    at = app(queue_root).run()
    at.multiselect(key="jobs_filter").set_value(["failed"]).run()
    assert list(at.dataframe[0].value["id"]) == ["b2"]
    assert [e.label for e in at.expander] == ["❌ job b2 — failed"]


def test_a_real_failing_job_shows_its_error_line(tmp_path, fake_engine):
    root = tmp_path / "runs"
    q = Jobs(root, repo_root=fake_engine.repo)
    rec = q.submit(fake_engine.py("import sys; print('working'); print('error: the answer was 41; retry with 42', flush=True); sys.exit(2)"),
                   name="tiny", run_dir=root / "tiny")
    deadline = time.monotonic() + 30
    while q.get(rec["id"])["status"] not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.1)
    at = app(root).run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == ["error: the answer was 41; retry with 42"]
    assert any("working" in c.value for c in at.code)


def test_empty_queue(tmp_path):
    at = app(tmp_path / "nothing").run()
    assert not at.exception
    assert any("No jobs yet" in i.value for i in at.info)
