"""Shared Streamlit helpers for the pages: the runs folder, cached model loading, error display, and the Launch of
the Fine-tune and Features pages with the confirmation every Launch gives (its job id and a link to the Jobs page).

Every page wraps its work in `guard()` so an `EngineError` (or any other failure) shows as one clear message on
the page, never a traceback.
"""
import os
import traceback
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from engine.errors import EngineError
from engine.records import RUN_JSON
from engine.commands import PRETRAIN, kind_of
from engine.objectives import MLM_HEAD, NSP_HEAD
from engine.status import FINISHED, QUEUED, status_of

DEFAULT_RUNS = os.environ.get("BERT_STUDIO_RUNS", "runs")


def runs_root() -> Path:
    return Path(st.session_state.get("runs_root", DEFAULT_RUNS)).expanduser()


def sidebar_runs_root():
    with st.sidebar:
        st.markdown("**BERT Studio**")
        val = st.text_input("Runs folder", value=st.session_state.get("runs_root", DEFAULT_RUNS), key="runs_root_input",
                            help="Where runs, checkpoints and jobs are kept; every page reads and writes here.")
        st.session_state["runs_root"] = val
        st.radio("Chart downloads", ("png", "svg"), key="chart_format", horizontal=True, format_func=str.upper,
                 help="what the camera button in every chart's toolbar saves: PNG, or SVG (vector, for papers)")


def chart_config(filename: str) -> dict:
    """The plotly config of a chart whose toolbar download is named `filename`, in the sidebar's format."""
    from studio.figures import plotly_config
    return plotly_config(filename, st.session_state.get("chart_format", "png"))


@contextmanager
def guard(what: str = "that"):
    """Show user errors as one line and unexpected ones as one line too (details in the server log)."""
    try:
        yield
    except EngineError as e:
        st.error(str(e))
    except Exception as e:  # a bug: keep the page alive and say what failed
        traceback.print_exc()
        first = (str(e).splitlines() or [""])[0][:200]
        st.error(f"{what} failed: {type(e).__name__}: {first}")


MAX_SCAN = 500  # folder entries looked at per rerun: a typed path such as /usr costs no more than a run folder


def _entries(folder: Path, limit: int = MAX_SCAN) -> list:
    """At most `limit` entries of `folder` (os.scandir order; [] when it cannot be read)."""
    import itertools
    try:
        with os.scandir(folder) as it:
            return list(itertools.islice(it, limit))
    except OSError:
        return []


def mtime_key(path: str) -> float:
    """A cache key for a model folder (0 for MiniLM) that changes when it is re-saved: the newest mtime of the
    folder, its top-level files and its checkpoints/ folder (a checkpoint is published by a rename, which changes
    the folder's mtime). Bounded work: never a walk of the tree under a typed path."""
    if path == "minilm":
        return 0.0
    p = Path(path)
    times = []
    for d in (p, p / "checkpoints"):
        try:
            times.append(d.stat().st_mtime)
        except OSError:
            pass
    for e in _entries(p):
        try:
            if e.is_file():
                times.append(e.stat().st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


@st.cache_resource(show_spinner="Loading model…", max_entries=4)
def _load_cached(path: str, mtime: float):
    import engine
    return engine.load(path)


def load_bundle(path: str):
    """engine.load, cached per (path, newest file mtime) so a re-saved checkpoint is reloaded."""
    return _load_cached(str(path), mtime_key(str(path)))


# ------------------------------------------------------------------ the probe-ready model (studio.probe_ready)
def probe_ready_dir(root) -> Path:
    """Where the probe-ready model is trained (studio.probe_ready: its button and job)."""
    from engine.pretraining.config import PROBE_READY_RUN
    return Path(root) / PROBE_READY_RUN


def probe_ready_model(root) -> str | None:
    """The probe-ready model to offer first: the button's run (probe_ready_dir) once it has a complete checkpoint and
    is the probe-ready recipe's run (engine.classroom.foreign_run: another run in that folder is not offered as it),
    else the newest other pre-training run continued from MiniLM (run.json config init "minilm") that has one."""
    from engine import runs
    from engine.classroom import foreign_run, parts
    d = probe_ready_dir(root)
    if d.is_dir() and runs.latest_checkpoint(d) is not None:
        part = next(p for p in parts(root) if p.run_dir == d.absolute())
        if not foreign_run(part):
            return str(d)
    try:
        rows = runs.list_runs(root)  # newest first
    except Exception:
        return None
    for r in rows:
        if kind_of(r.get("kind")) is PRETRAIN and r.get("checkpoint_step") is not None:
            cfg = (runs.read_run_json(r["path"]).get("config") or {})
            if cfg.get("init") == "minilm":
                return str(r["path"])
    return None


def bert_base_model() -> str | None:
    """Google's bert-base-uncased (engine.hub.BERT_BASE) when the user's Hugging Face cache holds it (`class prepare`
    fetches it when online), read from the cache with no network; else None. The model pickers offer it first."""
    from engine import hub
    return hub.BERT_BASE if hub.cached(hub.BERT_BASE) is not None else None


def fill_blanks_model(root) -> str | None:
    """The model the Probe page offers first: the probe-ready model (studio.probe_ready) once it has a checkpoint,
    else the latest checkpoint of the newest finished pre-training run whose weights hold an MLM head; None when
    there is none (a fresh runs folder: only MiniLM, which cannot fill blanks)."""
    from engine.probes import heads_on_disk
    from engine.runs import latest_checkpoint, list_runs
    ready = probe_ready_model(root)
    if ready is not None:
        return ready
    for r in list_runs(root):  # newest first
        finished = kind_of(r.get("kind")) is PRETRAIN and status_of(r.get("effective_status")) is FINISHED
        if finished and r.get("checkpoint_step") is not None:
            ck = latest_checkpoint(Path(root) / r["name"])
            if ck is not None and MLM_HEAD in (heads_on_disk(ck) or ()):
                return str(ck)
    return None


def list_model_choices(root: Path = None, probe_ready_first: bool = False, fill_first: bool = False) -> list:
    """"minilm" plus every complete checkpoint under the runs folder, newest first; with `probe_ready_first`,
    the probe-ready model (MiniLM continued-pre-trained with MLM + NSP, studio.probe_ready) first when it exists;
    with `fill_first` (the Probe page), `fill_blanks_model` first when there is one; with either, Google's
    bert-base-uncased before them when the Hugging Face cache holds it (`bert_base_model`)."""
    root = Path(root or runs_root())
    choices = ["minilm"]
    first = fill_blanks_model(root) if fill_first else None
    if first is None and probe_ready_first:
        first = probe_ready_model(root)
    if first is not None:
        choices.insert(0, first)
    bert = bert_base_model() if fill_first or probe_ready_first else None
    if bert is not None:
        choices.insert(0, bert)
    try:
        from engine.runs import list_checkpoints
    except ImportError:  # pragma: no cover
        list_checkpoints = None
    if root.is_dir():
        folders = [Path(e.path) for e in _entries(root) if not e.name.startswith(".") and e.is_dir()]
        for run in sorted(folders, key=lambda p: p.stat().st_mtime, reverse=True):
            cks = list_checkpoints(run) if list_checkpoints else []
            for ck in reversed(cks):
                choices.append(str(ck))
            if (run / "config.json").is_file():
                choices.append(str(run))
    return list(dict.fromkeys(choices))


HEAD_SKILLS = {(MLM_HEAD, NSP_HEAD): "fills blanks, scores sentence pairs", (MLM_HEAD,): "fills blanks, no NSP head",
               (NSP_HEAD,): "scores sentence pairs, no MLM head", (): "no MLM or NSP head: attention only"}


def choice_label(choice: str) -> str:
    """A picker's line for a model: its name and, when its weights tell it cheaply, what it can do."""
    from engine import hub
    from engine.probes import heads_on_disk
    name = {"minilm": "MiniLM (real weights)", hub.BERT_BASE: f"{hub.BERT_BASE} (Google's BERT-base)"}.get(choice, choice)
    heads = heads_on_disk((hub.cached(choice) or choice) if choice == hub.BERT_BASE else choice)
    return name if heads is None else f"{name} · {HEAD_SKILLS[heads]}"


def model_picker(label="Model", key="model", allow_path=True, help=None, probe_ready_first=False,
                 fill_first=False) -> str:
    """A select box of known models with an optional free path; returns the chosen path or "minilm".
    `probe_ready_first`: offer the probe-ready model first when it exists (the Attention page); `fill_first`: offer
    a model that can fill blanks first, and say on each line what the model can do (the Probe page)."""
    choices = list_model_choices(probe_ready_first=probe_ready_first, fill_first=fill_first)
    choice = st.selectbox(label, choices, key=key, format_func=choice_label if fill_first else str,
                          help=help or "MiniLM (real pretrained weights, no MLM/NSP heads) or a checkpoint of one of your runs")
    if allow_path:
        custom = st.text_input("…or a checkpoint / Hugging Face BERT folder, or a Hugging Face Hub id", key=f"{key}_path", value="",
                               help="a folder path, or a Hub id of a BERT model such as google-bert/bert-base-uncased: "
                                    "downloaded once into your Hugging Face cache, then it loads offline too. The Model, "
                                    "Probe, Attention and Layers pages also read RoBERTa, DistilBERT, ALBERT, ELECTRA, "
                                    "DeBERTa-v2/v3 and ModernBERT (e.g. FacebookAI/roberta-base)")
        if custom.strip():
            return custom.strip()
    return choice


COMPILE_CHOICES = ("auto", "on", "off")  # engine.device.COMPILES (tests check they agree; no torch import here)
PRECISION_CHOICES = ("auto", "fp32", "bf16")  # engine.device.PRECISIONS (tests check they agree; no torch import here)


def precision_select(container=st, key=None) -> str:
    """The `--precision` choice of the Pretrain and Fine-tune pages."""
    return container.selectbox("Precision", PRECISION_CHOICES, key=key,
                               help="auto: bf16 autocast (weights stay fp32) on a GPU and on CPUs with native bf16 "
                                    "units, where it measured faster; else fp32")


def follow_queued_run(root: Path, prefix: str, listed) -> None:
    """Follow the run this page just queued (its name and job id in session_state[f"{prefix}_show"] and
    [f"{prefix}_show_job"]) into the run picker (session_state[f"{prefix}_pick"]). The run has no run.json until
    its job starts, so the lists cannot show it yet: say so, and rerun the page once it exists (a page with no
    live run never refreshes by itself); once listed it becomes the picker's choice, once. A job that ended
    without creating its run (a bad argument, cancelled while queued) shows its error instead."""
    name, job_id = st.session_state.get(f"{prefix}_show"), st.session_state.get(f"{prefix}_show_job")
    if not name:
        return
    if name in listed:
        st.session_state[f"{prefix}_pick"] = name
        st.session_state.pop(f"{prefix}_show", None)
        st.session_state.pop(f"{prefix}_show_job", None)
        return
    from engine import jobs as Q

    def job_status():
        job = Q.get(job_id, root) if job_id else None
        return (job or {}).get("status", QUEUED.name), (job or {}).get("error")
    status, error = job_status()
    if not status_of(status).active:
        st.error(f"{name}: its job {status} before the run started: {error or 'see the Jobs page for its log'}")
        return
    st.info(f"**{name}** is {status}; it appears here when its job starts writing the run (the Jobs page shows the queue).")

    @st.fragment(run_every=3)
    def poll():
        if (Path(root) / name / RUN_JSON).is_file() or not status_of(job_status()[0]).active:
            st.rerun()
    poll()


def launch_run(root, name: str, model: str, make_config, prefix: str) -> tuple:
    """The Launch of the Fine-tune and Features pages: the model checked (its one-line error, no job queued), the run
    folder resolved inside the runs folder and refused when it already holds a run, the task files the config names
    checked to exist (`check_task_files`), then the command line of `make_config(run_dir)` (a FinetuneConfig or
    FeaturesConfig with out=run_dir) queued. The page's `prefix` keys remember the run to follow; the page confirms
    the job (`confirm_launch`). Returns (run folder, job record)."""
    from engine import cli, jobs as Q
    from engine import runs as R
    from engine.checkpoint import check_model
    check_model(model)
    run_dir = R.resolve_run_dir(root, name.strip())
    if (run_dir / RUN_JSON).exists():
        raise EngineError(f"run {name.strip()} already exists in {root}; pick another name")
    cfg = make_config(run_dir)
    check_task_files(cfg)
    rec = Q.submit(cli.argv(cfg), name=f"{cfg.command} {name.strip()}", run_dir=str(run_dir), root=root)
    st.session_state[f"{prefix}_show"], st.session_state[f"{prefix}_show_job"] = run_dir.name, rec["id"]
    st.session_state.pop(f"{prefix}_default_name", None)
    return run_dir, rec


def check_task_files(cfg) -> None:
    """The train and dev files a fine-tuning or features config names exist as files: a job for a file already
    known to be missing is refused here, in one line, instead of failing in the queue."""
    from engine.errors import quoted
    for part in ("train", "dev"):
        path = getattr(cfg, part, None)
        if path and not Path(path).expanduser().is_file():
            raise EngineError(f"the {part} file {quoted(path)} does not exist; check the path or pick the file again "
                              "(nothing was queued)")


JOBS_PAGE = "pages/8_Jobs.py"  # the page that follows every job live (streamlit_app.PAGES)


def confirm_launch(prefix: str, text: str, job_id: str) -> None:
    """Remember a Launch's confirmation (`text`, its job id) for `launch_confirmation` to show on every rerun of
    the page until its next Launch (a rerun that follows the job would otherwise wipe a one-off message)."""
    st.session_state[f"{prefix}_launched"] = (text, job_id)


def launch_confirmation(prefix: str) -> None:
    """The page's last Launch: its line, with the job id, and a link to the Jobs page that follows the job live."""
    done = st.session_state.get(f"{prefix}_launched")
    if not done:
        return
    text, job_id = done
    st.success(text)
    page_link(JOBS_PAGE, f"Follow job {job_id} live on the Jobs page")


def page_link(page: str, label: str) -> None:
    """st.page_link to one of the router's pages; a page run without the router (`streamlit run pages/X.py`, AppTest
    on one file) has no pages to link to, and shows the label alone."""
    from streamlit.errors import StreamlitPageNotFoundError
    try:
        st.page_link(page, label=label)
    except StreamlitPageNotFoundError:
        st.caption(label)


def resume_button(root: Path, run_dir: Path, config_cls, status: str, kept: str, where=st, **flags) -> None:
    """The Resume button of every page, for a run of `config_cls`'s command (PretrainConfig, FinetuneConfig,
    FeaturesConfig) that stopped before it finished: it queues `python -m engine COMMAND --out RUN --resume` plus
    `flags` (the run's own settings; `kept` says what is kept, e.g. "the finished trials"). `where`: the column."""
    if not status_of(status).resumable:
        return
    kind = config_cls.command
    if where.button("Resume", key=f"resume-{kind}-{run_dir.name}", help=f"continue with the run's own settings: {kept} kept"):
        from engine import jobs as Q
        from engine.cli import resume_argv
        with guard("resuming"):
            rec = Q.submit(resume_argv(config_cls, run_dir, **flags), name=f"{kind} {run_dir.name} (resume)",
                           run_dir=str(run_dir), root=str(root))
            st.toast(f"queued {rec['id']}: {run_dir.name} continues")
