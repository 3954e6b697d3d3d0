"""Process liveness from /proc: is a pid (or a process group) still alive, and is it the same process?

Used by the run folders (`engine.runs`: is a run's writer still alive?) and the job queue (`engine.jobs`: is a
job's runner or its engine child still alive?). A pid alone is not an identity (the kernel reuses pids), so a
process is identified by its pid and its start time (`proc_start_time`). Standard library only; Linux/POSIX
(/proc, process groups), with a kill(0) fallback where there is no /proc.
"""
import os


def proc_stat(pid: int):
    """(state, pgrp, starttime) from /proc/<pid>/stat, or None when there is no such process or no /proc."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # fields after "pid (comm)": state ppid pgrp ...
    try:
        return rest[0], int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None


def proc_start_time(pid) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot); with the pid it identifies a process uniquely."""
    st = proc_stat(pid)
    return st[2] if st else None


def pid_alive(pid, start_time=None) -> bool:
    """True if process `pid` exists and is not a zombie (and, given `start_time`, is that same process)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return False
    st = proc_stat(pid)
    if st is None:
        return not os.path.isdir("/proc/self")  # no /proc: trust kill(0); /proc but no entry: just exited
    if st[0] in ("Z", "X"):
        return False
    if start_time is not None and st[2] != start_time:
        return False  # the pid was reused
    return True


def proven_alive(pid, start_time, pgid=None) -> bool:
    """True if `pid` is alive and provably the process we started: its kernel start time equals the recorded one
    (and, given `pgid`, it is still in that process group). Without /proc (no start times) kill(0) is all there is."""
    if not pid:
        return False
    if not os.path.isdir("/proc/self"):
        return pid_alive(pid)
    if start_time is None or not pid_alive(pid, start_time):
        return False
    st = proc_stat(pid)
    return st is not None and (pgid is None or st[1] == int(pgid))


def killpg(pgid, sig) -> None:
    """Send `sig` to process group `pgid`; a group that is gone (or not ours) is left alone."""
    try:
        if pgid and int(pgid) > 1:
            os.killpg(int(pgid), sig)
    except (ProcessLookupError, PermissionError):
        pass
