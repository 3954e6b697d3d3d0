"""What a run or a job can be, each status described once.

| name      | written to                          | active | resumable | means                                            |
|-----------|-------------------------------------|--------|-----------|--------------------------------------------------|
| queued    | queue.json, study.json              | yes    | no        | waiting for its turn in the job queue            |
| running   | run.json, queue.json, study.json    | yes    | no        | a process is working on it                       |
| finished  | run.json, queue.json, study.json    | no     | no        | done: its results are on disk                    |
| failed    | run.json, queue.json, study.json    | no     | yes       | stopped by an error (its "error" says which)     |
| cancelled | run.json, queue.json, study.json    | no     | yes       | stopped by the user                              |
| dead      | never: read from a run folder       | no     | yes       | run.json says running but no process writes it   |
| unreadable| never: a run listing's, read        | no     | no        | its run.json cannot be read (the row says why)   |

`active`: a process will still change it (the job queue waits for it); the others are terminal (`terminal`:
nothing changes them until someone resumes or reruns them). `resumable`: it stopped before its end and the Resume
button (`--resume`) continues it from its last checkpoint. The strings on disk are the names above, written as `RUNNING.name`;
every caller asks the object (`status_of(name) is RUNNING`, `status_of(name).active`, `.resumable`, `.terminal`)
instead of comparing names, spelled or as `RUNNING.name` (tests/repo/test_repo_rules.py parses the code to hold it).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    name: str  # as run.json / queue.json / study.json hold it
    active: bool  # queued or running: a process will still change it
    resumable: bool  # stopped before the end: the Resume button continues it
    icon: str  # how the pages mark it
    means: str  # what it means, in a few words

    @property
    def terminal(self) -> bool:
        """Nothing will change it until someone resumes or reruns it."""
        return not self.active

    @property
    def shown(self) -> str:
        """Icon and name, as the pages show it ("✅ finished")."""
        return f"{self.icon} {self.name}"


QUEUED = Status("queued", True, False, "⏳", "waiting for its turn in the job queue")
RUNNING = Status("running", True, False, "🏃", "a process is working on it")
FINISHED = Status("finished", False, False, "✅", "done: its results are on disk")
FAILED = Status("failed", False, True, "❌", "stopped by an error")
CANCELLED = Status("cancelled", False, True, "🚫", "stopped by the user")
DEAD = Status("dead", False, True, "💀", "its process is gone without recording how it ended")
UNREADABLE = Status("unreadable", False, False, "⚠️", "its run.json cannot be read (the listing says why)")

STATUSES = {s.name: s for s in (QUEUED, RUNNING, FINISHED, FAILED, CANCELLED, DEAD, UNREADABLE)}
RUN_STATUSES = tuple(s.name for s in (RUNNING, FINISHED, FAILED, CANCELLED))  # what run.json holds
JOB_STATUSES = tuple(s.name for s in (QUEUED, RUNNING, FINISHED, FAILED, CANCELLED))  # queue.json, study.json
TERMINAL = tuple(s.name for s in STATUSES.values() if s.terminal)


def status_of(name) -> Status:
    """The Status named `name`; a name this code never writes (a damaged file's, "unknown") is neither active nor
    resumable, shown as itself; so is a value that is not a string at all (None, a damaged file's list)."""
    known = STATUSES.get(name) if isinstance(name, str) else None
    return known or Status(str(name), False, False, "❔", "not a status the studio writes")
