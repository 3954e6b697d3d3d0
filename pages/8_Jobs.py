"""Jobs: every queued, running, finished, failed and cancelled job of the runs folder, with its command,
progress, log tail and error line; Cancel and Retry. The list refreshes itself while jobs are active."""
import shlex

import pandas as pd
import streamlit as st

from engine import jobs as Q
from engine.status import FAILED, QUEUED, RUNNING, status_of
from engine.trackers import open_commands
from studio.common import guard, runs_root

SHOW_MAX = 40  # jobs shown with details (newest first); the table lists them all

st.title("Jobs")
st.caption("Every pre-training, fine-tuning, feature and ablation job runs here, one at a time, as its own process: "
           "closing the tab or reloading loses nothing.")

root = runs_root()
st.caption("Jobs started with `--report-to tensorboard,mlflow` also report to TensorBoard and MLflow; open them with "
           + " or ".join(f"`{c}`" for c in open_commands(root)))


def _cancel(job_id):
    try:
        rec = Q.cancel(job_id, root=root)
        st.session_state["jobs_msg"] = ("info", f"job {job_id}: {rec['status'] if rec else 'gone'}")
    except Exception as e:  # EngineError: one line saying what to do
        st.session_state["jobs_msg"] = ("error", f"could not cancel {job_id}: {e}")


def _retry(job_id):
    try:
        rec = Q.retry(job_id, root=root)
        st.session_state["jobs_msg"] = ("success", f"queued {rec['id']}: a retry of {job_id}")
    except Exception as e:
        st.session_state["jobs_msg"] = ("error", f"could not retry {job_id}: {e}")


def _progress(job) -> float | None:
    try:
        return Q.job_progress(job)
    except Exception:
        return None


def _argv(job) -> list:
    """The job's argv as strings (a refused job's argv may be anything the queue file held)."""
    argv = job.get("argv")
    return [str(a) for a in argv] if isinstance(argv, list) else [] if argv is None else [str(argv)]


def command_line(job) -> str:
    return shlex.join(["python", "-m", "engine", *_argv(job)])


def jobs_table(jobs) -> pd.DataFrame:
    rows = []
    for j in jobs:
        p = _progress(j)
        rows.append({"id": j["id"], "name": j.get("name"), "status": status_of(j['status']).shown,
                     "progress": None if p is None else round(100 * p, 1), "command": (_argv(j) or [""])[0],
                     "created": j.get("created"), "started": j.get("started"), "ended": j.get("ended"),
                     "error": j.get("error") or ""})
    return pd.DataFrame(rows, columns=["id", "name", "status", "progress", "command", "created", "started", "ended", "error"])


auto = st.toggle("Auto-refresh every 3 s", value=True, key="jobs_auto")


@st.fragment(run_every=3 if auto else None)
def job_list():
    msg = st.session_state.pop("jobs_msg", None)
    if msg:
        getattr(st, msg[0])(msg[1])
    jobs = None
    with guard("reading the job queue"):  # a refused queue file: its one line, nothing else
        jobs = Q.refresh(root)
        note = Q.queue_warning(root)  # damaged records set aside: where they are; the good jobs are listed below
        if note:
            st.warning(note)
    if jobs is None:
        return
    if not jobs:
        st.info(f"No jobs yet in {root}. Launch one from the Pre-train, Fine-tune, Features or Ablations page.")
        return
    counts = {s: sum(1 for j in jobs if j["status"] == s) for s in Q.STATUSES}
    cols = st.columns(len(counts))
    for c, (s, n) in zip(cols, counts.items()):
        c.metric(status_of(s).shown, n)
    show = st.multiselect("Show", list(Q.STATUSES), default=list(Q.STATUSES), key="jobs_filter")
    jobs = [j for j in jobs if j["status"] in show]
    st.dataframe(jobs_table(jobs), hide_index=True, width="stretch",
                 column_config={"progress": st.column_config.ProgressColumn("progress", min_value=0, max_value=100, format="%.0f%%")})
    for j in jobs[:SHOW_MAX]:
        label = f"{status_of(j['status']).icon} {j.get('name') or j['id']} — {j['status']}"
        with st.expander(label, expanded=status_of(j["status"]) in (RUNNING, FAILED) and j is jobs[0]):
            st.code(command_line(j), language="bash")
            p = _progress(j)
            if p is not None:
                st.progress(min(1.0, max(0.0, p)), text=f"{100 * p:.0f}%")
            st.caption(f"id {j['id']} · created {j.get('created') or '–'} · started {j.get('started') or '–'} · "
                       f"ended {j.get('ended') or '–'}" + (f" · exit code {j['returncode']}" if j.get("returncode") is not None else "")
                       + (f" · run folder {j['run_dir']}" if j.get("run_dir") else ""))
            if j.get("error"):
                st.error(j["error"])
            b1, b2, _ = st.columns([1, 1, 4])
            if status_of(j["status"]).active:
                b1.button("Cancel", key=f"cancel-{j['id']}", on_click=_cancel, args=(j["id"],))
            if j["status"] in Q.TERMINAL:
                b2.button("Retry", key=f"retry-{j['id']}", on_click=_retry, args=(j["id"],),
                          help="queue the same command again; a run it already started continues (--resume): a pre-training run from its last checkpoint, a fine-tune or features run keeps its finished trials, a finished one stays as it is")
            if status_of(j["status"]) is not QUEUED:
                tail = ""
                with guard("reading the log"):
                    tail = Q.tail_log(j["id"], 40, root=root)
                st.code(tail or "(empty log)", language="text")
    if len(jobs) > SHOW_MAX:
        st.caption(f"{len(jobs) - SHOW_MAX} older jobs are in the table only.")


job_list()
