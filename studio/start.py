"""The Start page's guided first class (no streamlit import, tested directly): its four steps, how long each takes
on this machine, where each button goes with which fields filled in, and whether the runs folder shows it done.

1. Look inside a real model: the Model page on MiniLM (done once the Model page was opened in this session).
2. Pre-train a tiny BERT: the Pre-train page, whose defaults are the classroom recipe, with a run name filled in
   (done once a pre-training run of the class in the runs folder has finished; `class prepare`'s reference run,
   engine.classroom.REFERENCE_RUN, is not the class's). A newest run that was cancelled, failed or died is reported
   with what to do (the Pre-train page's Resume button, the run picked there).
3. Probe it and the probe-ready model: the Probe page on the class's run's latest checkpoint, a stopped run's
   included, else the reference run's (done once a model was probed in this session while there is such a
   checkpoint); the probe-ready model is studio.probe_ready's (MiniLM continued with MLM + NSP,
   `python -m engine pretrain --init minilm ...`): once it has a checkpoint the step has a second button that
   probes it; until then the step says how to make it.
4. Run the paper's Table 5 at classroom scale: the Ablations page's New study tab, with the pre-training-tasks
   study at classroom scale selected (done once such a study has every job finished).
`prepare_rows` is the "Prepare this machine for a class" panel's state (engine.classroom.status).
Every time is engine.classroom's one estimator (`estimate`, `part_estimate`: a figure of engine/measured.py scaled
by this machine's reading of the same kind of work), in one clause with its details behind a help icon, so that step
2 and the Prepare panel give the same figure for the same run; findings are read from engine/measured.py.
"""
from dataclasses import dataclass, field
from pathlib import Path

from engine import measured
from engine.probe_set import CLOZE_SECTIONS
from engine.records import RUN_JSON, read_json_or_empty
from engine.commands import PRETRAIN, kind_of
from engine.status import CANCELLED, DEAD, FAILED, FINISHED, RUNNING, status_of

TABLE5 = "pretraining-tasks"
SECOND_CLASS = "nsp-vs-sop"  # the centre of the second class plan, "what changed after BERT, and why" (docs/teaching.md)


def second_class_text() -> tuple:
    """(title, the plan in two sentences) of the second class, from the study itself (engine/ablations/family.py)."""
    from engine import ablations as A
    study = A.get_study(SECOND_CLASS, scale="classroom")
    return (f"A second class: what changed after BERT, and why ({A.family.FAMILY_GROUP})",
            f"Each design choice of the models that followed BERT is one study under \"{A.family.FAMILY_GROUP}\" on the "
            f"Ablations page. Its centre is {study.title.split(' (')[0]}: ask the class to predict how a model trained "
            f"on next-sentence prediction does on sentence order before showing the paper's answer: {study.finding} "
            "docs/teaching.md has the plan; ask the Ablations page for its time on this machine.")


@dataclass
class Step:
    number: int
    title: str
    what: str
    time: str  # one short clause, "about N min here" (engine.classroom.estimate), or a plain time
    page: str  # the page file the button opens
    button: str
    prefill: dict = field(default_factory=dict)  # session_state keys the target page reads
    done: bool = False
    status: str = ""  # a line about progress ("running: step 400 / 2,000") or what is missing
    alt: tuple = None  # a second button on the same page: (label, prefill)
    time_help: str = ""  # how the time was reached (the figure, its machine, what scaled it): a help icon


def machine_precision() -> tuple:
    """(precision the engine picks here, "cpu" | "cuda") (engine.classroom.machine)."""
    from engine.classroom import machine
    return machine()


def probe_ready_command(root) -> str:
    """The command that makes the probe-ready model (studio.probe_ready.argv, the Model page's button)."""
    from studio.probe_ready import argv
    return "python -m engine " + " ".join(a for a in argv(root) if a != "--quiet")


def pretrain_runs(root) -> tuple:
    """(the class's classroom-style runs, runs continued from MiniLM, the reference run or None): top-level
    pre-training runs, newest first, as list_runs rows; a run continued from MiniLM (config init "minilm") is not a
    classroom run, and `class prepare`'s reference run (engine.classroom.REFERENCE_RUN) is not the class's."""
    from engine.classroom import REFERENCE_RUN
    from engine.runs import list_runs
    own, ready, reference = [], [], None
    for r in list_runs(root):
        if kind_of(r.get("kind")) is not PRETRAIN:
            continue
        cfg = read_json_or_empty(Path(r["path"]) / RUN_JSON).get("config") or {}
        if r["name"] == REFERENCE_RUN:
            reference = r
        else:
            (ready if str(cfg.get("init", "")) == "minilm" else own).append(r)
    return own, ready, reference


def prepare_rows(root) -> list:
    """The "Prepare this machine for a class" panel's parts (engine.classroom.status)."""
    from engine import classroom
    return classroom.status(root)


def table5_studies(root) -> list:
    """[(study folder, jobs finished, jobs)] of the pre-training-tasks studies under root/studies, newest first."""
    out = []
    studies = Path(root) / "studies"
    if not studies.is_dir():
        return out
    for d in sorted(studies.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        data = read_json_or_empty(d / "study.json")
        if (data.get("study") or {}).get("name") != TABLE5:
            continue
        jobs = data.get("jobs", [])
        done = sum(status_of(read_json_or_empty(d / j.get("out", "") / RUN_JSON).get("status")) is FINISHED
                   for j in jobs if j.get("out"))
        out.append((d, done, len(jobs)))
    return out


def _free_name(root, base: str) -> str:
    name, k = base, 2
    while (Path(root) / name).exists():
        name, k = f"{base}-{k}", k + 1
    return name


def checkpoint_choice(root, run_path) -> str:
    """The Probe page's picker value for a run's latest checkpoint (the same string list_model_choices gives)."""
    from engine.runs import latest_checkpoint
    ck = latest_checkpoint(Path(run_path))
    if ck is None:
        return None
    return str(Path(root) / Path(run_path).name / "checkpoints" / ck.name)


def _table5_what() -> str:
    """Step 4 in three sentences: what the study is, what it showed when measured (engine/measured.py)."""
    m = measured.study(TABLE5)
    reproduced = sum(f.verdict == "reproduced" for f in m.findings)
    return ("BERT against the same model without NSP and a left-to-right model, each pre-trained for minutes on BBC "
            "News and fine-tuned on span extraction, punctuation, a sentence-pair task and the topic control. "
            f"Measured on {m.minutes.where} over {m.seeds} pre-training starts: {reproduced} of the paper's "
            f"{len(m.findings)} findings reproduced (the paper's Table 5 below shows ours beside it). "
            "The Ablations page's lessons go further: a second seed, the paper's equal steps, and longer runs.")


STOPPED = {CANCELLED: "was cancelled", FAILED: "failed", DEAD: "stopped (its process is gone)"}  # the resumable ones


def _step2(root, own: list, found: dict, on: tuple) -> Step:
    from engine.classroom import part_estimate
    from engine.pretraining.config import CLASSROOM_RECIPE as R
    est = part_estimate(root, "reference", found, on)  # the classroom run: the Prepare panel's reference part
    s2 = Step(2, "Pre-train a tiny BERT",
              f"2 layers, hidden 128, masked LM + next sentence prediction on BBC News, {R['steps']:,} steps of "
              f"{R['seq_len']} tokens then {R['phase2_seq_len']} (the classroom run). Press Launch; the run goes on even "
              "if you close the tab.",
              est.clause(), "pages/2_Pretrain.py", "Set up the classroom run",
              {"pretrain_name": _free_name(root, "first-bert")}, time_help=est.how)
    finished = [r for r in own if status_of(r["effective_status"]) is FINISHED]
    running = [r for r in own if status_of(r["effective_status"]) is RUNNING]
    if finished:
        s2.done, s2.status = True, f"finished: {finished[0]['name']}"
    elif running:
        r = running[0]
        s2.status = f"running: {r['name']}, step {r['step'] or 0} / {r['total_steps'] or '?'}"
    elif own and status_of(own[0]["effective_status"]).resumable:
        r = own[0]
        kept = (f"it continues from checkpoint step-{r['checkpoint_step']}" if r["checkpoint_step"] is not None
                else "it has no checkpoint yet, so it starts again from step 0")
        error = f" ({r['error']})" if status_of(r["effective_status"]) is FAILED and r.get("error") else ""
        s2.status = (f"{r['name']} {STOPPED[status_of(r['effective_status'])]} at step {r['step'] or 0} / {r['total_steps'] or '?'}"
                     f"{error}: press Resume on the Pre-train page ({kept}), or launch a new run")
        s2.button, s2.prefill = "Resume it on the Pre-train page", {"pretrain_pick": r["name"]}
    return s2


def _step3(root, own: list, reference, probed: bool) -> Step:
    s3 = Step(3, "Probe it and the probe-ready model",
              "Fill in masked words, click a word to mask it and watch where it looks, score next-sentence pairs, and "
              "compare with the probe-ready model.", "about a minute", "pages/5_Probe.py", "Probe your model")
    order = {FINISHED: 0, RUNNING: 1}  # the class's own model first, a stopped run's checkpoints too
    mine = sorted((r for r in own if r["checkpoint_step"] is not None), key=lambda r: order.get(status_of(r["effective_status"]), 2))
    if mine:
        target = mine[0]
        if status_of(target["effective_status"]).resumable:
            s3.status = f"probes {target['name']}'s last checkpoint (step {target['checkpoint_step']}; the run stopped there)"
    elif reference is not None and reference["checkpoint_step"] is not None:
        target = reference
        s3.status = f"your run has no checkpoint yet: this probes the reference classroom run ({reference['name']}) meanwhile"
    else:
        target = None
        s3.status = "pre-train a model first (step 2)"
    if target is not None:
        s3.prefill = {"probe_model": checkpoint_choice(root, target["path"])}
        s3.done = probed  # probed in this session, with a pre-trained classroom model there to probe
    from studio.probe_ready import model_path
    ready_path = model_path(root)  # what the Probe page's picker offers first
    if ready_path:
        s3.what += f" The probe-ready model: {Path(ready_path).name}, {probe_ready_does()}."
        s3.alt = ("Probe the probe-ready model", {"probe_model": ready_path})
    else:
        s3.what += (" The probe-ready model (MiniLM continued with MLM and NSP heads) is not in the runs folder yet; "
                    f"make it with the Model page's button, the Prepare button above or `{probe_ready_command(root)}`.")
    from studio.common import bert_base_model
    if bert_base_model():
        s3.what += (f" Google's {bert_base_model()} (BERT-base as the paper released it) is in the Hugging Face cache: the "
                    "Probe page offers it first.")
    return s3


def probe_ready_does() -> str:
    """What the probe-ready model measurably does (engine/measured.py), in a clause."""
    mlm, nsp = measured.fact("probe_ready.mlm_accuracy"), measured.fact("probe_ready.nsp_accuracy")
    top1, top5 = measured.fact("probe_ready.everyday_top1"), measured.fact("probe_ready.everyday_top5")
    n = len(CLOZE_SECTIONS["everyday facts"])
    return (f"MiniLM continued with MLM and NSP: on held-out text it predicts {mlm.text()} of the masked words and "
            f"tells {nsp.text()} of the sentence pairs right; of the probe set's {n} everyday blanks it fills "
            f"{round(top1.value * n)} first try and has {round(top5.value * n)} in its top five ({mlm.where})")


def guided_steps(root, visited: dict, precision: str = "fp32", device: str = "cpu") -> list:
    """The four steps with their state; `visited`: session flags {"model": bool, "probed": bool}."""
    from engine.classroom import estimate, readings
    root = Path(root)
    own, _, reference = pretrain_runs(root)
    found = readings(root)  # this machine's readings, as the Prepare panel's (engine.classroom.status)
    steps = [Step(1, "Look inside a real model",
                  "MiniLM's real pre-trained weights: its configuration, a sentence as WordPieces and segment ids, "
                  "the shape of every output.", "under a minute", "pages/1_Model.py", "Open the Model page",
                  {"model_page_model": "minilm"}, done=bool(visited.get("model"))),
             _step2(root, own, found, (precision, device)), _step3(root, own, reference, bool(visited.get("probed")))]
    studies = table5_studies(root)
    est = estimate(measured.study(TABLE5).minutes, "classroom", found, precision=precision, device=device)
    s4 = Step(4, "Run the paper's Table 5 at classroom scale",
              _table5_what(), est.clause(),
              "pages/7_Ablations.py", "Set up the Table 5 study",
              {"abl_study": TABLE5, "abl_scale": "classroom", "abl_tab": "New study"},  # (the Ablations page's tabs)
              time_help=est.how)
    if studies:
        d, n_done, n = studies[0]
        s4.done = n > 0 and n_done == n
        s4.status = f"{d.name}: {n_done} of {n} jobs finished"
    steps.append(s4)
    return steps


def prepare_lines(rows: list) -> tuple:
    """(one line per part, the summary line, the details of the times for a help icon) for the Prepare panel, from
    engine.classroom.status rows (each state's icon and words: engine.classroom.PART_STATES; each time in one clause,
    engine.classroom.time_words)."""
    from engine.classroom import DONE, part_state_of, summary_clause, time_words
    lines, details = [], []
    for r in rows:
        state = part_state_of(r["state"])
        line = f"{state.icon} {r['title'][0].upper()}{r['title'][1:]}: {state.panel}"
        if r.get("note"):  # a damaged cache's reason, a foreign run's folder and what differs
            line += f": {r['note']}"
        if state is not DONE and r["step"] is not None:
            line += f", step {r['step']} / {r['total'] or '?'}"
        clause, how = time_words(r)
        if clause:
            line += f"; {clause}"
        if how:
            details.append(f"{r['title'][0].upper()}{r['title'][1:]}: {how}.")
        lines.append(line)
    if ready(rows):
        return lines, "This machine is ready for the class.", "\n\n".join(details)
    left = summary_clause(rows)
    return lines, f"{left[0].upper()}{left[1:]} for what is not done yet." if left else "", "\n\n".join(details)


def ready(rows: list) -> bool:
    """Every part is done, or skipped where it is optional (engine.classroom.status rows)."""
    from engine.classroom import part_state_of
    return all(part_state_of(r["state"]).ready for r in rows)


def preparing(rows: list) -> bool:
    """A part is queued or running."""
    return any(status_of(r["state"]).active for r in rows)  # (a part's queued and running are its job's)


TEACHING = Path(__file__).resolve().parents[1] / "docs" / "teaching.md"
