"""Pre-train: launch a pre-training run as its own process, follow its curves live, cancel or resume it.

Thin: the form builds the `python -m engine pretrain ...` flags and hands them to the job launcher
(engine.jobs), so a page reload or a closed tab loses nothing. The form is plain widgets, not an st.form (where Enter
in any box submits): only a click on Launch queues a run, and Launch is disabled while the form holds a mistake,
whose line (studio.pretrain_form.launch_problem) stands beside it; the run list and the curves are read from the
run folders (engine.runs) and refreshed with `st.fragment(run_every=...)` while a run is alive.
"""
from pathlib import Path

import streamlit as st

from engine.measured import fact
from engine.records import CURVE_X
from engine.commands import PRETRAIN, kind_of
from engine.status import RUNNING, UNREADABLE, status_of
from studio.common import (COMPILE_CHOICES, chart_config, follow_queued_run, guard, precision_select, resume_button,
                           runs_root)
from studio.pretrain_figures import pretraining_curves

REFRESH_SECONDS = 2.0
CLASSROOM_MINUTES = fact("classroom_run.minutes_bf16")


# ------------------------------------------------------------------------------------------------- launching
def _launch(argv: list, name: str, run_dir: Path, root: Path) -> tuple:
    """Queue the run (engine.jobs). Returns (how, job id)."""
    from engine import jobs
    job = jobs.submit(argv, name=name, run_dir=str(run_dir), root=str(root))
    return f"job {job['id']} {job['status']}", job["id"]


def prepared_data_picker(root: Path):
    """'Training data': build from the corpus of the form, or a folder made by `python -m engine prepare` (found
    under <runs folder>/prepared and ~/.cache/bert_studio/prepared, or typed), with its statistics. Returns the
    chosen folder or None."""
    from engine.pretraining.prepare import DEFAULT_PREPARED_DIR, list_prepared, prepared_stats

    found = [str(p) for p in list_prepared(root / "prepared") + list_prepared(DEFAULT_PREPARED_DIR)]
    build, typed = "build from a corpus (the form below)", "a prepared folder at a path"
    choice = st.selectbox("Training data", [build] + found + [typed], key="pretrain_data",
                          help="big corpora are prepared once, outside the studio: python -m engine prepare --corpus PATH "
                               "--out FOLDER (put FOLDER under <runs folder>/prepared to find it here)")
    if choice == build:
        return None
    path = st.text_input("Prepared data folder", key="pretrain_data_path").strip() if choice == typed else choice
    if not path:
        return None
    stats = None
    with guard("reading the prepared data"):
        stats = prepared_stats(path)
    if stats is None:
        return None
    c = st.columns(5)
    c[0].metric("Documents", f"{stats['documents']:,}")
    c[1].metric("Instances", f"{stats['instances']:,}")
    c[2].metric("Tokens", f"{stats['tokens']:,}")
    c[3].metric("Shards", f"{stats['shards']:,}")
    c[4].metric("Words", f"{stats['words']:,}")
    from engine.pretraining.input_formats import input_format
    st.caption(f"{stats['objective']} instances ({input_format(stats.get('input_format')).label}) of {stats['seq_len']} "
               f"tokens, a {stats['vocab_size']:,}-token vocabulary, "
               f"{stats['instances_eval']:,} held-out instances, {stats['parts']} part(s). The run takes its objective, "
               "input format, sequence length, vocabulary and held-out split from this data (the form's corpus, "
               "objective, input format, length and vocabulary size are not used).")
    return path


def launch_form(root: Path) -> None:
    """The form, no st.form: Enter in a box only commits that box; Launch is the one button that queues a run, and
    is disabled while the form holds a mistake (its line beside it)."""
    from studio.common import list_model_choices
    from studio.pretrain_form import form_defaults

    init_choice = st.selectbox(
        "Start from", ["random weights (pre-train from scratch)", "minilm"] + list_model_choices()[1:],
        key="pretrain_init", format_func=lambda c: "MiniLM (all-MiniLM-L6-v2, real weights)" if c == "minilm" else c,
        help="from scratch (the classroom run), or continue pre-training a model you have (--init): it keeps that "
             "model's size, vocabulary and weights; heads it lacks start as the paper's")
    init = None if init_choice.startswith("random") else init_choice
    D = form_defaults(init)  # every default of the form (engine/pretraining/config.py)
    data = prepared_data_picker(root)
    st.subheader("New pre-training run")
    st.caption(form_caption(init, D))
    form = {"init": init, "data": data, **corpus_fields(init, D), **model_fields(init, D)}
    form.update(training_fields(init, data, D))
    launch_row(form, root)


def form_caption(init, D) -> str:
    """What the form's defaults are: the classroom run, or the continued-pre-training recipe."""
    from engine.objectives import objective
    from engine.pretraining.config import PretrainConfig
    from studio.pretrain_form import preset_size
    if init:
        return (f"Continued pre-training of `{init}`: its architecture and vocabulary; the defaults are the "
                f"continued-pre-training recipe ({D.steps} steps of {D.batch_size} x {D.seq_len} at "
                f"learning rate {D.lr:g}, on {D.corpus}" +
                (f"; the first {D.heads_first_steps()} train only the new heads on the frozen encoder" if D.heads_first else "") + ").")
    L, H, _ = preset_size(D.preset)
    P = PretrainConfig()  # the paper's settings
    return (f"The defaults are the classroom run: a {D.preset} BERT ({L} layers, hidden {H}) on "
            f"{D.corpus}, {objective(D.objective).label}, "
            f"{D.steps:,} steps of {D.batch_size} sequences, {D.seq_len} tokens then {D.phase2_seq_len} for the "
            f"last {D.phase2_fraction:.0%} (the paper's short-then-long schedule, scaled down: a tiny model "
            f"learns to read context far sooner from short sequences), {CLASSROOM_MINUTES.text()} on "
            f"{CLASSROOM_MINUTES.where}; it masks "
            f"{D.mask_rate:.0%} of the tokens at learning rate {D.lr:.0e}, dropout {D.dropout:g} (the paper: "
            f"{P.mask_rate:.0%}, {P.lr:.0e}, dropout {P.dropout:g}).")


def launch_row(form: dict, root: Path) -> None:
    """Launch, disabled with the form's first mistake beside it (studio.pretrain_form.launch_problem: the engine's
    own checks); a click queues the run and confirms it with its job id and a link to the Jobs page."""
    from studio.common import confirm_launch, launch_confirmation, load_bundle
    from studio.pretrain_form import build, launch_problem
    problem = "the model to continue could not be loaded (see above)"
    with guard("loading the model to continue"):
        problem = launch_problem(form, root, load_bundle(form["init"]) if form["init"] else None)
    c1, c2 = st.columns([1, 5])
    clicked = c1.button("Launch", type="primary", key="pretrain_launch", disabled=problem is not None)
    if problem is not None:
        c2.error(problem)
    if clicked and problem is None:
        with guard("launching the run"):
            from engine import cli
            run_name, run_dir, cfg = build(form, root, bundle=load_bundle(form["init"]) if form["init"] else None)
            how, job_id = _launch(cli.argv(cfg), run_name, run_dir, root)
            # follow it below at once: "queued" until its job writes the run, then the picker moves to it
            st.session_state["pretrain_show"], st.session_state["pretrain_show_job"] = run_name, job_id
            confirm_launch("pretrain", f"Launched **{run_name}** ({how}); its curves follow below under Runs.", job_id)
    launch_confirmation("pretrain")


def corpus_fields(init, D) -> dict:
    """The run name and the corpus (built-in, a path, or an upload): typing a path or uploading a file picks the
    Corpus choice that uses it."""
    from engine.corpora import builtin_corpora
    from studio.pretrain_form import PATH, UPLOAD
    c1, c2, c3 = st.columns(3)
    name = c1.text_input("Run name", placeholder="bert-tiny-bbc", key="pretrain_name",  # the Start page may fill it in
                         help="Letters, digits and - _ . + =; the folder under the runs folder")
    corpora = builtin_corpora() + [PATH, UPLOAD]
    key = f"pretrain_corpus-{init or 'scratch'}"  # another init: its own default corpus
    if st.session_state.get(key) not in corpora:
        st.session_state[key] = D.corpus

    def picks(choice, box):  # a path typed, a file uploaded: the Corpus choice follows
        if st.session_state.get(box):
            st.session_state[key] = choice
    corpus_kind = c2.selectbox("Corpus", corpora, key=key,
                               help="BBC News (2,225 articles), a Wikipedia extract, the State of the Union addresses "
                                    "1790-2026, all three (all), the Wikipedia vital articles (wikivital, when its "
                                    "optional package is installed), or your own text: a .txt with blank lines "
                                    "between documents, a folder of .txt files, or a .jsonl with a \"text\" field")
    corpus_path = c3.text_input("Corpus path", value="", key="pretrain_corpus_path", on_change=picks,
                                args=(PATH, "pretrain_corpus_path"),
                                help=f"a .txt file, a folder of .txt files or a .jsonl; typing one picks '{PATH}'")
    upload = st.file_uploader("Corpus file (.txt or .jsonl)", type=["txt", "jsonl"], key="pretrain_upload",
                              on_change=picks, args=(UPLOAD, "pretrain_upload"),
                              help=f"uploading one picks '{UPLOAD}'")
    return {"name": name, "corpus_kind": corpus_kind, "corpus_path": corpus_path,
            "upload_name": upload.name if upload is not None else None,
            "upload_bytes": upload.getvalue() if upload is not None else None}


def model_fields(init, D) -> dict:
    """Model size (a preset or L/H/A; an init decides it), objective and input format."""
    from engine import cli
    from engine.config import PRESETS
    from engine.objectives import OBJECTIVES
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.input_formats import INPUT_FORMATS
    from studio.pretrain_form import FORM_RANGES as N
    from studio.pretrain_form import preset_size
    c1, c2, c3, c4 = st.columns(4)
    size_help = "" if not init else " (ignored: the init decides the size)"
    off = bool(init)
    L, H, A = preset_size(D.preset)
    size_mode = c1.radio("Model size", ["preset", "custom L/H/A"], horizontal=True, disabled=off)
    preset = c2.selectbox("Preset", list(PRESETS), index=list(PRESETS).index(D.preset), disabled=off,
                          help=", ".join(f"{k} {l}/{h}" for k, (l, h, _) in PRESETS.items()) + " (layers/hidden)" + size_help)
    layers = c3.number_input("Layers L", value=L, step=N["layers"][2], help="custom size only" + size_help, disabled=off)
    hidden = c4.number_input("Hidden H", value=H, step=N["hidden"][2],
                             help="custom size only; heads must divide it" + size_help, disabled=off)
    heads = c4.number_input("Heads A", value=A, step=N["heads"][2], help="custom size only" + size_help, disabled=off)
    names = list(OBJECTIVES)
    objective = c3.selectbox("Objective", names, index=names.index(D.objective), format_func=lambda n: OBJECTIVES[n].label)
    formats = list(INPUT_FORMATS)
    input_format = c2.selectbox("Input format (RoBERTa)", formats, index=formats.index(D.input_format),
                                format_func=lambda n: INPUT_FORMATS[n].label,
                                help=cli.field_setting(PretrainConfig, "input_format")[1])
    generator = c1.number_input("Generator size (ELECTRA)", value=float(D.generator_size), step=N["generator_size"][2],
                                disabled=not OBJECTIVES[objective].generator, help=cli.field_setting(PretrainConfig, "generator_size")[1])
    return {"size_mode": size_mode, "preset": preset, "layers": int(layers), "hidden": int(hidden), "heads": int(heads),
            "objective": objective, "input_format": input_format,
            **({"generator_size": float(generator)} if OBJECTIVES[objective].generator else {})}


def training_fields(init, data, D) -> dict:
    """Masking, steps, batch, lengths, learning rate, seed, vocabulary, cadence, precision, second phase."""
    from engine import cli
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.masking import PAPER_RATE
    from studio.pretrain_form import FORM_RANGES as N
    from studio.pretrain_form import length_choices
    c1, c2, c3, c4 = st.columns(4)
    mask_rate = c1.slider("Masking rate", *N["mask_rate"][:2], D.mask_rate, N["mask_rate"][2],
                          help=f"share of the tokens the MLM predicts (paper {PAPER_RATE:.0%}; the classroom run "
                               f"{PretrainConfig.classroom().mask_rate:.0%})")
    ratios = tuple(c.number_input(label, value=float(r), step=N["mask_ratio"][2]) for c, label, r in
                   zip((c2, c3, c4), ("→ [MASK]", "→ random token", "→ unchanged"), D.mask_ratios))
    whole_word = c1.checkbox("Whole-word masking", value=D.whole_word_mask)
    spans = c1.checkbox("Span masking (SpanBERT)", value=D.span_mask, help=cli.field_setting(PretrainConfig, "span_mask")[1])
    boundary = c1.checkbox("Span boundary objective (SpanBERT)", value=D.span_boundary, disabled=not spans,
                           help=cli.field_setting(PretrainConfig, "span_boundary")[1])
    static = c1.checkbox("Static masks (RoBERTa Table 1)", value=D.static_masking,
                         help=cli.field_setting(PretrainConfig, "static_masking")[1])
    packing = c2.checkbox("Pack sequences", value=D.packing, help="each step's instances share rows with no padding "
                          "between them: the same losses and gradients, fewer rows to compute")
    compile_choice = c3.selectbox("Compile", COMPILE_CHOICES, index=COMPILE_CHOICES.index(D.compile),
                                  help="auto: torch.compile the model on a GPU, where a step measured faster compiled "
                                       "(the first steps wait for the compiler), not on a CPU; on; off")
    c1, c2, c3, c4, c5 = st.columns(5)
    steps = c1.number_input("Steps", value=D.steps, step=N["steps"][2])
    batch = c2.number_input("Batch size", value=D.batch_size, step=N["batch_size"][2])
    lengths = length_choices(D)
    seq_len = c3.selectbox("Sequence length", lengths, index=lengths.index(D.seq_len),
                           help="tokens per instance in the first phase (paper: 128)")
    lr = c4.number_input("Learning rate", value=D.lr, step=N["lr"][2], format="%.1e")
    seed = c5.number_input("Seed", value=D.seed, step=N["seed"][2])
    c1, c2, c3, c4, c5 = st.columns(5)
    vocab = c1.number_input("Vocabulary size", value=D.vocab_size, step=N["vocab_size"][2], disabled=bool(init),
                            help="a WordPiece vocabulary trained on the corpus" + ("" if not init else " (ignored: the init brings its own)"))
    save_every = c2.number_input("Checkpoint every (steps)", value=D.save_every, step=N["every"][2])
    eval_every = c3.number_input("Evaluate every (steps)", value=D.eval_every, step=N["every"][2])
    precision = precision_select(c4)
    heads_first = c5.number_input("Heads first (share)", value=float(D.heads_first), step=N["heads_first"][2],
                                  disabled=not init, help="the first share of the steps trains only the new heads on the "
                                  "frozen encoder, then the whole model (the probe-ready recipe's start)" +
                                  ("" if init else " (continued pre-training only)"))
    phase2, phase2_share = phase2_fields(data, D)
    return {"mask_rate": float(mask_rate), "mask_ratios": tuple(float(r) for r in ratios), "whole_word_mask": bool(whole_word),
            "span_mask": bool(spans), "span_boundary": bool(spans and boundary), "static_masking": bool(static),
            "packing": bool(packing), "compile": compile_choice, "steps": int(steps), "batch_size": int(batch), "seq_len": int(seq_len), "lr": float(lr), "seed": int(seed),
            "vocab": int(vocab), "save_every": int(save_every), "eval_every": int(eval_every), "precision": precision,
            "phase2": phase2, "phase2_fraction": float(phase2_share), **({"heads_first": float(heads_first)} if init else {})}


def phase2_fields(data, D) -> tuple:
    """The second phase's length (None: one phase) and its share of the steps."""
    from engine.pretraining.config import PretrainConfig as C
    from studio.pretrain_form import FORM_RANGES as N
    from studio.pretrain_form import phase2_choices
    c1, c2, _ = st.columns([1, 1, 2])
    phase2s = phase2_choices(D)
    phase2 = c1.selectbox("Second phase at", phase2s, index=phase2s.index(None if data else D.phase2_seq_len),
                          format_func=lambda t: "none" if t is None else f"{t} tokens",
                          help="the paper's short-then-long schedule: the last share of the steps on longer sequences "
                               "(paper: 10% at 512). A tiny model learns context far sooner from short sequences: "
                               f"the classroom run is {C.seq_len} tokens, then {C.phase2_seq_len} for the last "
                               f"{C.phase2_fraction:.0%} of the steps (BENCHMARKS.md)" +
                               (" (ignored with prepared data: they have one length)" if data else ""))
    phase2_share = c2.number_input("Second phase share", value=D.phase2_fraction, step=N["phase2_fraction"][2],
                                   format="%.2f")
    return phase2, phase2_share


# ------------------------------------------------------------------------------------------------- runs
def pretrain_rows(root: Path) -> list:
    """The pre-training runs, newest first; a run whose run.json cannot be read stays listed with its error (a
    pre-training folder: tokenizer/, checkpoints/)."""
    from engine import runs
    return [r for r in runs.list_runs(root) if kind_of(r.get("kind")) is PRETRAIN or (
        status_of(r["effective_status"]) is UNREADABLE and any((Path(r["path"]) / d).is_dir() for d in ("tokenizer", "checkpoints")))]


def runs_table(root: Path, pending: bool = False) -> list:
    import pandas as pd

    from studio.pretrain_form import table_rows
    rows = pretrain_rows(root)
    if not rows:
        if not pending:  # a run just launched is shown as queued below instead
            st.info(f"No pre-training runs in {root} yet; launch one above.")
        return rows
    st.dataframe(pd.DataFrame(table_rows(rows)), hide_index=True, width="stretch")
    return rows


def run_view(run_dir: Path, root: Path) -> str:
    """Status, numbers, curves and buttons of one run (re-run every few seconds while it is alive); returns its status."""
    from engine import runs
    from engine.objectives import MLM_NSP, OBJECTIVES
    from engine.pretraining.run import PretrainConfig
    from studio.pretrain_form import STATUS_ICON, no_context_hint, stopped_notice

    info = runs.read_run_json(run_dir)
    status = runs.effective_status(run_dir, info)
    recs = runs.read_metrics(run_dir)
    train = [r for r in recs if r.get("split", "train") == "train" and "loss" in r]
    evals = [r for r in recs if r.get("split") == "eval"]
    cfg = info.get("config") or {}
    objective = cfg.get("objective", MLM_NSP.name)
    obj = OBJECTIVES.get(objective, MLM_NSP)
    ck = runs.latest_checkpoint(run_dir)

    st.markdown(f"**{run_dir.name}** — {STATUS_ICON.get(status, status)} · {OBJECTIVES[objective].label if objective in OBJECTIVES else objective} · "
                f"{cfg.get('preset', '?')} on {Path(str(cfg.get('corpus', '?'))).name} · seq {cfg.get('seq_len', '?')}"
                + (f" → {cfg['phase2_seq_len']}" if cfg.get("phase2_seq_len") else "") + " · "
                f"batch {cfg.get('batch_size', '?')} · {info.get('device', '')}"
                + {True: " · bf16", False: " · fp32"}.get(info.get("bf16"), ""))  # the precision the run really used
    notice = stopped_notice(status, info, ck)
    if notice:
        getattr(st, notice[0])(notice[1])
    last_eval = run_numbers(info, train, evals, obj)
    hint = no_context_hint(cfg, last_eval)
    if hint:
        st.info(hint)

    b1, b2, _ = st.columns([1, 1, 4])
    if status_of(status) is RUNNING and b1.button("Cancel", key=f"cancel-{run_dir.name}", help="Stop at the end of the current step, after a checkpoint"):
        with guard("cancelling"):
            from engine import jobs
            st.toast(jobs.stop_run(run_dir, root=str(root)))
    kept = f"checkpoint {ck.name} is" if ck is not None else "nothing is (no checkpoint yet: it starts from step 0)"
    resume_button(root, run_dir, PretrainConfig, status, kept, where=b2, quiet=True)

    if not train and not evals:
        st.caption("No metrics yet (the corpus, tokenizer and data are being prepared).")
        return status
    c1, c2 = st.columns(2)
    x = c1.radio("x axis", list(CURVE_X), format_func=CURVE_X.get, horizontal=True, key="pretrain_x")
    smoothing = c2.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="pretrain_smooth",
                          help="debiased exponential moving average of the training curves (as TensorBoard); 0 = raw")
    for title, fig in pretraining_curves(train, evals, obj, x, smoothing):
        st.plotly_chart(fig, width="stretch", key=f"chart-{title}", config=chart_config(f"pretrain-{title.lower().replace(' ', '-')}"))
    return status


def run_numbers(info: dict, train: list, evals: list, obj) -> dict:
    """The six numbers of a run (step, held-out accuracy, at [MASK], perplexity, NSP, throughput); returns the last
    held-out record."""
    last_train = train[-1] if train else {}
    last_eval = evals[-1] if evals else {}
    tok = obj.token
    cols = st.columns(3) + st.columns(3)  # two rows of three: six in one row truncate the numbers
    cols[0].metric("Step", f"{last_train.get('step', 0)} / {info.get('total_steps', '?')}")
    cols[1].metric(f"Held-out {obj.token_label} accuracy",
                   f"{last_eval[f'eval_{tok}_acc']:.3f}" if f"eval_{tok}_acc" in last_eval else "–")
    mask_acc, mask_base = last_eval.get("eval_mlm_mask_acc"), last_eval.get("eval_mlm_mask_baseline")
    cols[2].metric("Held-out accuracy at [MASK]", f"{mask_acc:.3f}" if mask_acc is not None else "–",
                   delta=f"{mask_acc - mask_base:+.3f} vs most frequent ({mask_base:.3f})"
                   if mask_acc is not None and mask_base is not None else None,
                   help="Only the held-out positions whose input is [MASK]: there the model cannot copy its input, so "
                        "only context helps. A model that has learned just the unigram distribution and copying scores "
                        "the most frequent token's share here."
                        + (f" Scored on {last_eval['eval_seq_len']}-token held-out text, the length being trained (a "
                           "second phase switches to its own length)." if last_eval.get("eval_seq_len") else ""))
    cols[3].metric("Held-out perplexity", f"{last_eval[f'eval_{tok}_ppl']:.1f}" if f"eval_{tok}_ppl" in last_eval else "–")
    base = last_eval.get("eval_nsp_baseline")
    cols[4].metric("Held-out NSP accuracy", f"{last_eval['eval_nsp_acc']:.3f}" if "eval_nsp_acc" in last_eval else "–",
                   delta=f"{last_eval['eval_nsp_acc'] - base:+.3f} vs a no-model rule ({base:.3f})"
                   if "eval_nsp_acc" in last_eval and base is not None else None,
                   help="The baseline is the best trivial rule (one class, or a threshold on a segment's length) fitted "
                        "on the held-out pairs: the model has learned NSP only where it beats it.")
    cols[5].metric("Tokens / s", f"{last_train['tokens_per_s']:,.0f}" if "tokens_per_s" in last_train else "–")
    return last_eval


def runs_section(root: Path, alive: bool) -> None:
    """The runs table, the run picker and the picked run, refreshed together while a run is alive (so the table's
    step and checkpoint move with the numbers and curves below it)."""
    @st.fragment(run_every=REFRESH_SECONDS if alive else None)
    def live():
        rows = []
        with guard("listing runs"):
            rows = runs_table(root, pending=bool(st.session_state.get("pretrain_show")))
        if rows:
            names = [r["name"] for r in rows]
            picked = st.session_state.pop("pretrain_pick", None)
            if picked in names:
                st.session_state["pretrain_run"] = picked
            elif st.session_state.get("pretrain_run") not in names:
                st.session_state.pop("pretrain_run", None)
            choice = st.selectbox("Run", names, key="pretrain_run")
            with guard("showing the run"):
                run_view(Path(next(r for r in rows if r["name"] == choice)["path"]), root)
        if alive != any(status_of(r["effective_status"]) is RUNNING for r in rows):
            st.rerun()  # a run started or ended: poll, or stop polling
    live()


# ------------------------------------------------------------------------------------------------- page
st.title("Pre-train")
st.caption("Pre-train BERT on BBC News, Wikipedia or your own text (paper 3.1): masked LM + next-sentence prediction, "
           "or the ablations MLM only and left-to-right. Runs go on as their own processes; this page only watches them.")
root = runs_root()
with guard("the launch form"):
    launch_form(root)

st.subheader("Runs")
listed = []
with guard("listing runs"):
    listed = pretrain_rows(root)
follow_queued_run(root, "pretrain", [r["name"] for r in listed])  # a run just launched: queued, then picked once listed
runs_section(root, any(status_of(r["effective_status"]) is RUNNING for r in listed))
