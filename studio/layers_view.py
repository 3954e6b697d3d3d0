"""The Layers page's two tabs: probes per layer and head roles over training (engine.layers, engine.head_roles).

Each tab has a form that queues `python -m engine layers ... --out RUN` (with `--heads` for head roles) through the
job queue, never computing in the Streamlit script, and a results part that reads a finished (or running) run's
eval.json: per-layer curves with their controls, tasks by depth and the layer x step heatmap; each head's role, its
shares over the steps as small multiples, when its role settled and Clark et al.'s findings beside ours. Both export
CSV and a self-contained HTML report.
"""
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from engine import cli
from engine import jobs as Q
from engine import runs as R
from engine.commands import LAYERS, kind_of
from engine.errors import EngineError
from engine.records import read_eval
from engine.status import status_of
from studio import layer_figures as LF
from studio.common import chart_config, follow_queued_run, guard, model_picker

ONE_MODEL, A_RUN = "one model", "every checkpoint of a run"


def task_choices() -> dict:
    """--task value -> what it probes, for the task picker."""
    from engine.layer_tasks import SENTENCE_TASKS, TOKEN_FILE_TASK, token_task_names
    from engine.tasks.registry import BUILTINS
    out = {n: f"{BUILTINS[n].description} (per word)" for n in token_task_names() if n in BUILTINS}
    out[TOKEN_FILE_TASK] = "your own word-label files (a word and its label per line, a blank line between sentences)"
    out.update({n: f"{d} (per sentence)" for n, d in SENTENCE_TASKS.items()})
    return out


def model_source(root: Path, prefix: str) -> tuple:
    """(model, checkpoints) from the page's widgets: one model, or every checkpoint of a run under the runs folder."""
    source = st.radio("Probe", (ONE_MODEL, A_RUN), key=f"{prefix}_source", horizontal=True,
                      help="every checkpoint of a run shows when during pre-training each thing appears")
    if source == ONE_MODEL:
        return model_picker("Model", key=f"{prefix}_model"), None
    runs = [r["name"] for r in R.list_runs(root) if r.get("checkpoint_step") is not None]
    if not runs:
        st.info("No run with checkpoints in this runs folder yet: pre-train one on the Pre-train page.")
        return None, None
    return str(Path(root) / st.selectbox("Run", runs, key=f"{prefix}_run")), "all"


def launch(root: Path, prefix: str, name: str, fields: dict, what: str) -> None:
    """Queue `python -m engine layers` with `fields` (LayersConfig) into the run folder `name`."""
    from engine.checkpoint import check_model
    from engine.layers import LayersConfig
    check_model(fields["model"], any_encoder=True)  # a model that is not there: its one-line error, no job queued
    run_dir = R.resolve_run_dir(root, name.strip())
    if (run_dir / R.RUN_JSON).exists():
        raise EngineError(f"run {name} already exists in {root}; pick another name")
    cfg = LayersConfig(**fields, out=str(run_dir))
    rec = Q.submit(cli.argv(cfg), name=f"{what} {run_dir.name}", run_dir=str(run_dir), root=root)
    st.session_state[f"{prefix}_show"], st.session_state[f"{prefix}_show_job"] = run_dir.name, rec["id"]
    st.session_state.pop(f"{prefix}_default_name", None)
    st.success(f"Queued job {rec['id']} for run **{run_dir.name}**; its results appear below when it finishes.")


def run_name(prefix: str, stem: str) -> str:
    if f"{prefix}_default_name" not in st.session_state:
        st.session_state[f"{prefix}_default_name"] = time.strftime(f"{stem}-%Y%m%d-%H%M%S")
    return st.text_input("Run name", value=st.session_state[f"{prefix}_default_name"], key=f"{prefix}_name")


def probe_form(root: Path) -> None:
    """The probes' form: model or run, tasks, their data, probe type, Launch."""
    from engine.corpora import builtin_corpora
    from engine.layer_tasks import SENTENCE_TASKS, TOKEN_FILE_TASK
    model, checkpoints = model_source(root, "ly")
    choices = task_choices()
    tasks = st.multiselect("Tasks", list(choices), default=["wnut16"], key="ly_tasks",
                           format_func=lambda k: f"{k}: {choices[k]}")
    fields = {}
    if TOKEN_FILE_TASK in tasks:
        c1, c2 = st.columns(2)
        fields["train"] = c1.text_input("Train file (your words and labels)", key="ly_train").strip() or None
        fields["dev"] = c2.text_input("Dev file", key="ly_dev").strip() or None
    if set(tasks) & set(SENTENCE_TASKS):
        fields["corpus"] = st.selectbox("Corpus the sentence tasks are made from", builtin_corpora(), key="ly_corpus")
    c1, c2 = st.columns(2)
    probe = c1.radio("Probe", ("linear", "mlp"), key="ly_probe", horizontal=True,
                     help="linear: softmax regression; mlp: one hidden layer (finds more, and memorises more: watch the control)")
    max_train = c2.number_input("Training sentences or texts per task", 100, 100_000, 2000, step=500, key="ly_max_train")
    name = run_name("ly", "layers")
    if st.button("Launch", type="primary", key="ly_launch", disabled=not (tasks and model)):
        with guard("launching the probes"):
            launch(root, "ly", name, dict(model=model, checkpoints=checkpoints, task=tuple(tasks), probe=probe,
                                          max_train=int(max_train), **fields), "layers")


def heads_form(root: Path) -> None:
    """The head roles' form: model or run, Launch."""
    model, checkpoints = model_source(root, "lh")
    name = run_name("lh", "heads")
    if st.button("Launch", type="primary", key="lh_launch", disabled=not model):
        with guard("launching the head roles"):
            launch(root, "lh", name, dict(model=model, checkpoints=checkpoints, heads=True), "head roles")


def pick_run(root: Path, prefix: str, heads: bool):
    """The layers run to show (its list entry and eval.json), following a just-queued one; None when there is none."""
    runs = [r for r in R.list_runs(root) if kind_of(r.get("kind")) is LAYERS
            and bool((R.read_run_json(r["path"]).get("config") or {}).get("heads")) == heads]
    follow_queued_run(root, prefix, [r["name"] for r in runs])
    if not runs:
        st.info("No results yet: launch a job above (the Jobs page shows the queue).")
        return None
    pick = st.selectbox("Results of", [r["name"] for r in runs], key=f"{prefix}_pick",
                        format_func=lambda n: next(f"{r['name']} ({r['effective_status']})" for r in runs if r["name"] == n))
    run = next(r for r in runs if r["name"] == pick)
    if run.get("error"):
        st.error(run["error"])
    if status_of(run["effective_status"]).active:
        live_progress(Path(run["path"]), run["effective_status"])
    return run, read_eval(run["path"])


def live_progress(run_dir: Path, listed: str) -> None:
    @st.fragment(run_every=5)
    def poll():
        info = R.read_run_json(run_dir)
        status = R.effective_status(run_dir, info)
        if status != listed:  # finished, failed or cancelled: redraw the page with its results
            st.rerun()
        prog = R.run_progress(run_dir, info)
        st.progress(prog["fraction"] or 0.0, text=f"{run_dir.name}: {status}, {prog['step'] or 0} of "
                                                  f"{prog['total'] or '?'} steps done (refreshes every 5 s)")
    poll()


def depth_table(ev: dict) -> pd.DataFrame:
    """One row per task of a probes result, shallowest expected layer first."""
    rows = [{"task": t["task"], "level": t["level"], "expected_layer": t.get("expected_layer"),
             "majority": t.get("majority"), "control_majority": t.get("control_majority"),
             "train": t.get("n_train"), "dev": t.get("n_dev")} for t in ev.get("tasks") or []]
    order = {n: i for i, n in enumerate(ev.get("by_depth") or [])}
    return pd.DataFrame(sorted(rows, key=lambda r: order.get(r["task"], len(order))))


def probe_results(root: Path) -> None:
    """A probes run's curves, tasks by depth, heatmap over steps, CSV and HTML."""
    from engine.layers import frame
    picked = pick_run(root, "ly", heads=False)
    if picked is None or not (picked[1].get("tasks") and picked[1]["tasks"][0].get("steps")):
        return
    run, ev = picked
    df, table = frame(ev), depth_table(ev)
    st.markdown(f"**{ev.get('model')}**, {ev.get('probe')} probes. Accuracy on the dev split; the control task gives "
                "each word type a fixed random label, so a probe that scores well on it has memorised words, not read them.")
    st.dataframe(table, hide_index=True, width="stretch")
    figs = [LF.depth_figure(table)] if table["expected_layer"].notna().sum() > 1 else []
    task = st.selectbox("Task", list(table["task"]), key="ly_task_pick")
    figs.append(LF.probe_curves(df, task))
    rows = df[df["task"] == task]
    if rows["step"].nunique() > 1:
        values = ("accuracy", "selectivity") if rows["selectivity"].notna().any() else ("accuracy",)
        value = st.radio("Heatmap of", values, key="ly_heat_value", horizontal=True)
        figs.append(LF.layer_step_heatmap(df, task, value))
    for i, fig in enumerate(figs):
        st.plotly_chart(fig, key=f"ly_fig_{i}", config=chart_config(f"layers-{run['name']}-{i}"))
    c1, c2 = st.columns(2)
    c1.download_button("Download the scores as CSV", df.to_csv(index=False), file_name=f"{run['name']}.csv",
                       mime="text/csv", key="ly_csv")
    c2.download_button("Download the charts as HTML (works offline)", LF.report_html(f"Probes per layer: {run['name']}", figs, [table]),
                       file_name=f"{run['name']}.html", mime="text/html", key="ly_html")


def heads_results(root: Path) -> None:
    """A head-roles run's role map, small multiples over steps, settle steps, Clark et al.'s findings, CSV and HTML."""
    from engine.head_roles import ROLE_LABELS, frame
    picked = pick_run(root, "lh", heads=True)
    if picked is None or not picked[1].get("heads"):
        return
    run, ev = picked
    heads = frame(ev)
    st.markdown(f"**{ev.get('model')}** over {ev.get('texts')} fixed sentence pairs. A head's role is what gets at least "
                "half its attention; else broad (near uniform) or focused (on something else).")
    figs = [LF.role_map(heads, ROLE_LABELS)]
    if heads["step"].nunique() > 1:
        figs.append(LF.role_multiples(heads, ROLE_LABELS))
    for i, fig in enumerate(figs):
        st.plotly_chart(fig, key=f"lh_fig_{i}", config=chart_config(f"head-roles-{run['name']}-{i}"))
    settled = pd.DataFrame(ev.get("settled") or []).assign(role=lambda d: d["role"].map(ROLE_LABELS))
    findings = pd.DataFrame(ev.get("findings") or []).rename(
        columns={"bert_base": "BERT-base (Clark et al. 2019)", "ours": "this model"})
    st.markdown("**What Clark et al. 2019 found on BERT-base, beside this model**")
    st.dataframe(findings, hide_index=True, width="stretch")
    st.markdown("**When each head's role settled** (the first step from which it keeps its last role)")
    st.dataframe(settled, hide_index=True, width="stretch")
    c1, c2 = st.columns(2)
    c1.download_button("Download the shares as CSV", heads.to_csv(index=False), file_name=f"{run['name']}.csv",
                       mime="text/csv", key="lh_csv")
    c2.download_button("Download the charts as HTML (works offline)", LF.report_html(f"Head roles: {run['name']}", figs, [findings, settled]),
                       file_name=f"{run['name']}.html", mime="text/html", key="lh_html")
