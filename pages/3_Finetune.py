"""Fine-tune: pick a model, a task (built-in, the shared benchmark files, or uploaded files with a preview and
the columns detected) and the paper's grid (learning rates x batch sizes x epochs, with restarts); the run goes
to the job queue. The Results tab follows a run live: progress, every trial's dev score, the per-epoch curves,
the training loss, and for SQuAD v2.0 the null-threshold curve."""
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from engine.records import read_eval
from engine import runs as R
from engine.errors import EngineError
from engine import cli
from engine.finetune import FinetuneConfig
from engine.commands import FINETUNE, kind_of
from engine.status import FINISHED, status_of
from engine.tasks.metrics import METRICS
from engine.tasks.registry import BUILTINS, FORMATS
from engine.tasks.shared_files import shared_task_files, shared_tasks
from studio import ablation_figures as F
from studio import finetune_plan as plan
from studio import finetune_results as results
from studio.finetune_results import trial_label
from studio.common import (chart_config, confirm_launch, follow_queued_run, guard, launch_confirmation, launch_run,
                           load_bundle, model_picker, precision_select, resume_button, runs_root)
from studio.uploads import save_upload

st.title("Fine-tune")
st.caption("All parameters are fine-tuned with a new output layer (paper 3.2); the best trial on dev is kept. "
           "Runs go to the job queue (Jobs page) and survive a reload.")
root = runs_root()


# ------------------------------------------------------------------ task files
@st.cache_data(show_spinner="Reading the task files…", max_entries=8)
def preview(kind: str, train: str, dev: str, text_cols: str, label_col: str, mtimes: tuple, token_col: str = "",
            header: str = "auto", metric: str = ""):
    """(summary dict, warnings, preview DataFrame) of a task, loaded the way `engine finetune` will load it."""
    from engine.finetune import FinetuneConfig, load_task
    from engine.tasks.describe import counted, describe
    task = load_task(FinetuneConfig(task=kind, train=train, dev=dev, text_cols=text_cols or None, label_col=label_col or None,
                                    token_col=token_col or None, header=header, metric=metric or None))
    d = describe(task)
    info = {"task": task.name, "type": d["type"], "train examples": len(task.train), "dev examples": len(task.dev)}
    if d["labels"]:
        shown = ", ".join(f"{l} ({n})" for l, n in list(d["labels"].items())[:20])
        info[f"{counted(d['type'])} (train count)"] = shown + (" …" if d["n_labels"] > 20 else "")
    cols = d["columns"]
    if cols:
        info["columns detected"] = ", ".join(f"{k} = {v}" for k, v in cols.items() if v is not None) if isinstance(cols, dict) else str(cols)
    if getattr(task, "metrics", None):
        info["selection metric"] = metric or task.metrics[0]
    return info, d["warnings"], pd.DataFrame(task.preview(10))


@st.cache_data(show_spinner="Reading the task…", max_entries=8)
def builtin_train_size(name: str) -> int:
    """Training examples of a built-in task (loaded once)."""
    from engine.finetune import FinetuneConfig, load_task
    return len(load_task(FinetuneConfig(task=name)).train)


def _mtimes(*paths) -> tuple:
    return tuple(Path(p).stat().st_mtime if p and Path(p).is_file() else 0.0 for p in paths)


def _nums(text: str, cast, flag: str) -> list:
    try:
        vals = [cast(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise EngineError(f"{flag} must be comma-separated numbers, e.g. 5e-5,3e-5,2e-5")
    if not vals:
        raise EngineError(f"give at least one value for {flag}")
    return vals


tab_new, tab_runs = st.tabs(["New fine-tuning run", "Results"])

# ------------------------------------------------------------------ new run
with tab_new:
    model = model_picker("Model", key="ft_model")
    shared = {f"{t.name} ({t.description})": t for t in shared_tasks()}
    sources = ["Built-in task"] + (["Shared benchmark files"] if shared else []) + ["Upload files", "Files on the server"]
    source = st.radio("Task", sources, horizontal=True, key="ft_source")
    task, train, dev, text_cols, label_col, token_col, header, metric = None, None, None, "", "", "", "auto", ""
    if source == "Built-in task":
        task = st.selectbox("Built-in task", list(BUILTINS), key="ft_builtin", format_func=lambda k: f"{k}: {BUILTINS[k].description}")
    elif source == "Shared benchmark files":
        pick = shared[st.selectbox("Shared file", list(shared), key="ft_shared")]
        task = pick.kind
        with guard("preparing the shared files"):
            train, dev = (str(p) for p in shared_task_files(pick, root / "uploads"))
    else:
        task = st.selectbox("File format", list(FORMATS), key="ft_kind", format_func=lambda k: f"{k}: {FORMATS[k].description}")
        if source == "Upload files":
            c1, c2 = st.columns(2)
            up_train = c1.file_uploader("Train file", type=list(FORMATS[task].extensions), key="ft_up_train")
            up_dev = c2.file_uploader("Dev file", type=list(FORMATS[task].extensions), key="ft_up_dev")
            with guard("saving the upload"):
                if up_train is not None:
                    train = str(save_upload(root, up_train.name, up_train.getvalue(), FORMATS[task].extensions, f"{task} file"))
                if up_dev is not None:
                    dev = str(save_upload(root, up_dev.name, up_dev.getvalue(), FORMATS[task].extensions, f"{task} file"))
        else:
            c1, c2 = st.columns(2)
            train = c1.text_input("Train file path", key="ft_path_train").strip() or None
            dev = c2.text_input("Dev file path", key="ft_path_dev").strip() or None
        if FORMATS[task].columns:
            c1, c2 = st.columns(2)
            text_cols = c1.text_input("Text column(s), A or A,B (blank: detect from the header)", key="ft_text_cols").strip()
            label_col = c2.text_input("Label column (blank: detect)", key="ft_label_col").strip()
        if "header" in FORMATS[task].options:  # table formats
            c1, c2 = st.columns(2)
            header = c1.selectbox("First row is a header", ["auto", "yes", "no"], key="ft_header",
                                  help="auto: detected by known column names and by the content")
            metric = c2.selectbox("Selection metric", ["", *METRICS],
                                  key="ft_metric", format_func=lambda m: m or "the task's default")
        if "token" in FORMATS[task].options:  # word-per-line formats
            c1, c2 = st.columns(2)
            token_col = c1.text_input("Word column (blank: the first)", key="ft_token_col").strip()
            label_col = c2.text_input("Tag column (blank: the last)", key="ft_tag_col").strip()
    info = {}
    if task in FORMATS and train and dev:
        with guard("reading the task files"):
            info, warnings, frame = preview(task, train, dev, text_cols, label_col, _mtimes(train, dev), token_col, header, metric)
            st.markdown("**Task preview** — " + " · ".join(f"{k}: **{v}**" for k, v in info.items()))
            for w in warnings:
                st.warning(w)
            st.dataframe(frame, hide_index=True, width="stretch")
    elif task in FORMATS:
        st.info("Give a train and a dev file: the dev set selects the best trial.")

    P = plan.grid("paper")
    st.markdown(f"**Grid**: a classroom-sized default of two learning rates (the paper's grid, lr {P['lr']} · batch "
                f"{', '.join(map(str, P['batch_size']))} · epochs {', '.join(map(str, P['epochs']))}, makes "
                f"{plan.n_trials(P['lr'].split(','), P['batch_size'], P['epochs'], P['restarts'])} trials); a tiny "
                "model from scratch wants larger rates, e.g. 3e-4")
    G = plan.grid("classroom")
    g1, g2, g3, g4 = st.columns(4)
    lr_text = g1.text_input("Learning rates", value=G["lr"], key="ft_lr")
    batch = g2.multiselect("Batch sizes", [8, 16, 32, 48, 64], default=G["batch_size"], key="ft_bs")
    epochs = g3.multiselect("Epochs", [1, 2, 3, 4, 5], default=G["epochs"], key="ft_epochs")
    LIM = {n: cli.field_limits(FinetuneConfig, n) for n in ("restarts", "max_train", "seed")}  # the config's ranges
    restarts = g4.number_input("Restarts per grid point", *LIM["restarts"][:2], G["restarts"], key="ft_restarts")
    h1, h2, h3, h4, h5 = st.columns(5)
    max_train = h1.number_input("Max train examples (0 = all)", *LIM["max_train"][:2], 0, step=LIM["max_train"][2],
                                key="ft_max_train")
    max_len = h2.selectbox("Max sequence length", [64, 128, 256, 384, 512], index=1, key="ft_max_len")
    seed = h3.number_input("Seed", *LIM["seed"][:2], FinetuneConfig.seed, key="ft_seed")
    precision = precision_select(h4, key="ft_precision")
    bilstm = h5.checkbox("BiLSTM on top (Table 5's LTR + BiLSTM)", key="ft_bilstm")
    packing = h5.checkbox("Pack examples", value=FinetuneConfig.packing, key="ft_packing",
                          help="training batches' examples share rows with no padding between them: the same losses "
                               "and gradients")
    lrs = []
    with guard("reading the grid"):
        lrs = _nums(lr_text, float, "learning rates")
    n_trials = plan.n_trials(lrs, batch, epochs, restarts)
    st.write(f"**{n_trials} trials** ({len(lrs)} lr × {len(batch)} batch × {len(epochs)} epochs × {int(restarts)} restarts)")
    # the grid's time on this machine: only from a step timed here (the button), never a guessed figure
    timing_key = [model, task, train, dev, int(max_len), precision, int(max_train)]
    timed = st.session_state.get("ft_timed") or {}
    t1, t2 = st.columns([1, 4])
    if t1.button("Time one step here", key="ft_time", disabled=not (task and n_trials) or (task in FORMATS and not (train and dev)),
                 help="times one training step of this model at each batch size of the grid on this machine "
                      "(a few seconds), to estimate the grid's training time"):
        with guard("timing a step"):
            with st.spinner("Timing one step at each batch size…"):
                n = info.get("train examples") if task in FORMATS else builtin_train_size(task)
                if n is None:
                    raise EngineError("the task files could not be read (see above); fix them, then time a step")
                bundle = load_bundle(model)
                steps = {bs: plan.time_step(bundle, bs, int(max_len), precision) for bs in sorted(batch)}
            timed = {"key": timing_key, "n_train": min(n, int(max_train) or n), "steps": steps}
            st.session_state["ft_timed"] = timed
    if timed.get("key") == timing_key and lrs and batch and epochs:
        by_batch = plan.train_steps(timed["n_train"], lrs, batch, epochs, restarts)
        seconds = plan.estimate(by_batch, {bs: t["seconds"] for bs, t in timed["steps"].items()})
        if seconds is None:
            t2.caption("Time on this machine: a batch size of the grid is not timed yet; press the button again.")
        else:
            one = next(iter(timed["steps"].values()))
            t2.caption(f"Time on this machine: {plan.minutes_text(seconds)} of training ({sum(by_batch.values()):,} "
                       f"steps on {timed['n_train']:,} examples, from one step timed here on {one['device']}, "
                       f"{one['precision']}, full-length inputs); dev evaluation after each epoch comes on top.")
    else:
        t2.caption("Time on this machine: not measured; the button times one step here.")
    if "ft_default_name" not in st.session_state:
        st.session_state["ft_default_name"] = time.strftime("ft-%Y%m%d-%H%M%S")
    name = st.text_input("Run name", value=st.session_state["ft_default_name"], key="ft_name")
    if st.button("Launch", type="primary", key="ft_launch", disabled=not (task and n_trials)):
        with guard("launching the fine-tuning run"):
            if task in FORMATS and not (train and dev):
                raise EngineError(f"a {task} task needs a train and a dev file")
            files = {"train": train, "dev": dev} if task in FORMATS else {}
            run_dir, rec = launch_run(root, name, model, lambda out: FinetuneConfig(
                model=model, task=task, **files, text_cols=text_cols or None, label_col=label_col or None,
                token_col=token_col or None, header=header, metric=metric or None, lr=tuple(lrs),
                batch_size=tuple(sorted(batch)), epochs=tuple(sorted(epochs)), restarts=int(restarts),
                max_seq_len=int(max_len), seed=int(seed), precision=precision, max_train=int(max_train) or None,
                bilstm=bool(bilstm), packing=bool(packing), out=str(out)), "ft")
            confirm_launch("ft", f"Queued job {rec['id']} for run **{run_dir.name}**; the Results tab follows it too.",
                           rec["id"])
    launch_confirmation("ft")

# ------------------------------------------------------------------ results
with tab_runs:
    runs = []
    with guard("listing runs"):
        runs = [r for r in R.list_runs(root) if kind_of(r.get("kind")) is FINETUNE]
    follow_queued_run(root, "ft", [r["name"] for r in runs])
    if not runs:
        st.info(f"No fine-tuning runs yet in {root}. Launch one in the first tab.")
    else:
        names = [r["name"] for r in runs]
        pick = st.selectbox("Run", names, key="ft_pick",
                            format_func=lambda n: next(f"{r['name']} ({r['effective_status']})" for r in runs if r["name"] == n))
        auto = st.toggle("Auto-refresh every 5 s", value=True, key="ft_auto")
        run_dir = root / pick
        listed_status = next(r["effective_status"] for r in runs if r["name"] == pick)

        @st.fragment(run_every=5 if auto else None)
        def show_run():
            info = R.read_run_json(run_dir)
            status = R.effective_status(run_dir, info)
            if status != listed_status:  # the picker's label ("… (running)") predates this change: redraw it once
                st.rerun()
            prog = R.run_progress(run_dir, info)
            cfg = info.get("config") or {}
            ev = read_eval(run_dir)
            precision = f" · {ev['precision']}" if ev.get("precision") else ""  # as resolved ("auto" -> bf16 / fp32)
            st.markdown(f"**{pick}** — status **{status}** · model `{cfg.get('model', '?')}` · task `{cfg.get('task', '?')}`{precision}")
            if status_of(status) is FINISHED:
                st.progress(1.0, text="finished")
            elif prog["fraction"] is not None:
                st.progress(prog["fraction"], text=f"step {prog['step'] or 0} of {prog['total'] or '?'}")
            if info.get("error"):
                st.error(info["error"])
            resume_button(root, run_dir, FinetuneConfig, status, "the finished trials are")
            parsed = (ev.get("data") or {}).get("parsed") or {}
            if parsed:
                from engine.tasks.describe import describe_lines
                st.caption(" · ".join(l for l in describe_lines(parsed) if not l.startswith("warning: ")))
            for w in ev.get("warnings", parsed.get("warnings") or []):
                st.warning(w)
            records = R.read_metrics(run_dir)
            trials = ev.get("trials") or []
            metric = ev.get("metric") or "score"
            if ev.get("score") is not None:
                best = ev.get("best") or {}
                c1, c2, c3 = st.columns(3)
                c1.metric(f"best dev {metric}", f"{100 * ev['score']:.1f}")
                c2.metric("best trial", f"#{best['trial']}: lr {best['lr']:g}" if best else "–",
                          help=trial_label(best) if best else None)
                c3.metric("trials finished", f"{len(trials)}")
            if trials:
                st.dataframe(pd.DataFrame(results.trial_rows(trials, metric)), hide_index=True, width="stretch")
                best_trial = (ev.get("best") or {}).get("trial")
                tf = pd.DataFrame([{"trial": trial_label(t), "value": t.get("score"), "best": t["trial"] == best_trial} for t in trials])
                st.plotly_chart(F.trials_bars(tf, metric), key="ft_trials_fig", config=chart_config("finetune-trials"))
                if ev.get("grid") and any(g.get("n", 1) > 1 for g in ev["grid"]):
                    st.markdown("**Spread across restarts** (per grid point)")
                    st.dataframe(pd.DataFrame(ev["grid"]), hide_index=True, width="stretch")
            # per-epoch dev scores (live, from metrics.jsonl) and the training loss
            ep = results.epoch_rows(records, trials, cfg)
            if ep:
                st.plotly_chart(F.epoch_lines(pd.DataFrame(ep), metric), key="ft_epochs_fig", config=chart_config("finetune-epochs"))
            loss = [(r["step"], r["loss"]) for r in records if "loss" in r and "step" in r]
            if loss:
                st.plotly_chart(F.loss_curve([s for s, _ in loss], [l for _, l in loss]), key="ft_loss_fig", config=chart_config("finetune-loss"))
            if ev.get("threshold_curve"):
                curve = [(c["tau"], c["exact"], c["f1"]) for c in ev["threshold_curve"]]
                st.plotly_chart(F.threshold_curve(curve, (ev.get("dev") or {}).get("tau")), key="ft_tau_fig",
                                config=chart_config("squad-threshold"))
                dev = ev.get("dev") or {}
                if "has_ans_f1" in dev:
                    st.caption(f"At the chosen tau: answerable F1 {100 * dev['has_ans_f1']:.1f}, unanswerable F1 "
                               f"{100 * dev.get('no_ans_f1', 0):.1f}. " + ((ev.get("data") or {}).get("tau") or ""))
            if not trials and not records:
                st.caption("No metrics yet: the run is queued or loading.")

        with guard("reading the run"):
            show_run()
