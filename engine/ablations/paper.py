"""The paper's ablation studies at classroom scale: Tables 5, 6, 7 and 8 and Figure 5, each with the paper's
qualitative finding and its check against our results.

- `pretraining-tasks` (Table 5): BERT (mlm+nsp), No NSP (mlm), LTR & No NSP (ltr), LTR & No NSP + BiLSTM
  (the ltr model fine-tuned with a randomly initialised BiLSTM on top: `finetune --bilstm`).
- `model-size` (Table 6): a small grid of L/H/A at equal training, plus held-out MLM perplexity.
- `feature-based` (Table 7): frozen-feature combinations (`engine features`, BiLSTM tagger on WNUT-16 NER)
  next to fine-tuning the same model.
- `masking` (Table 8): the six MASK/SAME/RND rows, fine-tuned and feature-based (concat of the last three
  hidden states: all a 2-layer model has).
- `training-steps` (Figure 5): downstream score of the checkpoints after k steps, MLM vs LTR.

Departures from the paper, all of scale: tiny/mini models pre-trained for minutes on the BBC corpus instead of
BERT-BASE for a million steps on 3.3B words; the downstream tasks are built-in: Table 5 uses `bbc-cloze` (span
extraction, for SQuAD), `bbc-punct` (a token task whose labels need the right context), `bbc-story` (is B from A's
story, negatives from other articles on the same topic: the sentence-pair column) and `bbc-topic` as the control
(`bbc-next`, same-article coherence, which even fine-tuned MiniLM does not learn, stays available through
`--tasks`, with its own contrast; docs/lab-notes/table5.md); Figure 5 `bbc-cloze`; Table 6 `bbc-cloze`
and `bbc-topic` (for SQuAD and SST-2); Table 8 `bbc-punct` fine-tuned and feature-based (for CoNLL-2003 NER); Table 7 `wnut16` (real NER, MiniLM); plus RTE and CoLA from `../shared/data`
when that folder is present (not at the classroom and lab scales, which keep to the built-in tasks). Whether a
finding is reproduced is decided only for each study's `contrasts`, with a bootstrap (engine.ablations.verdict),
the paper's numbers beside; `finding_check` gives the direction of the means (A ≥ B), a hint and never a verdict.
Table 8's rows are printed MASK/SAME/RND as in the paper, while `--mask-ratios` takes MASK,RANDOM,SAME:
`mask_ratios_for_row` maps one to the other.
"""
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.ablations.findings import NOT_YET, claim, compare, means
from engine.ablations.study import (Evaluation, FeatureArgs, FinetuneArgs, Study, Variant, pretrain_column_name,
                                    with_epochs, with_steps)
from engine.ablations.verdict import Contrast
from engine.cli import text
from engine import measured
from engine.errors import EngineError
from engine.objectives import LTR, MLM, MLM_NSP
from engine import recipes
from engine.pretraining.config import CLASSROOM_RECIPE, PretrainConfig
from engine.tasks.shared_files import SHARED_DATA, shared_tasks



# ---------------------------------------------------------------------------------------------------------
# Table 8's rows: MASK / SAME / RND in the paper, MASK,RANDOM,SAME for --mask-ratios

TABLE8_ROWS = [(80, 10, 10), (100, 0, 0), (80, 0, 20), (80, 20, 0), (0, 20, 80), (0, 0, 100)]  # (MASK, SAME, RND) %


def mask_ratios_for_row(mask: int, same: int, rnd: int) -> tuple:
    """A Table 8 row (MASK %, SAME %, RND %) as the (MASK, RANDOM, SAME) fractions `--mask-ratios` takes."""
    if mask + same + rnd != 100 or min(mask, same, rnd) < 0:
        raise EngineError(f"masking row {mask}/{same}/{rnd} must be three non-negative percentages summing to 100")
    return (mask / 100, rnd / 100, same / 100)


def table8_label(mask: int, same: int, rnd: int) -> str:
    return f"MASK {mask} / SAME {same} / RND {rnd}"


# ---------------------------------------------------------------------------------------------------------
# downstream evaluations

BBC = Evaluation("BBC topic (acc)", "bbc-topic", "accuracy")
WNUT = Evaluation("WNUT-16 NER (F1)", "wnut16", "f1")
# Table 5's classroom columns (engine/tasks/bbc_*.py; README's task cards): span extraction, a token task whose
# labels depend on the right context, a sentence pair (is B from A's story?); BBC topic stays as the control.
# The pair column is bbc-story, not bbc-next (same-article coherence): fine-tuned MiniLM stays at chance on bbc-next
# and learns bbc-story, the criterion the choice was made on before any classroom row was fine-tuned on it
# (docs/lab-notes/table5.md)
CLOZE = Evaluation("BBC cloze span (F1)", "bbc-cloze", "f1")
PUNCT = Evaluation("BBC punctuation (F1)", "bbc-punct", "f1")
NEXT = Evaluation("BBC next sentence (acc)", "bbc-next", "accuracy")
STORY = Evaluation("BBC same story (acc)", "bbc-story", "accuracy")
# coherence alone (consecutive sentences, in order or swapped): NSP vs SOP's column (engine/ablations/family.py)
ORDER = Evaluation("BBC sentence order (acc)", "bbc-order", "accuracy")
TABLE5_TASKS = (CLOZE, PUNCT, STORY, BBC)


def shared_evaluations(data_dir=None) -> list:
    """RTE (accuracy) and CoLA (Matthews) from ../shared/data when the files are there, else []."""
    d = Path(data_dir) if data_dir is not None else SHARED_DATA
    names = {"RTE": "RTE (acc)", "CoLA": "CoLA (MCC)"}  # the study column of each shared GLUE task
    return [Evaluation(names[t.name], t.kind, t.metric, train=str(d / t.train), dev=str(d / t.dev))
            for t in shared_tasks(d) if names.get(t.name)]


def available_evaluations(data_dir=None) -> tuple:
    """Every evaluation a study can be given (`ablate run --tasks`, the Ablations page's choice): the built-in
    tasks, then RTE and CoLA when ../shared/data holds them."""
    return (CLOZE, PUNCT, NEXT, STORY, ORDER, BBC, WNUT) + tuple(shared_evaluations(data_dir))


# ---------------------------------------------------------------------------------------------------------
# the built-in studies

# a tiny model's fine-tuning grid: tiny models from scratch want larger learning rates than BERT-BASE
SMALL_GRID = FinetuneArgs(lr=(1e-4, 5e-5), batch_size=(32,), epochs=(3,), restarts=1, max_train=None, max_seq_len=128)
# the pre-training every built-in study starts from (its variants change one thing); replace() gives a study's own
SMALL_BASE = PretrainConfig.classroom(objective=MLM_NSP.name, steps=3000, batch_size=32, seq_len=128, phase2_seq_len=None)


def pretraining_tasks_study(evaluations=None) -> Study:
    return Study(
        name="pretraining-tasks", title="Table 5: pre-training tasks",
        description="The same model pre-trained with MLM+NSP (BERT), MLM only (No NSP) and a left-to-right LM "
                    "(LTR & No NSP, causal attention kept at fine-tuning); the last row fine-tunes the LTR model "
                    "with a randomly initialised BiLSTM on top.",
        finding="Removing NSP hurts (BERT ≥ No NSP, most on QNLI, MNLI and SQuAD); the left-to-right model is worse "
                "than the MLM model on every task; a BiLSTM on top helps LTR on SQuAD but stays far below the "
                "bidirectional model, and hurts GLUE.",
        base=SMALL_BASE,
        finetune=SMALL_GRID,
        variants=(
            Variant("BERT (MLM + NSP)", {"objective": MLM_NSP.name}, note="the paper's BERT"),
            Variant("No NSP", {"objective": MLM.name}, note="masked LM only, single-segment inputs"),
            Variant("LTR & No NSP", {"objective": LTR.name}, note="left-to-right LM, causal attention also when fine-tuned"),
            Variant("+ BiLSTM", finetune={"bilstm": True}, reuse="LTR & No NSP",
                    note="the LTR model fine-tuned with a randomly initialised BiLSTM on top"),
        ),
        evaluations=evaluations if evaluations is not None else TABLE5_TASKS + tuple(shared_evaluations()),
        pretrain_columns=("mlm_mask_acc",),  # did the MLM models learn any context? (LTR has no [MASK]: "–")
        finding_check=check_pretraining_tasks,
        contrasts=TABLE5_FINDINGS,
    )


# The paper's Table 5 (BERT-BASE, dev): BERT / No NSP / LTR & No NSP / + BiLSTM
# MNLI-m 84.4 / 83.9 / 82.1 / 82.1, QNLI 88.4 / 84.9 / 84.3 / 84.1, MRPC 86.7 / 86.5 / 77.5 / 75.7,
# SST-2 92.7 / 92.6 / 92.1 / 91.6, SQuAD 1.1 F1 88.5 / 87.9 / 77.8 / 84.9
TABLE5_FINDINGS = (
    Contrast("the bidirectional model beats the left-to-right one on span extraction", "BERT (MLM + NSP)", "LTR & No NSP",
             CLOZE.name, (88.5, 77.8), "SQuAD 1.1 F1"),
    Contrast("the bidirectional model beats the left-to-right one on a token task that needs the right context",
             "BERT (MLM + NSP)", "LTR & No NSP", PUNCT.name, None, "none in Table 5 (section 5.1 argues it for token-level tasks)"),
    Contrast("MLM alone beats left-to-right on span extraction (No NSP > LTR)", "No NSP", "LTR & No NSP", CLOZE.name,
             (87.9, 77.8), "SQuAD 1.1 F1"),
    Contrast("removing NSP hurts a sentence-pair task", "BERT (MLM + NSP)", "No NSP", NEXT.name, (88.4, 84.9), "QNLI acc"),
    Contrast("removing NSP hurts a sentence-pair task", "BERT (MLM + NSP)", "No NSP", STORY.name, (88.4, 84.9), "QNLI acc"),
    Contrast("removing NSP hurts span extraction", "BERT (MLM + NSP)", "No NSP", CLOZE.name, (88.5, 87.9), "SQuAD 1.1 F1"),
    Contrast("a BiLSTM on top recovers part of LTR's loss on span extraction", "+ BiLSTM", "LTR & No NSP", CLOZE.name,
             (84.9, 77.8), "SQuAD 1.1 F1"),
    Contrast("control: on topic classification the gap is small (the paper's SST-2: 0.6)", "BERT (MLM + NSP)",
             "LTR & No NSP", BBC.name, (92.7, 92.1), "SST-2 acc"),
)


def check_pretraining_tasks(study: Study, summary) -> list:
    """Table 5's three claims, each between the two rows it compares; a study run with fewer rows (`--variants`) makes
    the claims whose rows it has."""
    m, cols = means(summary), [e.name for e in study.evaluations]
    row = {v.pretrain.get("objective"): v.name for v in study.variants if not v.reuse}
    bert, nonsp, ltr = row.get(MLM_NSP.name), row.get(MLM.name), row.get(LTR.name)
    bilstm = next((v.name for v in study.variants if (v.finetune or {}).get("bilstm")), None)
    claims = []
    if bert and nonsp:
        claims.append(claim(f"{bert} ≥ {nonsp} on average (removing NSP hurts)", compare(m, bert, nonsp, cols, every=False, strict=False)))
    if nonsp and ltr:
        claims.append(claim(f"{nonsp} > {ltr} on every task (MLM beats left-to-right)", compare(m, nonsp, ltr, cols, every=True, strict=True)))
    if nonsp and bilstm:
        claims.append(claim(f"{nonsp} > LTR {bilstm} on every task (the BiLSTM does not close the gap)",
                            compare(m, nonsp, bilstm, cols, every=True, strict=True)))
    return claims


# Table 6's classroom columns: span extraction (the task where pre-training shows most) and topic (for SST-2)
TABLE6_TASKS = (CLOZE, BBC)


def model_size_study(evaluations=None) -> Study:
    return Study(
        name="model-size", title="Table 6: model size",
        description="Layers L, hidden size H and heads A grow at equal pre-training (same steps, batch and data).",
        finding="Larger models are better on every task, even the small data sets; held-out MLM perplexity falls "
                "with size.",
        base=SMALL_BASE,
        finetune=SMALL_GRID,
        variants=(
            Variant("L=2 H=128 A=2", {"layers": 2, "hidden": 128, "heads": 2}),
            Variant("L=4 H=128 A=2", {"layers": 4, "hidden": 128, "heads": 2}),
            Variant("L=4 H=256 A=4", {"layers": 4, "hidden": 256, "heads": 4}),
        ),
        evaluations=evaluations if evaluations is not None else TABLE6_TASKS + tuple(shared_evaluations()),
        pretrain_columns=("mlm_ppl", "mlm_mask_acc"),
        finding_check=check_model_size,
        contrasts=tuple(Contrast(f"the larger model is better ({e.task})", "L=4 H=256 A=4", "L=2 H=128 A=2", e.name, paper, task)
                        for e, paper, task in ((CLOZE, None, "Table 6 has no SQuAD column"),
                                               (BBC, (93.7, 88.4), "SST-2, L=24 H=1024 vs L=3 H=768"))),
    )


def check_model_size(study: Study, summary) -> list:
    m, cols = means(summary), [e.name for e in study.evaluations]
    small, big = study.variants[0].name, study.variants[-1].name
    checks = [claim(f"{big} ≥ {small} on every task (bigger is better)", compare(m, big, small, cols, every=True, strict=False))]
    ppl = [m.get(v.name, {}).get(pretrain_column_name("mlm_ppl")) for v in study.variants]
    if any(p is None for p in ppl):
        checks.append(claim("held-out MLM perplexity falls with size", NOT_YET))
    else:
        checks.append(claim("held-out MLM perplexity falls with size",
                            {"holds": all(b <= a for a, b in zip(ppl, ppl[1:])), "detail": " → ".join(f"{p:.1f}" for p in ppl)}))
    return checks


FEATURE_ROWS = [
    ("Embeddings", FeatureArgs(combine="embeddings")),
    ("Second-to-last hidden", FeatureArgs(combine="second-to-last")),
    ("Last hidden", FeatureArgs(combine="last")),
    ("Weighted sum last four hidden", FeatureArgs(layers="-1,-2,-3,-4", combine="weighted")),
    ("Concat last four hidden", FeatureArgs(layers="-1,-2,-3,-4", combine="concat")),
    ("Weighted sum all layers", FeatureArgs(layers="-1,-2,-3,-4", combine="all-weighted")),
]


def feature_based_study(evaluations=None) -> Study:
    return Study(
        name="feature-based", title="Table 7: feature-based vs fine-tuning (NER)",
        description="Frozen activations of one model fed to a two-layer BiLSTM tagger, for the paper's combinations of "
                    "layers, next to fine-tuning the whole model. The model is MiniLM (real pre-trained weights, 6 "
                    "layers) so that 'the last four' exist.",
        finding="Concatenating the top four hidden layers is the best feature-based combination, only slightly below "
                "fine-tuning the whole model; the embeddings alone are far worse.",
        base=PretrainConfig.classroom(),  # unused: the study evaluates a fixed model
        finetune=FinetuneArgs(lr=(5e-5,), batch_size=(32,), epochs=(3,), restarts=1, max_seq_len=128),
        variants=(Variant("Fine-tuning", note="all parameters trained"),)
        + tuple(Variant(name, features=fa, note=f"--combine {fa.combine} --layers {fa.layers}") for name, fa in FEATURE_ROWS),
        evaluations=evaluations if evaluations is not None else (WNUT,),
        model="minilm",
        finding_check=check_feature_based,
        contrasts=(Contrast("fine-tuning beats the best feature-based combination (concat last four)", "Fine-tuning",
                            "Concat last four hidden", WNUT.name, (96.4, 96.1), "CoNLL-2003 NER dev F1"),
                   Contrast("concatenating the last four layers beats the embeddings alone", "Concat last four hidden",
                            "Embeddings", WNUT.name, (96.1, 91.0), "CoNLL-2003 NER dev F1")),
    )


def check_feature_based(study: Study, summary) -> list:
    m, col = means(summary), study.evaluations[0].name
    ft = m.get("Fine-tuning", {}).get(col)
    fb = {v.name: m.get(v.name, {}).get(col) for v in study.variants if v.features is not None}
    fb = {k: x for k, x in fb.items() if x is not None}  # feature-based row -> its score
    concat = next((v.name for v in study.variants if v.features is not None and v.features.combine == "concat"), None)
    emb = next((v.name for v in study.variants if v.features is not None and v.features.combine == "embeddings"), None)
    checks = []
    best = max(fb, key=fb.get) if fb else None
    if len(fb) < 2 or concat not in fb:
        checks.append(claim("concatenating the last four layers is the best feature-based combination", NOT_YET))
    else:
        checks.append(claim("concatenating the last four layers is the best feature-based combination",
                            {"holds": fb[concat] >= fb[best] - 1e-12,
                             "detail": f"best: {best} {100 * fb[best]:.1f}; concat {100 * fb[concat]:.1f}"}))
    if ft is None or not fb:
        checks.append(claim("fine-tuning ≥ the best feature-based combination", NOT_YET))
    else:
        checks.append(claim("fine-tuning ≥ the best feature-based combination",
                            {"holds": ft >= fb[best], "detail": f"fine-tuning {100 * ft:.1f} vs {best} {100 * fb[best]:.1f}"}))
    if emb in fb and len(fb) >= 2:
        checks.append(claim("the embeddings alone are the worst",
                            {"holds": fb[emb] <= min(fb.values()),
                             "detail": f"embeddings {100 * fb[emb]:.1f}, worst {100 * min(fb.values()):.1f}"}))
    return checks


# Table 8's columns: the paper's MNLI (fine-tuned), NER fine-tuned and NER feature-based (concat of the last four);
# ours the punctuation tagger (a token task, as NER) both ways. No MNLI stand-in: six pre-training runs leave room in
# the classroom hour for two evaluations each (`--tasks bbc-cloze,...` adds one). The feature-based column
# concatenates the last three hidden states: all a 2-layer model has (its two layers and the embeddings; the paper:
# the last four of BERT-BASE's thirteen); at the lab scale's 4 layers, its top three.
PUNCT_FEATURES = Evaluation("BBC punctuation feature-based (F1)", "bbc-punct", "f1",
                            features=FeatureArgs(layers="-1,-2,-3", combine="concat"))
TABLE8_TASKS = (PUNCT, PUNCT_FEATURES)


def masking_study(evaluations=None) -> Study:
    return Study(
        name="masking", title="Table 8: masking procedure",
        description="Of the selected positions: the share replaced by [MASK] (MASK), kept unchanged (SAME) or "
                    "replaced by a random token (RND). The base model (at classroom scale the class's own 2-layer "
                    "model), each row changing only the masking; the feature-based column concatenates its last "
                    "three hidden states.",
        finding="Fine-tuning is robust to the masking strategy; MASK-only hurts the feature-based NER (a mismatch "
                "between pre-training and use); RND-only is clearly worse than BERT's 80/10/10.",
        base=SMALL_BASE,
        finetune=SMALL_GRID,
        variants=tuple(Variant(table8_label(m, s, r), {"mask_ratios": mask_ratios_for_row(m, s, r)},
                               note=f"--mask-ratios {text(mask_ratios_for_row(m, s, r))}")
                       for m, s, r in TABLE8_ROWS),
        evaluations=evaluations if evaluations is not None else TABLE8_TASKS,
        pretrain_columns=("mlm_mask_acc",),
        finding_check=check_masking,
        contrasts=(Contrast("feature-based, MASK-only hurts", table8_label(80, 10, 10), table8_label(100, 0, 0),
                            PUNCT_FEATURES.name, (94.9, 94.0), "CoNLL-2003 NER feature-based dev F1"),
                   Contrast("RND-only is worse than 80/10/10", table8_label(80, 10, 10), table8_label(0, 0, 100),
                            PUNCT.name, (95.4, 94.9), "CoNLL-2003 NER fine-tuned dev F1")),
    )


ROBUST_SPREAD = 0.03  # "robust": the best and worst of the six rows within 3 points (the paper's MNLI spread is under 1)


def check_masking(study: Study, summary) -> list:
    m, rows = means(summary), [v.name for v in study.variants]
    bert, mask_only, rnd_only = rows[0], rows[1], rows[-1]
    ft_cols = [e.name for e in study.evaluations if e.features is None]
    fb_cols = [e.name for e in study.evaluations if e.features is not None]
    spreads = {}  # fine-tuned column -> best minus worst row
    for c in ft_cols:
        vals = [m[r][c] for r in rows if c in m.get(r, {})]
        if len(vals) >= 2:
            spreads[c] = max(vals) - min(vals)
    robust = "fine-tuning is robust to the masking strategy (spread across rows ≤ 3 points)"
    if spreads:
        checks = [claim(robust, {"holds": all(s <= ROBUST_SPREAD for s in spreads.values()),
                                 "detail": "; ".join(f"{c}: spread {100 * s:.1f}" for c, s in spreads.items())})]
    else:
        checks = [claim(robust, NOT_YET)]
    if fb_cols:
        checks.append(claim(f"feature-based: {bert} ≥ {mask_only} (MASK-only hurts)",
                            compare(m, bert, mask_only, fb_cols, every=True, strict=False)))
    checks.append(claim(f"{bert} > {rnd_only} (RND-only is worse)", compare(m, bert, rnd_only, ft_cols + fb_cols, every=False, strict=True)))
    return checks


def training_steps_study(evaluations=None) -> Study:
    return Study(
        name="training-steps", title="Figure 5: pre-training steps",
        description="Checkpoints after k pre-training steps, each fine-tuned downstream; BERT's MLM against a "
                    "left-to-right LM.",
        finding="More pre-training steps give better downstream scores; MLM converges slightly slower than LTR in "
                "pre-training but scores higher downstream almost from the start.",
        base=replace(SMALL_BASE, save_every=500),
        finetune=SMALL_GRID,
        variants=(Variant("MLM (BERT)", {"objective": MLM_NSP.name}), Variant("LTR", {"objective": LTR.name})),
        # span extraction, where a left-to-right model's missing right context shows (on bbc-topic, a bag-of-words
        # task, the two tie or LTR leads: the classroom Table 5's control column)
        evaluations=evaluations if evaluations is not None else (CLOZE,),
        checkpoint_steps=(500, 1000, 2000, 3000),
        finding_check=check_training_steps,
        contrasts=(Contrast("MLM scores above LTR downstream at the last checkpoint", "MLM (BERT)", "LTR", CLOZE.name,
                            None, "Figure 5 (MNLI, read off a plot)"),),
    )


def check_training_steps(study: Study, summary) -> list:
    steps_means = {}  # (variant, column) -> {step: mean}
    for _, r in summary.iterrows() if len(summary) else []:
        if r["step"] is not None:
            steps_means.setdefault((r["variant"], r["column"]), {})[int(r["step"])] = float(r["mean"])
    checks = []
    for v in study.variants:
        pairs = [(c, d) for (vv, c), d in steps_means.items() if vv == v.name and len(d) >= 2]
        if not pairs:
            checks.append(claim(f"{v.name}: more pre-training steps score higher", NOT_YET))
            continue
        checks.append(claim(f"{v.name}: more pre-training steps score higher", {
            "holds": all(d[max(d)] >= d[min(d)] for _, d in pairs),
            "detail": "; ".join(f"{c}: step {min(d)} {100 * d[min(d)]:.1f} → step {max(d)} {100 * d[max(d)]:.1f}" for c, d in pairs)}))
    if len(study.variants) >= 2:
        a, b = study.variants[0].name, study.variants[1].name
        checks.append(claim(f"{a} > {b} at the last checkpoint",
                            compare(means(summary), a, b, [e.name for e in study.evaluations], every=True, strict=True)))
    return checks


# a plain dict of the built-in studies (name -> builder)
STUDIES = {
    "pretraining-tasks": pretraining_tasks_study,
    "model-size": model_size_study,
    "feature-based": feature_based_study,
    "masking": masking_study,
    "training-steps": training_steps_study,
}

# Classroom scale: the classroom recipe of `python -m engine pretrain` (engine/recipes.py; CLASSROOM_RECIPE: its size and
# length schedule, laid over a study's base, whose other settings are that recipe's too), so a study's base is what the
# command trains; one seed, one fine-tuning grid point.
CLASSROOM_PRETRAIN = dict(preset=recipes.CLASSROOM.settings["preset"], **CLASSROOM_RECIPE)
# A tiny model trained for minutes wants a far larger fine-tuning rate than BERT-BASE's 5e-5 (Google's small
# BERTs go up to 5e-4; at 3e-4 three epochs left the tiny models under-fitted in our trials, 1e-3 for five did not).
# Three restarts per cell: the spread a verdict is judged against (engine.ablations.verdict resamples them); at most
# 1,500 training examples per task (bbc-punct, bbc-next and bbc-story have 8,000, bbc-cloze 2,627, bbc-topic 1,781; 2,000 until
# the two-phase pre-training above took 1.6x the time of the old one), so the classroom Table 5 (3 pre-training runs
# + 16 fine-tuning jobs of 3 restarts) stays within its hour (measured: BENCHMARKS.md).
CLASSROOM_FINETUNE = FinetuneArgs(lr=(1e-3,), batch_size=(32,), epochs=(5,), restarts=3, max_train=1500, max_seq_len=128)


# Lab scale: the same studies for one GPU. Measured once (BENCHMARKS.md, "Lab scale"; engine/measured.py,
# lab_table5.minutes_h200): Table 5 with one seed, 6 jobs at once (`--parallel`); the other studies are not measured. The mini preset
# (4 layers, hidden 256) for 5,000 steps of 128 x 128 on BBC News (kept so the corpus-made tasks' dev texts stay unseen), five segmentations of each document so the ~70 passes over 1.2M tokens see fresh
# masks and pairs, and the paper's dropout 0.1 and 15% masking for the longer run; two pre-training seeds for the
# headline contrasts; fine-tuning on every training example at a rate for a 4-layer model.
LAB_PRETRAIN = dict(recipes.LAB.settings)  # the lab recipe (engine/recipes.py), laid over the study's classroom base
LAB_FINETUNE = FinetuneArgs(lr=(3e-4,), batch_size=(32,), epochs=(4,), restarts=3, max_train=None, max_seq_len=128)


LAB_PARALLEL_HINT = ("On a GPU the mini model leaves most of it idle: set **Jobs at once** to 6 (Table 5, one seed: "
                     + measured.fact("lab_table5.minutes_h200").text() + " on an H200; BENCHMARKS.md), or in a terminal "
                     "`python -m engine ablate run {name} --lab --foreground --parallel 6`.")
# `ablate run/resume --parallel` and the Ablations page's "Jobs at once"
PARALLEL_HELP = ("how many of the study's jobs run at once, each fine-tune starting once its model's pre-training has "
                 "finished (1: one after another); more is for a GPU, which the tiny and mini models leave mostly "
                 "idle; on a CPU the jobs share its cores. Without --foreground (and on the page) the study is "
                 "queued as one job that runs them so")


@dataclass(frozen=True)
class StudyAtScale:
    """What one built-in study sets differently from its scale (None: the scale's own): pre-training `steps` and
    `budget` (engine.ablations.planner.BUDGETS), downstream `epochs` (fine-tuning and the feature classifier alike,
    `with_epochs`) and the cap on training examples `max_train`."""
    steps: int = None
    budget: str = None
    epochs: int = None
    max_train: int = None


@dataclass(frozen=True)
class Scale:
    """A size the built-in studies run at besides their own definition: pre-training settings laid over the
    study's base (a variant still changes its one thing), the fine-tuning grid, the seeds, whether only the
    built-in tasks are kept (no files to give), what it is for, and what single studies set differently at this
    scale (`studies`: study name -> StudyAtScale, read through `settings`)."""
    name: str
    label: str
    pretrain: dict
    finetune: FinetuneArgs
    seeds: tuple
    builtin_tasks_only: bool
    about: str
    studies: dict = field(default_factory=dict)

    def settings(self, study: str) -> StudyAtScale:
        """What the study named `study` sets differently at this scale (every field None: the scale's own)."""
        return self.studies.get(study, StudyAtScale())


# What single studies set differently at the classroom scale (measured: engine/measured.py):
CLASSROOM_STUDIES = {
    # Table 5: BERT 6,000 steps, the other rows at BERT's FLOPs (No NSP 6,002, LTR 2,840), a departure from the
    # paper's equal steps (`--budget steps` or the page's choice gives the paper's protocol). Why: at 3,000 equal
    # steps the left-to-right model, with a loss on every token, leads on span extraction and NSP is not learned; at
    # 6,000 at equal FLOPs the span findings reproduce on each of three pre-training starts within the classroom hour
    # (engine/measured.py has the figures, docs/lab-notes/table5.md how the budget was chosen)
    "pretraining-tasks": StudyAtScale(steps=6000, budget="flops"),
    # Table 7: at most 1,500 tweets at the paper's 5e-5, fine-tuning for 5 epochs is 235 steps, which stops every
    # restart before its plateau; at 15 epochs restarts level off and agree, and the BiLSTM taggers on features
    # reach theirs too, so both arms train 15 epochs (docs/lab-notes/tables-6-7-8-figure5.md)
    "feature-based": StudyAtScale(epochs=15),
    # Table 8: six pre-training runs and two evaluations each: at 1,500 training examples (the scale's cap) the
    # row's evaluations would take 1.5x the time of 1,000 and the study would leave too little margin in the hour.
    # The scale's 5 epochs stop both columns before their plateau, but every epoch of both columns costs a large
    # share of a row's pre-training, so the hour holds no more; `ablate run masking --classroom --epochs 7` (or the
    # page's "Downstream epochs") trains longer where the class has the time. What was measured and tried is in
    # docs/lab-notes/tables-6-7-8-figure5.md.
    "masking": StudyAtScale(max_train=1000),
}
CLASSROOM = Scale("classroom", "classroom scale", CLASSROOM_PRETRAIN, CLASSROOM_FINETUNE, (0,), True,
                  ("tiny model, short runs, one seed, built-in tasks: Table 5 in under an hour on a 2-core CPU with bf16 "
                   "units, about 3x that on one with AVX2 only"), CLASSROOM_STUDIES)
LAB = Scale("lab", "lab scale", LAB_PRETRAIN, LAB_FINETUNE, (0, 1), True,
            "mini model (4 layers, hidden 256), 5,000 steps of 128 x 128, two seeds, built-in tasks: for one GPU")
SCALES = {s.name: s for s in (CLASSROOM, LAB)}  # `ablate run --classroom / --lab`, the Ablations page's choice


def at_scale(study: Study, scale: Scale) -> Study:
    """The study at `scale`: its pre-training settings, seeds and fine-tuning grid (lr 5e-5 for a study of a fixed
    pre-trained model such as MiniLM), what the scale sets for this study (`Scale.settings`), its checkpoints at a
    quarter, half and all of the steps (Figure 5)."""
    own = scale.settings(study.name)
    base = replace(study.base, **scale.pretrain)
    if own.steps:
        base = replace(base, steps=own.steps)
    if own.budget:
        study = replace(study, budget=own.budget)
    ev = tuple(e for e in study.evaluations if e.train is None) if scale.builtin_tasks_only else study.evaluations
    fin = replace(scale.finetune, lr=(5e-5,)) if study.model else scale.finetune
    if own.max_train:
        fin = replace(fin, max_train=own.max_train)
    study = with_steps(replace(study, base=base, finetune=fin, evaluations=ev or study.evaluations[:1], seeds=scale.seeds,
                               scale=scale.name, title=f"{study.title} ({scale.label})"), base.steps)
    return with_epochs(study, own.epochs) if own.epochs else study


def study_settings_text(scale: Scale) -> str:
    """What `scale` sets for single studies, in words ("pretraining-tasks: 6,000 steps, equal flops; ..."), for
    the command's help."""
    out = []
    for name, own in scale.studies.items():
        what = (f"{own.steps:,} steps" if own.steps else "", f"equal {own.budget}" if own.budget else "",
                f"{own.epochs} epochs" if own.epochs else "",
                f"at most {own.max_train:,} training examples" if own.max_train else "")
        out.append(f"{name}: " + ", ".join(w for w in what if w))
    return "; ".join(out) or "nothing"


def classroom(study: Study) -> Study:
    """The study at classroom scale: tiny pre-training, one seed, one fine-tuning grid point (lr 1e-3, 5 epochs;
    what CLASSROOM_STUDIES sets for the study where it sets something)."""
    return at_scale(study, CLASSROOM)


def get_study(name: str, scale: str = None, seeds: int = None, evaluations=None, epochs: int = None) -> Study:
    """A built-in study at `scale` (a key of SCALES: "classroom", "lab"), or as defined (None or "paper"); `epochs`:
    every downstream training that long (fine-tuning and the feature classifier; `with_epochs`)."""
    if name not in STUDIES:
        raise EngineError(f"unknown study '{name}'; choose one of {', '.join(STUDIES)}")
    if scale not in (None, "paper") and scale not in SCALES:
        raise EngineError(f"unknown scale '{scale}'; choose one of {', '.join(SCALES)}")
    study = STUDIES[name](evaluations)
    if scale in SCALES:
        study = at_scale(study, SCALES[scale])
    if seeds is not None:
        if seeds < 1:
            raise EngineError(f"--seeds must be at least 1 (got {seeds})")
        study = replace(study, seeds=tuple(range(seeds)))
    if epochs is not None:
        study = with_epochs(study, epochs)
    return study
