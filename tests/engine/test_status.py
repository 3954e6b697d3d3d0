"""One definition of what a run or job can be (engine/status.py): what each status means, the strings on disk, and
no other module spelling a status to compare it."""
from engine import jobs, runs
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, QUEUED, RUNNING, STATUSES, TERMINAL, UNREADABLE, status_of


def test_the_strings_on_disk_stay_the_same():
    assert runs.STATUSES == ("running", "finished", "failed", "cancelled")
    assert jobs.STATUSES == ("queued", "running", "finished", "failed", "cancelled")
    assert jobs.TERMINAL == ("finished", "failed", "cancelled")
    assert [s.name for s in (QUEUED, RUNNING, FINISHED, FAILED, CANCELLED, DEAD, UNREADABLE)] == list(STATUSES)


def test_what_each_status_means():
    assert [s.name for s in STATUSES.values() if s.active] == ["queued", "running"]
    assert [s.name for s in STATUSES.values() if s.resumable] == ["failed", "cancelled", "dead"]
    assert TERMINAL == ("finished", "failed", "cancelled", "dead", "unreadable") and not FINISHED.resumable
    assert status_of("unreadable") is UNREADABLE and not (UNREADABLE.active or UNREADABLE.resumable)  # a listing's row
    assert status_of("running") is RUNNING and FINISHED.shown == "✅ finished"
    odd = status_of("unknown")  # a damaged run.json's: neither waited for nor offered a Resume
    assert (odd.name, odd.active, odd.resumable) == ("unknown", False, False) and status_of(None).name == "None"
    assert status_of(["running"]) not in STATUSES.values()  # a damaged file's value that is not a string at all


def test_a_run_that_lost_its_process_reads_dead_and_resumable(tmp_path):
    import json
    d = tmp_path / "r"
    d.mkdir()
    info = {"kind": "pretrain", "status": "running", "pid": 2 ** 22 + 12345, "proc_start": 1}
    (d / "run.json").write_text(json.dumps(info))
    status = runs.effective_status(d)
    assert status == DEAD.name and status_of(status).resumable


# that no module compares a status by its name (spelled, or as RUNNING.name) is held by
# tests/repo/test_repo_rules.py::test_no_status_run_kind_or_objective_is_compared_by_name, which parses the code
