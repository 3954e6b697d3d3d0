"""One definition of what a run or job can be (engine/status.py): what each status means, the strings on disk, and
no other module spelling a status to compare it."""
import re
from pathlib import Path

from engine import jobs, runs
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, STATUSES, TERMINAL, status_of

REPO = Path(__file__).resolve().parents[2]


def test_the_strings_on_disk_stay_the_same():
    assert runs.STATUSES == ("running", "finished", "failed", "cancelled")
    assert jobs.STATUSES == ("queued", "running", "finished", "failed", "cancelled")
    assert jobs.TERMINAL == ("finished", "failed", "cancelled")
    assert [s.name for s in (QUEUED, RUNNING, FINISHED, FAILED, CANCELLED, DEAD)] == list(STATUSES)


def test_what_each_status_means():
    assert [s.name for s in STATUSES.values() if s.active] == ["queued", "running"]
    assert [s.name for s in STATUSES.values() if s.resumable] == ["failed", "cancelled", "dead"]
    assert TERMINAL == ("finished", "failed", "cancelled", "dead") and not FINISHED.resumable
    assert status_of("running") is RUNNING and FINISHED.shown == "✅ finished"
    odd = status_of("unknown")  # a damaged run.json's: neither waited for nor offered a Resume
    assert (odd.name, odd.active, odd.resumable) == ("unknown", False, False) and status_of(None).name == "None"


def test_a_run_that_lost_its_process_reads_dead_and_resumable(tmp_path):
    import json
    d = tmp_path / "r"
    d.mkdir()
    info = {"kind": "pretrain", "status": "running", "pid": 2 ** 22 + 12345, "proc_start": 1}
    (d / "run.json").write_text(json.dumps(info))
    status = runs.effective_status(d)
    assert status == DEAD.name and status_of(status).resumable


PENDING = set()  # every module asks engine.status
LITERAL = re.compile(r"""(==|!=|\bin|\bnot in) \(?["'](queued|running|finished|failed|cancelled|dead)["']""")


def test_no_module_compares_a_status_string():
    found = [f"{p.relative_to(REPO)}:{i}" for folder in ("engine", "studio", "pages") for p in sorted((REPO / folder).rglob("*.py"))
             if str(p.relative_to(REPO)) not in PENDING | {"engine/status.py"}
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if LITERAL.search(line)]
    assert not found, f"{found}: compare with engine.status (RUNNING.name, status_of(name).active) instead"
