"""The probe-ready model in one step: MiniLM's encoder continued-pre-trained with MLM + NSP on the built-in
text (`python -m engine pretrain --init minilm --out <runs>/minilm-continued`, the recipe in
engine.pretraining.config.CONTINUED_PRETRAINING), launched from the Model page as a queued job with live
progress; the Probe and Attention pages offer it first once it has a checkpoint (studio.common.model_picker).

- `run_dir(root)`, `argv(root)`: where it goes and the exact engine command (one place, also for the Jobs page).
- `model_path(root)`: the run folder once it has a complete checkpoint, else None.
  (`run_dir` and `model_path` are studio.common's `probe_ready_dir` and `probe_ready_model`: the model pickers
  there offer it first, and this module imports common, not the other way round.)
- `card(path)`: what a model started from `--init` is (engine.pretraining.init.model_card), or "".
- `panel(root, why)`: the button, then the job's live progress (step, held-out MLM/NSP accuracy), then the card.
"""
from pathlib import Path

import streamlit as st

from engine.records import RUN_JSON
from engine.status import FINISHED, RUNNING, status_of
from studio.common import guard
from studio.common import probe_ready_dir as run_dir  # noqa: F401 (defined there: the model pickers need it)
from studio.common import probe_ready_model as model_path  # noqa: F401

REFRESH_SECONDS = 3.0


def argv(root) -> list:
    """The job: the recipe's defaults, so the command names only the init, the corpus and the folder (the engine's
    `class prepare` queues the same one: engine.classroom.probe_ready_argv)."""
    from engine.classroom import probe_ready_argv
    return probe_ready_argv(root)


def _run_of(path) -> Path | None:
    """The run folder of a model path (a run, or one of its checkpoints), or None."""
    p = Path(str(path))
    for cand in (p, p.parent.parent):
        if (cand / RUN_JSON).is_file():
            return cand
    return None


def card(path, step=None) -> str:
    """What the model at `path` is, when its run started from --init; "" otherwise."""
    from engine import runs
    from engine.pretraining.init import model_card
    run = _run_of(path) if path and path != "minilm" else None
    if run is None:
        return ""
    try:
        info = runs.read_run_json(run)
    except Exception:
        return ""
    return model_card(info, step=step)


def _status(d: Path):
    from engine import runs
    if not (d / RUN_JSON).is_file():
        return None, {}
    info = runs.read_run_json(d)
    return runs.effective_status(d, info), info


def build_minutes(root):
    """How long the build takes on this machine: the one estimator's (engine.classroom.part_estimate of the class
    preparation's probe-ready part, which the Start page's Prepare panel shows too), an engine.classroom.Estimate."""
    from engine.classroom import part_estimate
    return part_estimate(root, "probe_ready")


def panel(root, why: bool = True) -> None:
    """Build (or follow, or resume) the probe-ready model. `why`: start by saying that MiniLM has no MLM or NSP
    head (False where the page has just said it, as the Probe page does)."""
    from engine.measured import fact
    from engine.corpora import CORPUS_WORDS
    from engine.pretraining.config import CONTINUED_PRETRAINING as R
    from engine.pretraining.config import PROBE_READY_INIT, PretrainConfig
    from engine.classroom import probe_ready_steps
    steps, _ = probe_ready_steps(root)  # as many as fit in the recipe's budget at this machine's measured speed
    heads_first = PretrainConfig.for_init(PROBE_READY_INIT, steps=steps).heads_first_steps()
    build = build_minutes(root)
    MLM, NSP = fact("probe_ready.mlm_accuracy"), fact("probe_ready.nsp_accuracy")
    d = run_dir(root)
    st.caption(("MiniLM has real weights but no MLM or NSP head. " if why else "") +
               f"This continues MiniLM's pre-training with the paper's "
               f"objectives (MLM + NSP) on {CORPUS_WORDS[R['corpus']]}: {steps} steps of {R['batch_size']} x {R['seq_len']} tokens at learning rate "
               f"{R['lr']:g}" + (f", the first {heads_first} training only the output layers, the encoder frozen" if heads_first else "") +
               f", as its own process: {build.clause()}, ending at held-out MLM accuracy {MLM.text()} and NSP "
               f"{NSP.text()} ({MLM.where}). Command: `python -m engine {' '.join(argv(root))}`", help=build.how)
    status, info = _status(d)
    job_id = st.session_state.get("probe_ready_job")
    if status is None:
        queued = None
        if job_id:
            from engine import jobs as Q
            queued = (Q.get(job_id, root) or {}).get("status")
        if status_of(queued).active:
            st.info(f"Queued (job {job_id}); progress shows here once it starts (the Jobs page has its log).")

            def started_or_gone():
                from engine import jobs as Q
                return (d / RUN_JSON).is_file() or not status_of((Q.get(job_id, root) or {}).get("status")).active
            _poll_until(started_or_gone)
        else:
            if queued is not None:
                st.error(f"The job {queued} before it started; see its log on the Jobs page.")
            if st.button("Continue pre-training MiniLM (MLM + NSP)", key="probe_ready_go", type="primary"):
                with guard("launching the job"):
                    from engine import jobs as Q
                    job = Q.submit(argv(root), name=d.name, run_dir=str(d), root=str(root))
                    st.session_state["probe_ready_job"] = job["id"]
                    st.rerun()
        return
    if status_of(status) is RUNNING:
        _live(d)
        return
    if status_of(status) is FINISHED:
        st.success(f"Done: **{d.name}** is offered first on the Probe and Attention pages.")
    else:
        st.warning(f"{d.name} is {status}: {info.get('error') or 'stopped'}")
        if st.button("Resume", key="probe_ready_resume", help="continue from its last checkpoint"):
            with guard("resuming"):
                from engine import cli
                from engine import jobs as Q
                from engine.pretraining.config import PretrainConfig
                job = Q.submit(cli.resume_argv(PretrainConfig, d, quiet=True), name=f"{d.name} (resume)",
                               run_dir=str(d), root=str(root))
                st.session_state["probe_ready_job"] = job["id"]
                st.rerun()
    _numbers(d)


def _numbers(d: Path) -> None:
    """Step / total and the latest held-out MLM and NSP accuracy."""
    from engine import runs
    prog = runs.run_progress(d)
    evals = [r for r in runs.read_metrics(d) if r.get("split") == "eval"]
    c = st.columns(3)
    c[0].metric("Step", f"{prog['step'] or 0} / {prog['total'] or '?'}")
    if evals:
        c[1].metric("Held-out MLM accuracy", f"{evals[-1].get('eval_mlm_acc', 0):.3f}")
        if "eval_nsp_acc" in evals[-1]:
            c[2].metric("Held-out NSP accuracy", f"{evals[-1]['eval_nsp_acc']:.3f}")
    if prog["fraction"] is not None:
        st.progress(prog["fraction"])


def _live(d: Path) -> None:
    @st.fragment(run_every=REFRESH_SECONDS)
    def live():
        status, _ = _status(d)
        if status_of(status) is not RUNNING:
            st.rerun()
        _numbers(d)
    live()


def _poll_until(done) -> None:
    @st.fragment(run_every=REFRESH_SECONDS)
    def poll():
        if done():
            st.rerun()
    poll()
