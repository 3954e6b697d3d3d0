"""Plain helpers several test modules share (fixtures live in tests/conftest.py): `wait_for`, `one_line`, and
`FakeQueue`, the job queue's interface as engine.classroom uses it, in memory."""
import time

from engine.errors import EngineError
from engine.status import CANCELLED, QUEUED, status_of


def wait_for(pred, timeout: float = 30.0, step: float = 0.05):
    """`pred()`'s first true value, asked every `step` seconds; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out waiting")


def one_line(e) -> str:
    """The message of a raised error (a pytest ExceptionInfo), checked to be one non-empty line."""
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


class FakeQueue:
    """The job queue's interface as engine.classroom uses it (submit, list_jobs, cancel), in memory; `cancelled`
    records (job id, its status when cancelled)."""

    def __init__(self):
        self.jobs, self.cancelled = [], []

    def submit(self, argv, name=None, run_dir=None):
        for j in self.jobs:
            if j["run_dir"] == str(run_dir) and status_of(j["status"]).active:
                raise EngineError(f"run folder {run_dir} already has job {j['id']} {j['status']}; wait for it")
        job = {"id": f"j{len(self.jobs)}", "argv": list(argv), "name": name, "run_dir": str(run_dir),
               "status": QUEUED.name}
        self.jobs.append(job)
        return dict(job)

    def list_jobs(self):
        return [dict(j) for j in reversed(self.jobs)]

    def cancel(self, job_id):
        job = next(j for j in self.jobs if j["id"] == job_id)
        self.cancelled.append((job_id, job["status"]))
        job["status"] = CANCELLED.name
        return dict(job)
