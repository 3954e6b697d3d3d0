"""What the Pre-train page computes (no streamlit import, tested directly): the launch form's default run name, its
corpus and the run's settings checked before anything is queued, the runs table's rows, the notice of a stopped
run, and whether the "no context learned yet" hint applies.

- `form_defaults(init)`: the config whose values the form shows first (the classroom recipe, or the continued
  pre-training recipe); `FORM_RANGES`, `length_choices`, `phase2_choices`: the boxes' ranges and choices, beside the config.
- `default_name(form)`: the run name when the Run name box is empty.
- `corpus_of(form, root)`: the corpus the form names (a built-in one, a path that exists, an upload saved under the
  runs folder).
- `check_ranges(form)`: each number box inside its FORM_RANGES (the boxes themselves take any number, so a value out
  of range reaches this check instead of being refused silently by the browser).
- `build(form, root)`: (run name, run folder, PretrainConfig), every mistake one EngineError line;
  `launch_problem(form, root)`: that line for the page to show beside a disabled Launch, before anything is saved.
- `table_rows(rows)`: the runs table, from engine.runs.list_runs rows.
- `stopped_notice(status, info, checkpoint)`: (kind, text) for a failed, dead or cancelled run, in the page's words
  (its Resume button, not a command-line flag).
- `no_context_hint(config, last_eval)`: the hint's text when a run is on the most-frequent-token plateau and is not
  already the classroom run (whose defaults the hint recommends), else None.
"""
from dataclasses import replace
from pathlib import Path

from engine.errors import EngineError
from engine.status import CANCELLED, DEAD, FAILED, status_of

PATH, UPLOAD = "a path on this machine", "an uploaded file"  # the Corpus box's two non-built-in choices
NO_CONTEXT_MARGIN = 0.01  # accuracy at [MASK] within a point of the most frequent token's share: nothing from context
STATUS_ICON = {"running": "🟢 running", "finished": "✅ finished", "failed": "❌ failed", "cancelled": "⏹️ cancelled",
               "dead": "💀 dead (process gone; resume it)", "unreadable": "⚠️ unreadable"}


# (lowest, highest, step) of the form's number boxes: what the form launches (check_ranges), read from the config's
# fields (`limits=`, engine.cli.field_limits); the config's own checks (engine.pretraining.config.validate) refuse
# the rest with one line. A box named for several fields reads the first: "mask_ratio" each share, "every" both cadences.
def _form_ranges() -> dict:
    from engine.cli import field_limits
    from engine.pretraining.config import PretrainConfig
    fields = {"mask_ratio": "mask_ratios", "every": "eval_every"}
    names = ("mask_rate", "mask_ratio", "steps", "batch_size", "lr", "seed", "vocab_size", "every", "phase2_fraction",
             "layers", "hidden", "heads", "heads_first", "generator_size")
    return {n: field_limits(PretrainConfig, fields.get(n, n)) for n in names}


FORM_RANGES = _form_ranges()


def form_defaults(init=None):
    """The PretrainConfig whose values the form shows first: the classroom recipe (what the command trains when no
    recipe is named), or for a model to continue the continued-pre-training recipe (engine/recipes.py)."""
    from engine.pretraining.config import PretrainConfig
    return PretrainConfig.for_init(init) if init else PretrainConfig.classroom()


def length_choices(cfg) -> list:
    """The Sequence length box's choices: powers of two from 32 up to the model's positions, and the config's own."""
    return sorted({2 ** k for k in range(5, 10) if 2 ** k <= cfg.max_positions} | {cfg.seq_len})


def phase2_choices(cfg) -> list:
    """The Second phase box's choices: none, or a length above the shortest the first phase may take."""
    lengths = length_choices(cfg)
    return [None] + sorted({t for t in lengths if t > lengths[0]} | ({cfg.phase2_seq_len} - {None}))


def preset_size(name: str) -> tuple:
    """(layers, hidden, heads) of a model preset (engine.config.PRESETS): the custom boxes' first values."""
    from engine.config import PRESETS
    return PRESETS[name]


def default_name(form: dict) -> str:
    """`form`: the launch form's values (init, size_mode, preset, layers, hidden, objective)."""
    objective = form["objective"].replace("+", "_")
    init = form.get("init")
    if init:
        return f"{Path(init).name if init != 'minilm' else 'minilm'}-continued-{objective}"
    size = form["preset"] if form["size_mode"] == "preset" else f"L{form['layers']}H{form['hidden']}"
    return f"bert-{size}-{objective}"


def corpus_of(form: dict, root, save: bool = True) -> str:
    """The corpus to train on (form: corpus_kind, corpus_path, upload_name, upload_bytes, data); `save` False: an
    upload's name only (the form's live check writes nothing)."""
    if form.get("data"):
        return "bbc"  # unused: the prepared data say what they were made from
    kind = form["corpus_kind"]
    if kind == PATH:
        path = form.get("corpus_path", "").strip()
        if not path:
            raise EngineError("give the corpus path, or pick a built-in corpus (bbc, wiki, sotu, all)")
        if not Path(path).expanduser().exists():
            from engine.errors import quoted
            raise EngineError(f"'Corpus path' {quoted(path)} does not exist; give the path of a .txt file, a folder of "
                              ".txt files or a .jsonl file on this machine")
        return path
    if kind == UPLOAD:
        if form.get("upload_bytes") is None:
            raise EngineError("upload a .txt or .jsonl corpus file, or pick another corpus")
        if not save:
            return form["upload_name"]
        from studio.uploads import save_upload
        return str(save_upload(root, form["upload_name"], form["upload_bytes"], ("txt", "jsonl"),
                               "corpus file (plain text or JSON lines)"))
    return kind


# the number boxes: form key -> (its FORM_RANGES entry, the flag whose box it is: FORM_LABELS names it)
NUMBER_BOXES = {"steps": ("steps", "--steps"), "batch_size": ("batch_size", "--batch-size"), "lr": ("lr", "--lr"),
                "seed": ("seed", "--seed"), "vocab": ("vocab_size", "--vocab-size"),
                "save_every": ("every", "--save-every"), "eval_every": ("every", "--eval-every"),
                "phase2_fraction": ("phase2_fraction", "--phase2-fraction"), "heads_first": ("heads_first", "--heads-first"),
                "layers": ("layers", "--layers"), "hidden": ("hidden", "--hidden"), "heads": ("heads", "--heads"),
                "generator_size": ("generator_size", "--generator-size")}


def _number(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def check_ranges(form: dict) -> None:
    """Each number box the run uses (the custom size only for a custom size from scratch, the vocabulary only from
    scratch) inside its FORM_RANGES; else one line naming the box, its bound and the fix."""
    unused = ({"layers", "hidden", "heads"} if form.get("init") or form.get("size_mode") == "preset" else set()) | (
        {"vocab"} if form.get("init") else set())
    for key, (kind, flag) in NUMBER_BOXES.items():
        if key not in form or key in unused:
            continue
        lo, hi, _ = FORM_RANGES[kind]
        v = form[key]
        if not lo <= v <= hi:
            above = v > hi
            raise EngineError(f"'{FORM_LABELS[flag]}' {_number(v)} is {'above' if above else 'below'} "
                              f"{_number(hi if above else lo)}, the {'most' if above else 'least'} this form takes; "
                              f"{'lower' if above else 'raise'} it")


def launch_problem(form: dict, root, bundle=None):
    """The line that keeps Launch disabled: the first mistake `build` finds in the form (an upload is not saved,
    nothing is queued), or None. `bundle`: the init, already loaded."""
    try:
        build(form, root, bundle=bundle, save=False)
    except EngineError as e:
        return str(e)
    return None


def build(form: dict, root, bundle=None, save: bool = True) -> tuple:
    """(run name, run folder, PretrainConfig) of the launch form, checked as the job would check it. `bundle`: the
    init, already loaded (else loaded here); `save` False: an upload is not written (corpus_of)."""
    from engine import runs
    from engine.pretraining.config import PretrainConfig
    from engine.pretraining.plan import resolve
    root = Path(root)
    check_ranges(form)
    run_name = runs.safe_run_name(form.get("name", "").strip() or default_name(form))
    run_dir = runs.resolve_run_dir(root, run_name)
    if (run_dir / runs.RUN_JSON).exists():
        raise EngineError(f"a run named '{run_name}' already exists; pick another name, or select it below and Resume it")
    init, data = form.get("init"), form.get("data")
    if data and init:
        raise EngineError("continued pre-training keeps the model's own vocabulary, so it cannot train from prepared "
                          "data (made with its own vocabulary); pick 'build from a corpus' or start from random weights")
    settings = dict(corpus=corpus_of(form, root, save), out=str(run_dir), quiet=True,
                    phase2_seq_len=int(form["phase2"]) if form.get("phase2") and not data else None,
                    **{k: form[k] for k in ("objective", "steps", "batch_size", "seq_len", "mask_rate", "mask_ratios",
                                            "whole_word_mask", "lr", "seed", "save_every", "eval_every", "precision",
                                            "phase2_fraction")},
                    **{k: form[k] for k in ("span_mask", "span_boundary", "static_masking", "input_format", "generator_size")
                       if k in form},
                    **{k: form[k] for k in ("packing", "compile", "heads_first") if k in form})
    if init:  # continued pre-training: the init's size and vocabulary, filled in (and checked) by resolve_init
        cfg = PretrainConfig.for_init(init, **settings)
    else:
        custom = ({"layers": form["layers"], "hidden": form["hidden"], "heads": form["heads"]}
                  if form["size_mode"] != "preset" else {})
        cfg = PretrainConfig.classroom(vocab_size=form["vocab"], preset=form["preset"] if not custom else "tiny", **settings,
                                       **custom)
    try:  # the form's mistakes show here, not in a failed job: the data's own settings, the checks, the init's size
        return run_name, run_dir, resolve(replace(cfg, data=data) if data else cfg, bundle=bundle)
    except EngineError as e:
        raise EngineError(_form_words(str(e))) from None


# the form's boxes by the flags the engine's checks name (the page speaks of its boxes, not of command-line flags)
FORM_LABELS = {"--heads-first-lr": "Heads first learning rate", "--heads-first": "Heads first (share)", "--steps": "Steps",
               "--batch-size": "Batch size", "--seq-len": "Sequence length", "--phase2-seq-len": "Second phase at",
               "--phase2-fraction": "Second phase share", "--mask-rate": "Masking rate", "--lr": "Learning rate",
               "--seed": "Seed", "--vocab-size": "Vocabulary size", "--save-every": "Checkpoint every (steps)",
               "--eval-every": "Evaluate every (steps)", "--layers": "Layers L", "--hidden": "Hidden H", "--heads": "Heads A",
               "--whole-word-mask": "Whole-word masking", "--span-mask": "Span masking (SpanBERT)",
               "--static-masking": "Static masks (RoBERTa Table 1)", "--input-format": "Input format (RoBERTa)",
               "--span-boundary": "Span boundary objective (SpanBERT)", "--generator-size": "Generator size (ELECTRA)"}


def _form_words(error: str) -> str:
    """An engine check's line with each flag it names as the form's box ("Steps", not `--steps`)."""
    import re
    return re.sub(r"--[a-z0-9-]+", lambda m: f"'{FORM_LABELS[m.group(0)]}'" if m.group(0) in FORM_LABELS else m.group(0), error)


def table_rows(rows: list) -> list:
    """The runs table's rows (run, status, step, checkpoint, created, error)."""
    return [{"run": r["name"], "status": STATUS_ICON.get(r["effective_status"], r["effective_status"]),
             "step": f"{r['step'] if r['step'] is not None else 0} / {r['total_steps'] or '?'}",
             "checkpoint": r["checkpoint_step"], "created": r["created"], "error": _page_words(r["error"] or "")}
            for r in rows]


def _page_words(error: str) -> str:
    """A run's recorded stop line in the page's words: the Resume button, not `--resume`."""
    return error.replace("continue with --resume", "the Resume button continues it")


def stopped_notice(status: str, info: dict, checkpoint) -> tuple:
    """(st function name, text) for a run that stopped before it finished, or None."""
    kept = (f"the Resume button continues it from checkpoint {checkpoint.name}" if checkpoint is not None
            else "the Resume button starts it again from step 0 (it saved no checkpoint)")
    stopped = status_of(status)
    if stopped is FAILED:
        return "error", f"Run failed: {_page_words(info.get('error') or 'no error line recorded')}"
    if stopped is DEAD:
        return "warning", f"The run's process is gone (killed or crashed) while it was running; {kept}."
    if stopped is CANCELLED:
        step = (info.get("error") or "").partition(" at step ")[2].split(";")[0].strip()
        return "info", f"Cancelled{f' at step {step}' if step.isdigit() else ''}: {kept}."
    return None


def is_classroom_schedule(config: dict) -> bool:
    """The run trains with the classroom run's length schedule (the form's defaults)."""
    from engine.pretraining.config import CLASSROOM_RECIPE as R
    return (config.get("seq_len") == R["seq_len"] and config.get("phase2_seq_len") == R["phase2_seq_len"]
            and not config.get("init"))


def no_context_hint(config: dict, last_eval: dict):
    """The hint when the model is on the plateau (at [MASK] no better than the most frequent token), else None."""
    acc, base = last_eval.get("eval_mlm_mask_acc"), last_eval.get("eval_mlm_mask_baseline")
    if acc is None or base is None or acc >= base + NO_CONTEXT_MARGIN:
        return None
    said = (f"No context learned yet: at [MASK] the model is right {acc:.1%} of the time, about as often as always "
            f"answering the most frequent token ({base:.1%}); its MLM accuracy comes from copying the tokens kept unchanged.")
    if is_classroom_schedule(config):  # the advice below is this run's own settings: only the finding
        return said
    from engine.pretraining.config import CLASSROOM_RECIPE as R
    return (said + f" Tiny models on 128-token sequences stay on this plateau for thousands of steps; short sequences with "
            f"a second, longer phase leave it sooner: the classroom run, the form's defaults ({R['seq_len']} tokens, then "
            f"{R['phase2_seq_len']} for the last {R['phase2_fraction']:.0%} of the steps).")
