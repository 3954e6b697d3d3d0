"""Features: the feature-based approach (paper 5.3, Table 7). Frozen hidden states of a model, combined across
layers (embeddings, last, second-to-last, sum / weighted sum / concatenation of the last four, weighted sum of
all layers), feed a classifier (logistic regression for sentences, a BiLSTM tagger for NER) as a queued job;
its result sits next to fine-tuning the same model. Plus a 2-D projection (PCA or t-SNE) of sentence features
of BBC articles, coloured by topic, computed here on a small sample."""
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from engine import ablations as A
from engine.records import read_eval
from engine import cli
from engine import runs as R
from engine.errors import EngineError
from engine.commands import FEATURES, FINETUNE, kind_of
from engine.status import status_of
from engine.features import FeaturesConfig
from engine.tasks.registry import BUILTINS, feature_task_names
from studio import ablation_figures as F
from studio.common import (chart_config, confirm_launch, follow_queued_run, guard, launch_confirmation, launch_run,
                           load_bundle, model_picker, mtime_key, resume_button, runs_root)
from studio.projection import PROJECTIONS, bbc_projection

COMBINES = {"concat": "concatenate the chosen layers (D = K·H; the paper's best)",
            "weighted": "weighted sum of the chosen layers (weights learned by the BiLSTM tagger)",
            "all-weighted": "weighted sum of all layers", "sum": "sum of the chosen layers", "mean": "mean of the chosen layers",
            "last": "last hidden layer", "second-to-last": "second-to-last hidden layer", "embeddings": "embeddings only"}
# sentence tasks get a logistic regression on sentence features, tagging tasks a BiLSTM tagger on word features
TASKS = {b.name: b.description for b in BUILTINS.values() if b.name in feature_task_names()}

st.title("Feature-based")
st.caption("BERT as a frozen feature extractor: no weight of the encoder changes; only a small classifier is trained on "
           "its activations (paper 5.3). Compare with fine-tuning the whole model.")
root = runs_root()
model = model_picker("Model", key="fx_model")
tab_run, tab_compare, tab_proj = st.tabs(["Run a feature-based classifier", "Compare with fine-tuning", "2-D projection"])


def _layers(text: str) -> list:
    try:
        vals = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise EngineError(f"layers {text!r} must be comma-separated integers, e.g. -1,-2,-3,-4 (0 = embeddings, -1 = last)")
    if not vals:
        raise EngineError("give at least one layer, e.g. -1")
    return vals


# ------------------------------------------------------------------ run
with tab_run:
    tasks = dict(TASKS)
    shared = {e.name: e for e in A.shared_evaluations()}
    for name in shared:
        tasks[name] = "shared benchmark file (logistic regression on sentence features)"
    task_key = st.selectbox("Task", list(tasks), key="fx_task", format_func=lambda k: f"{k}: {tasks[k]}")
    c1, c2 = st.columns(2)
    combos = c1.multiselect("Combinations (one job extracts once and trains one classifier per combination)", list(COMBINES),
                            default=["concat"], key="fx_combine", format_func=lambda k: f"{k}: {COMBINES[k]}")
    layers_default, layers_help = cli.field_setting(FeaturesConfig, "layers")
    layers_text = c2.text_input(f"Layers for concat / sum / mean / weighted ({layers_help})",
                                ",".join(map(str, layers_default)), key="fx_layers")
    d1, d2, d3 = st.columns(3)
    pool_default, pool_help = cli.field_setting(FeaturesConfig, "pooling")
    pool_choices = list(cli.field_choices(FeaturesConfig, "pooling"))
    pooling = d1.selectbox("Sentence pooling", pool_choices, index=pool_choices.index(pool_default), key="fx_pooling",
                           help=pool_help)
    LIM = {n: cli.field_limits(FeaturesConfig, n) for n in ("max_train", "seed", "epochs", "lr")}  # the config's ranges
    max_train = d2.number_input("Max train examples (0 = all)", *LIM["max_train"][:2], 0, step=LIM["max_train"][2],
                                key="fx_max_train")
    seed = d3.number_input("Seed", *LIM["seed"][:2], FeaturesConfig.seed, key="fx_seed")
    e1, e2 = st.columns(2)
    epochs_default, epochs_help = cli.field_setting(FeaturesConfig, "epochs")
    lr_default, lr_help = cli.field_setting(FeaturesConfig, "lr")
    tag_epochs = e1.number_input(f"Tagging: {epochs_help}", *LIM["epochs"][:2], epochs_default, key="fx_epochs",
                                 help="5 suits MiniLM; features of a tiny model need about 20 before the tagger leaves the all-O plateau")
    tag_lr = e2.number_input(f"Tagging: {lr_help}", *LIM["lr"][:2], lr_default, step=LIM["lr"][2], format="%g", key="fx_lr")
    if "fx_default_name" not in st.session_state:
        st.session_state["fx_default_name"] = time.strftime("fx-%Y%m%d-%H%M%S")
    name = st.text_input("Run name", value=st.session_state["fx_default_name"], key="fx_name")
    if st.button("Launch", type="primary", key="fx_launch", disabled=not combos):
        with guard("launching the feature-based run"):
            layers = _layers(layers_text)
            if task_key in shared:
                ev = shared[task_key]
                task = {"task": ev.task, "train": ev.train, "dev": ev.dev}
            else:
                task = {"task": task_key}
            run_dir, rec = launch_run(root, name, model, lambda out: FeaturesConfig(
                model=model, **task, layers=tuple(layers), combine=tuple(combos), pooling=pooling, seed=int(seed),
                epochs=int(tag_epochs), lr=float(tag_lr), max_train=int(max_train) or None, out=str(out)), "fx")
            confirm_launch("fx", f"Queued job {rec['id']} for run **{run_dir.name}**; compare it in the next tab when it "
                           "finishes.", rec["id"])
    launch_confirmation("fx")


# ------------------------------------------------------------------ compare
def _eval(run: dict) -> dict:
    return read_eval(run["path"])


def _same(a, b) -> bool:
    return str(a) == str(b) or (Path(str(a)).resolve() == Path(str(b)).resolve() if a and b and a != "minilm" and b != "minilm" else False)


def _epoch_chart(run_dir: Path, key: str, records: list = None):
    """Dev score of the BiLSTM tagger after each epoch, one line per combination (tagging runs log these)."""
    records = R.read_metrics(run_dir) if records is None else records
    ep = [{"trial": r["combine"], "epoch": r["epoch"], "value": r["score"]} for r in records
          if "epoch" in r and r.get("score") is not None and r.get("combine")]
    if ep:
        st.plotly_chart(F.epoch_lines(pd.DataFrame(ep), "f1", title="BiLSTM tagger: dev entity F1 per epoch"), key=key, config=chart_config("features-epochs"))


with tab_compare:
    runs = []
    with guard("listing runs"):
        runs = R.list_runs(root)
    fx_runs = [r for r in runs if kind_of(r.get("kind")) is FEATURES]
    ft_runs = [r for r in runs if kind_of(r.get("kind")) is FINETUNE]
    follow_queued_run(root, "fx", [r["name"] for r in fx_runs])
    if not fx_runs:
        st.info("No feature-based runs yet: launch one in the first tab.")
    else:
        names = [r["name"] for r in fx_runs]
        fx_name = st.selectbox("Feature-based run", names, key="fx_pick",
                               format_func=lambda n: next(f"{r['name']} ({r['effective_status']})" for r in fx_runs if r["name"] == n))
        fx = next(r for r in fx_runs if r["name"] == fx_name)
        ev = _eval(fx)
        if fx.get("error"):
            st.error(fx["error"])
        resume_button(root, Path(fx["path"]), FeaturesConfig, fx["effective_status"], "the finished combinations are")
        live_run = status_of(fx["effective_status"]).active
        if live_run:
            @st.fragment(run_every=5)
            def live(run_dir=Path(fx["path"]), listed=fx["effective_status"]):
                info = R.read_run_json(run_dir)
                status = R.effective_status(run_dir, info)
                if status != listed:  # finished, failed or cancelled: redraw the page with its results
                    st.rerun()
                records = R.read_metrics(run_dir)
                total = int(info.get("n_combinations") or 1)  # set before extraction starts
                done = sum(1 for r in records if r.get("combine") and "epoch" not in r)
                stage = (f"{done} of {total} classifiers trained" if any(r.get("phase") == "extracted" for r in records)
                         else "extracting features")
                st.progress(min(1.0, done / total), text=f"{fx_name}: {status}, {stage} (refreshes every 5 s)")
                _epoch_chart(run_dir, "fx_live_epochs", records)
            live()
        if not ev.get("results"):
            if not live_run:
                st.info(f"{fx_name} has no results (status {fx['effective_status']}).")
        else:
            metric = ev.get("metric", "score")
            match = [r for r in ft_runs if _same(_eval(r).get("model"), ev.get("model")) and _eval(r).get("task") == ev.get("task")]
            options = ["(none)"] + [r["name"] for r in match] + [r["name"] for r in ft_runs if r not in match]
            ft_name = st.selectbox("Fine-tuning run of the same model and task", options, index=1 if match else 0, key="fx_ft_pick",
                                   help="runs of the same model and task are listed first")
            rows = [{"approach": f"feature-based: {r['combine']}", "layers": ", ".join(map(str, r.get("layers", []))),
                     "dims": r.get("dims"), "classifier": r.get("classifier"), metric: r.get("score")} for r in ev["results"]]
            if ft_name != "(none)":
                ft_ev = _eval(next(r for r in ft_runs if r["name"] == ft_name))
                ft_score = A.best_score(ft_ev, metric)
                rows.insert(0, {"approach": "fine-tuning (all parameters)", "layers": "all", "dims": None,
                                "classifier": "task head", metric: ft_score})
                if ft_ev.get("task") != ev.get("task") or not _same(ft_ev.get("model"), ev.get("model")):
                    st.warning(f"{ft_name} fine-tuned {ft_ev.get('model')} on {ft_ev.get('task')}; this feature run used "
                               f"{ev.get('model')} on {ev.get('task')}: not a like-for-like comparison.")
            st.markdown(f"**{ev.get('task')}** with **{ev.get('model')}** — dev {metric}")
            for r in ev["results"]:
                if r.get("warning"):
                    st.warning(r["warning"])
            table = pd.DataFrame(rows)
            st.dataframe(table, hide_index=True, width="stretch")
            st.plotly_chart(F.approach_bars(table, metric), key="fx_compare_fig", config=chart_config("features-vs-finetuning"))
            if not live_run:  # a running job's curves are drawn (and refreshed) above
                _epoch_chart(Path(fx["path"]), "fx_epochs_fig")


# ------------------------------------------------------------------ projection
@st.cache_data(show_spinner="Extracting features…", max_entries=8)
def projection(model_path: str, mtime: float, n: int, combine: str, layers: tuple, pooling: str, method: str, seed: int = 0):
    """studio.projection.bbc_projection, cached per model (path and newest file mtime) and settings."""
    return bbc_projection(load_bundle(model_path), n, combine, layers, pooling, method, seed)


with tab_proj:
    st.markdown("Sentence features of a sample of BBC articles, projected to two dimensions. Well-separated colours mean "
                "the frozen features already know the topic (which a linear classifier will find).")
    p1, p2, p3, p4 = st.columns(4)
    n = p1.slider("Articles", 30, 600, 300, step=10, key="fx_proj_n")
    pcombine = p2.selectbox("Combination", ["last", "second-to-last", "concat", "mean", "embeddings", "all-weighted"], key="fx_proj_combine")
    ppool = p3.selectbox("Pooling", ["mean", "cls"], key="fx_proj_pool")
    method = p4.radio("Projection", list(PROJECTIONS), key="fx_proj_method", horizontal=True)
    play = st.text_input("Layers (for concat / mean)", ",".join(map(str, cli.field_setting(FeaturesConfig, "layers")[0])),
                         key="fx_proj_layers")
    if st.button("Compute projection", key="fx_proj_go"):
        with guard("computing the projection"):
            xy, topics, hover = projection(model, mtime_key(model), int(n), pcombine, tuple(_layers(play)), ppool, method)
            st.session_state["fx_proj"] = (model, pcombine, method, xy, topics, hover)
    if st.session_state.get("fx_proj"):
        m, c, meth, xy, topics, hover = st.session_state["fx_proj"]
        st.plotly_chart(F.projection_scatter(xy, topics, hover, title=f"{meth} of {c} features of {len(topics)} BBC articles ({Path(m).name})"),
                        key="fx_proj_fig", config=chart_config("features-projection"))
