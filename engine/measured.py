"""The one table of measured facts: every figure the product states to a user, with where, when and how it was
measured.

A figure a page, a caption, a lesson, a time estimate or the README shows is read from here; nothing else in
engine/, studio/ or pages/ types a measured number. Each entry names the machine (MACHINES), the date and the
command that measures it again. BENCHMARKS.md holds the same figures with their context; docs/lab-notes/ how they
were reached. When a figure is re-measured, change it here (and in BENCHMARKS.md): the README's generated section
(`python -m engine measured --write README.md`) and every page follow, and tests/engine/test_measured.py fails until the README is
regenerated.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Machine:
    name: str  # short, as pages show it
    description: str
    check_ms: float = None  # the speed check (engine.ablations.timing.speed_check): the classroom MLM step, ms
    minilm_check_ms: float = None  # engine.ablations.timing.minilm_check: a step of the probe-ready recipe, ms

    def check(self, kind: str) -> float:
        """The reading of speed check `kind` (engine.ablations.timing.timed_check) on this machine, or None."""
        return {"classroom": self.check_ms, "minilm": self.minilm_check_ms}[kind]


MACHINES = {
    "xeon": Machine("Intel Xeon, AMX bf16",
                    "Intel Xeon (family 6 model 167), 2 vCPUs, AVX-512 and AMX with native bf16", 189.8),
    "zen5": Machine("AMD EPYC Zen 5, bf16",
                    "AMD EPYC Zen 5 (family 26 model 2), 2 vCPUs, AVX-512 with avx512_bf16", 195.0),
    "zen4": Machine("AMD EPYC Zen 4, bf16",
                    "AMD EPYC Zen 4 (family 25 model 17), 2 vCPUs under KVM, AVX-512 with native bf16", 284.5, 830.3),
    # the same CPU model on another host (2026-12-07), whose speed checks read faster: its own row, so a figure
    # measured there is scaled by the readings taken with it
    "zen4b": Machine("AMD EPYC Zen 4 (host 2), bf16",
                     "AMD EPYC Zen 4 (family 25 model 17), 2 vCPUs under KVM, AVX-512 with native bf16; the host of "
                     "2026-12-07, whose class prepare speed checks read 216.2 and 665.2 ms", 216.2, 665.2),
    "avx2": Machine("AMD EPYC, AVX2 only (fp32)",
                    "AMD EPYC, 2 vCPUs, AVX2 only: no bf16 units, so pre-training runs in fp32"),
    "h100": Machine("NVIDIA H100", "one NVIDIA H100 80GB HBM3, bf16"),
    "h200": Machine("NVIDIA H200", "one NVIDIA H200 (141 GB), bf16"),
}


@dataclass(frozen=True)
class Measured:
    """One measured figure."""
    value: float
    unit: str  # "min", "s", "x", "" (an accuracy or a ratio in [0, 1]), "%"
    machine: str  # a key of MACHINES
    date: str
    command: str  # the command that measures it again
    what: str = ""  # one line: what the figure is

    @property
    def where(self) -> str:
        """'<machine>, <date>': the label a page shows beside the figure."""
        return f"{MACHINES[self.machine].name}, {self.date}"

    def text(self, digits: int = None) -> str:
        """The figure as the product prints it ('12.5 min', '0.311', '2.05x')."""
        if digits is None:
            digits = {"min": 1, "s": 0, "x": 2, "%": 1}.get(self.unit, 3)
        number = f"{self.value:,.{digits}f}"
        return number + {"min": " min", "s": " s", "x": "x", "%": "%", "": ""}[self.unit]


@dataclass(frozen=True)
class Finding:
    """A finding of the paper as a classroom study measured it (the study's `ablate show` verdict)."""
    finding: str
    ours: str  # "39.6 vs 31.8, +7.8 [+4.6, +10.8]"
    verdict: str  # reproduced | not reproduced | inconclusive (engine/ablations/verdict.py)


@dataclass(frozen=True)
class StudyMeasurement:
    """A classroom study at its classroom defaults, from an empty runs folder, idle: its wall time, the results
    table in the paper's layout (dev scores, mean ± spread over the replicates) and each finding's verdict."""
    minutes: Measured
    seeds: int = 1  # pre-training starts the table and the verdicts pool
    results_command: str = None  # the command the table and verdicts came from, when not `minutes.command`
    table: dict = field(default_factory=dict)  # variant -> {column: "mean ± spread"}
    findings: tuple = ()


TABLE5_COLUMNS = ("BBC cloze span (F1)", "BBC punctuation (F1)", "BBC same story (acc)", "BBC topic (acc)")


def _table(columns: tuple, **rows) -> dict:
    """A study's results table from its columns and {variant: (cell, ...)} in their order: {variant: {column: cell}}."""
    return {variant: dict(zip(columns, cells)) for variant, cells in rows.items()}


# The BERT (MLM + NSP) row on the zen4b host: Table 5's settings and seed, so every family study that shares it
# (static-vs-dynamic's "dynamic", electra-vs-mlm, span-masking, input-formats' SEGMENT-PAIR) scored the same, to the
# decimal, from its own pre-training: written once here, each study taking its columns
_BERT_ZEN4B = dict(zip(TABLE5_COLUMNS, ("38.4 ± 2.8", "24.1 ± 1.1", "55.6 ± 0.5", "94.8 ± 0.2")))


def _bert_zen4b(columns: tuple) -> tuple:
    return tuple(_BERT_ZEN4B[c] for c in columns)


_TABLE5 = Measured(49.7, "min", "zen5", "2026-11-29", "python -m engine ablate run pretraining-tasks --classroom",
                   "Table 5 at classroom scale, from scratch")

STUDIES = {  # the key of engine.ablations.paper.STUDIES -> its classroom measurement
    "pretraining-tasks": StudyMeasurement(
        _TABLE5, seeds=3, results_command="python -m engine ablate run pretraining-tasks --classroom --seeds 3",
        table=_table(TABLE5_COLUMNS, **{
            "BERT (MLM + NSP)": ("39.6 ± 2.4", "25.1 ± 1.6", "53.4 ± 1.4", "95.2 ± 0.5"),
            "No NSP": ("39.0 ± 2.0", "23.4 ± 2.4", "51.0 ± 0.5", "94.9 ± 0.9"),
            "LTR & No NSP": ("31.8 ± 2.5", "6.3 ± 0.8", "51.1 ± 0.6", "95.5 ± 0.8"),
            "+ BiLSTM": ("36.5 ± 2.6", "15.4 ± 1.4", "52.0 ± 0.4", "95.4 ± 0.8")}),
        findings=(
            Finding("bidirectional beats LTR on span extraction", "39.6 vs 31.8, +7.8 [+4.6, +10.8]", "reproduced"),
            Finding("bidirectional beats LTR on the token task", "25.1 vs 6.3, +18.8 [+16.9, +20.5]", "reproduced"),
            Finding("MLM alone beats LTR on span extraction", "39.0 vs 31.8, +7.2 [+4.1, +10.1]", "reproduced"),
            Finding("removing NSP hurts a sentence-pair task", "53.4 vs 51.0, +2.4 [+0.6, +4.4]", "reproduced"),
            Finding("removing NSP hurts span extraction", "39.6 vs 39.0, +0.6 [-2.5, +3.9]", "inconclusive"),
            Finding("+ BiLSTM recovers part of LTR's loss on span", "36.5 vs 31.8, +4.7 [+1.5, +8.0]", "reproduced"),
            Finding("control: the gap on topic is small", "95.2 vs 95.5, -0.3 [-1.7, +1.1]", "inconclusive"),
        )),
    "model-size": StudyMeasurement(
        Measured(40.8, "min", "xeon", "2026-11-27", "python -m engine ablate run model-size --classroom",
                 "Table 6 at classroom scale"),
        findings=(Finding("larger models are better (cloze span)", "+6.7 [+4.0, +9.2]", "reproduced"),
                  Finding("larger models are better (topic)", "+2.6 [+0.4, +5.0]", "reproduced"))),
    "feature-based": StudyMeasurement(
        Measured(29.6, "min", "xeon", "2026-11-27", "python -m engine ablate run feature-based --classroom",
                 "Table 7 at classroom scale (MiniLM)"),
        findings=(Finding("fine-tuning beats the best feature-based combination", "43.5 vs 48.3, -4.8 [-9.0, -0.9]",
                          "not reproduced"),
                  Finding("concatenating the last four layers beats the embeddings alone", "+7.5 [+2.9, +12.4]",
                          "reproduced"))),
    "masking": StudyMeasurement(
        Measured(48.8, "min", "xeon", "2026-11-27", "python -m engine ablate run masking --classroom",
                 "Table 8 at classroom scale"),
        findings=(Finding("feature-based, MASK-only hurts", "+1.1 [+0.7, +1.6]", "reproduced"),
                  Finding("RND-only is worse than 80/10/10", "+5.3 [-0.1, +9.0]", "inconclusive"))),
    # the first family study run from scratch on an idle machine (docs/lab-notes/family-studies.md)
    "static-vs-dynamic": StudyMeasurement(
        Measured(48.8, "min", "zen4b", "2026-12-07",
                 "python -m engine ablate run static-vs-dynamic --classroom --foreground --runs-root RUNS",
                 "RoBERTa Table 1 (static vs dynamic masking), classroom scale"),
        table=_table((TABLE5_COLUMNS[0], TABLE5_COLUMNS[3]), **{
            "dynamic (a new mask each time)": _bert_zen4b((TABLE5_COLUMNS[0], TABLE5_COLUMNS[3])),
            "static (one mask)": ("36.4 ± 0.7", "92.6 ± 0.7"),
            "static, 10 copies": ("38.5 ± 1.9", "95.2 ± 0.9")}),
        findings=(Finding("dynamic masking is at least as good as 10 static copies (span)", "38.4 vs 38.5, -0.2 [-3.4, +3.3]",
                          "inconclusive"),
                  Finding("dynamic masking is at least as good as 10 static copies (topic)", "94.8 vs 95.2, -0.4 [-2.1, +1.4]",
                          "inconclusive"),
                  Finding("one fixed mask is worse than a new one each time (span)", "38.4 vs 36.4, +1.9 [-0.9, +5.1]",
                          "inconclusive"))),
    # from scratch with a 19.6-minute stop subtracted (docs/lab-notes/family-studies.md); over the hour: the three
    # generator objectives ran slower per FLOP than the estimate's BERT step, and none of them learned its task here
    # (docs/lab-notes/electra-classroom.md)
    "electra-vs-mlm": StudyMeasurement(
        Measured(106.4, "min", "zen4b", "2026-12-07",
                 "python -m engine ablate run electra-vs-mlm --classroom --foreground --runs-root RUNS",
                 "ELECTRA Table 5 (vs MLM, equal compute), classroom scale"),
        table=_table(TABLE5_COLUMNS, **{
            "BERT (MLM + NSP)": _bert_zen4b(TABLE5_COLUMNS),
            "ELECTRA": ("24.7 ± 2.2", "3.5 ± 1.6", "51.3 ± 0.7", "91.3 ± 0.5"),
            "All-Tokens MLM": ("21.3 ± 1.1", "3.5 ± 0.9", "51.7 ± 0.9", "91.4 ± 0.2"),
            "Replace MLM": ("23.9 ± 0.4", "2.5 ± 1.9", "50.0 ± 0.0", "61.9 ± 3.6")}),
        findings=(Finding("at equal compute ELECTRA beats BERT (span), its discriminator at the always-'original' rule",
                          "24.7 vs 38.4, -13.7 [-17.3, -10.1]", "not reproduced"),
                  Finding("All-Tokens MLM beats BERT (span), its model copying its input", "21.3 vs 38.4, -17.0 [-20.4, -14.0]",
                          "not reproduced"),
                  Finding("Replace MLM beats BERT (span), its model at the unigram level", "23.9 vs 38.4, -14.5 [-17.8, -11.7]",
                          "not reproduced"),
                  Finding("ELECTRA beats All-Tokens MLM (span)", "24.7 vs 21.3, +3.3 [+0.9, +6.0]", "reproduced"))),
    # from scratch in two parts: its whole-word and span rows stopped on a masking defect (a long word past the
    # step's prediction slots, fixed in engine/pretraining/masking.py), deleted and retrained by `ablate resume`; the
    # time is the first part's finished jobs plus the second part's wall time (docs/lab-notes/family-studies.md)
    "span-masking": StudyMeasurement(
        Measured(103.2, "min", "zen4b", "2026-12-08",
                 "python -m engine ablate run span-masking --classroom --foreground --runs-root RUNS",
                 "SpanBERT's masking schemes, classroom scale"),
        table=_table(TABLE5_COLUMNS[:2], **{
            "BERT (MLM + NSP)": _bert_zen4b(TABLE5_COLUMNS[:2]), "random tokens": ("37.2 ± 3.5", "21.0 ± 5.2"),
            "whole words": ("37.9 ± 0.9", "21.5 ± 3.0"), "random spans": ("24.5 ± 4.0", "13.0 ± 1.4"),
            "random spans + SBO": ("28.1 ± 1.8", "15.2 ± 0.9")}),
        findings=(Finding("random spans beat random tokens on span extraction", "24.5 vs 37.2, -12.6 [-17.8, -7.6]",
                          "not reproduced"),
                  Finding("random spans at least match whole words on span extraction", "24.5 vs 37.9, -13.4 [-17.5, -9.4]",
                          "not reproduced"),
                  Finding("random spans help the token task", "13.0 vs 21.0, -8.0 [-12.3, -2.3]", "not reproduced"),
                  Finding("single segments without NSP beat pairs with NSP (span)", "37.2 vs 38.4, -1.2 [-5.3, +3.2]",
                          "inconclusive"),
                  Finding("the span boundary objective helps span extraction", "28.1 vs 24.5, +3.6 [-0.7, +7.8]",
                          "inconclusive"))),
    # from scratch, idle but for two minutes stopped (subtracted) while tests ran; over the hour: the two formats that
    # batch by tokens pad more rows a step (docs/lab-notes/family-studies.md)
    "input-formats": StudyMeasurement(
        Measured(87.0, "min", "zen4b", "2026-12-08",
                 "python -m engine ablate run input-formats --classroom --foreground --runs-root RUNS",
                 "RoBERTa Table 2 (input formats and NSP), classroom scale"),
        table=_table((TABLE5_COLUMNS[0], TABLE5_COLUMNS[2], TABLE5_COLUMNS[3]), **{
            "SEGMENT-PAIR+NSP": _bert_zen4b((TABLE5_COLUMNS[0], TABLE5_COLUMNS[2], TABLE5_COLUMNS[3])),
            "SENTENCE-PAIR+NSP": ("35.7 ± 2.2", "58.6 ± 0.5", "95.5 ± 0.0"),
            "FULL-SENTENCES": ("43.3 ± 2.4", "50.8 ± 0.5", "94.0 ± 0.3"),
            "DOC-SENTENCES": ("41.6 ± 0.3", "50.8 ± 0.7", "94.4 ± 0.3")}),
        findings=(Finding("single sentences hurt span extraction", "38.4 vs 35.7, +2.6 [-0.9, +6.3]", "inconclusive"),
                  Finding("single sentences hurt a sentence-pair task", "55.6 vs 58.6, -3.0 [-4.7, -1.2]", "not reproduced"),
                  Finding("without NSP, DOC-SENTENCES matches or beats SEGMENT-PAIR+NSP", "41.6 vs 38.4, +3.3 [+0.2, +5.8]",
                          "reproduced"),
                  Finding("DOC-SENTENCES slightly beats FULL-SENTENCES", "41.6 vs 43.3, -1.7 [-4.1, +1.0]", "inconclusive"),
                  Finding("control: single sentences cost little on topic", "94.8 vs 95.5, -0.7 [-2.2, +0.8]",
                          "inconclusive"))),
    "training-steps": StudyMeasurement(
        Measured(24.5, "min", "xeon", "2026-11-27", "python -m engine ablate run training-steps --classroom",
                 "Figure 5 at classroom scale"),
        findings=(Finding("MLM above LTR at the last checkpoint (cloze span)", "-10.5 [-12.9, -7.7]",
                          "not reproduced"),)),
}


@dataclass(frozen=True)
class LessonMeasurement:
    """What a lesson (engine/ablations/lessons.py) showed when it was measured, in one or two sentences, and what
    it took."""
    shows: str
    minutes: Measured
    from_scratch: float = None  # minutes without the lesson it follows (None: it follows none)


def _lesson_time(minutes, date="2026-11-29", machine="zen5", command=""):
    return Measured(minutes, "min", machine, date, command)


LESSONS = {
    "table5": LessonMeasurement(
        "On each of three pre-training starts BERT beat the left-to-right model on span extraction (+8.0, +10.1, "
        "+5.4 F1) and on restoring punctuation, each beyond its uncertainty; removing NSP hurt the same-story task "
        "on two starts of three.",
        _TABLE5),  # the lesson is the classroom default
    "table5-second-seed": LessonMeasurement(
        "A second pre-training start: span held (+9.0 [+5.7, +12.7] pooled over two seeds) and NSP's value on the "
        "same-story task did not clear its interval (+2.3 [-0.1, +5.0]).",
        _lesson_time(51.5, command="python -m engine ablate lesson table5-second-seed"), from_scratch=100),
    "table5-3k": LessonMeasurement(
        "At the paper's equal steps and 3,000 of them, BERT beats the left-to-right model on punctuation (+10.2 F1) "
        "but the span column goes the other way (-7.8): a loss on every token learns faster per step early on.",
        _lesson_time(39.6, command="python -m engine ablate lesson table5-3k")),
    "table5-3k-equal-flops": LessonMeasurement(
        "At equal FLOPs the left-to-right model gets 1,420 steps to BERT's 3,000; its span lead narrows (-7.8 to "
        "-5.3) but stays beyond the uncertainty.",
        _lesson_time(26.3, command="python -m engine ablate lesson table5-3k-equal-flops"), from_scratch=36),
    "span": LessonMeasurement(
        "With four times the classroom steps the MLM model overtakes the left-to-right one on span extraction: "
        "+10.8 F1 [+7.1, +14.9] at 12,000 steps (the paper's SQuAD gap: 10.7); BERT learns NSP (0.775 held out).",
        _lesson_time(65.9, command="python -m engine ablate lesson span")),
    "table5-12k": LessonMeasurement(
        "At 12,000 equal steps Table 5 comes out as the paper's, removing NSP hurting the same-story task by +7.9 "
        "[+5.4, +10.3] once NSP is well learned; the paper's two small gaps stay inconclusive (one seed).",
        _lesson_time(41.5, command="python -m engine ablate lesson table5-12k"), from_scratch=100),
}

_CLASSROOM_RUN = "python -m engine pretrain --out runs/bert-tiny"
_PROBE_READY = ("python -m engine class prepare (its third part: python -m engine pretrain --recipe continued --corpus "
                "everyday --init minilm --steps 1300 --out runs/minilm-continued)")
_PROBE_READY_FP32 = "python -m engine pretrain --init minilm --corpus all --out runs/minilm-continued (800 steps)"
_NSP_VS_SOP = "python -m engine ablate run nsp-vs-sop --classroom --foreground --runs-root RUNS"

FACTS = {
    # the classroom run: `python -m engine pretrain` with every flag left out (engine/pretraining/config.py)
    "classroom_run.minutes_bf16": Measured(8.6, "min", "zen4", "2026-12-02", _CLASSROOM_RUN,
                                           "the classroom pre-training run's wall time with bf16 (as class prepare's "
                                           "reference run)"),
    "classroom_run.minutes_fp32": Measured(15.7, "min", "avx2", "2026-11-27", _CLASSROOM_RUN,
                                           "the classroom pre-training run's wall time in fp32"),
    "classroom_run.mask_accuracy": Measured(0.129, "", "zen4", "2026-12-02", _CLASSROOM_RUN,
                                            "held-out accuracy at [MASK] at the end (128 tokens)"),
    "classroom_run.nsp_accuracy": Measured(0.621, "", "zen4", "2026-12-02", _CLASSROOM_RUN,
                                           "held-out NSP accuracy at the end"),
    "classroom_run.nsp_rule": Measured(0.605, "", "zen4", "2026-12-02", _CLASSROOM_RUN,
                                       "held-out NSP accuracy of the best rule that uses no model"),
    "classroom_run.frequent_token": Measured(0.047, "", "zen4", "2026-12-02", _CLASSROOM_RUN,
                                             "the most frequent token's share of the held-out [MASK] positions"),
    # the probe-ready model: MiniLM continued with MLM + NSP (studio/probe_ready.py, the Model page's button)
    "probe_ready.minutes": Measured(17.4, "min", "zen4b", "2026-12-07", _PROBE_READY,
                                    "building the probe-ready model, wall time (class prepare's third part)"),
    "probe_ready.steps": Measured(1300, "", "zen4b", "2026-12-07", _PROBE_READY,
                                  "the steps the probe-ready model's measured minutes trained (its length scales them)"),
    "probe_ready.minutes_fp32": Measured(32.0, "min", "avx2", "2026-12-03", _PROBE_READY_FP32,
                                         "building the probe-ready model in fp32 (a CPU without bf16 units)"),
    "probe_ready.steps_fp32": Measured(800, "", "avx2", "2026-12-03", _PROBE_READY_FP32,
                                       "the steps of the fp32 figure's run"),
    "probe_ready.mlm_accuracy": Measured(0.345, "", "zen4b", "2026-12-07", _PROBE_READY,
                                         "the probe-ready model's held-out MLM accuracy"),
    "probe_ready.nsp_accuracy": Measured(0.891, "", "zen4b", "2026-12-07", _PROBE_READY,
                                         "the probe-ready model's held-out NSP accuracy"),
    "probe_ready.everyday_top1": Measured(0.125, "", "zen4b", "2026-12-07", _PROBE_READY,
                                          "the probe set's everyday blanks the probe-ready model fills first try"),
    "probe_ready.everyday_top5": Measured(0.5, "", "zen4b", "2026-12-07", _PROBE_READY,
                                          "the probe set's everyday blanks with an answer in the probe-ready model's top 5"),
    # `python -m engine class prepare` on an empty runs folder and cache: the cache, the reference run, the
    # probe-ready model, one after the other (engine/classroom.py)
    "class_prepare.minutes": Measured(25.9, "min", "zen4b", "2026-12-07", "python -m engine class prepare",
                                      "preparing a class (class prepare, empty runs folder and cache)"),
    # the time estimate (engine.ablations.timing.training_seconds) counts a pre-training's FLOPs at the speed check's
    # rate; a step with a generator (a narrow second network, its (N, V) logits and their sampling) took more time
    # per FLOP than BERT's: in electra-vs-mlm's run, BERT 6,000 steps in 13.1 min, ELECTRA 5,573 in 23.3, All-Tokens
    # MLM 2,365 in 22.9, Replace MLM 4,213 in 23.9 at equal FLOPs: 1.78, 1.75, 1.82 times BERT's seconds per FLOP
    "estimate.generator_step_cost": Measured(
        1.78, "x", "zen4b", "2026-12-07", "python -m engine ablate run electra-vs-mlm --classroom --foreground --runs-root RUNS",
        "seconds per FLOP of a pre-training step with a generator (ELECTRA, All-Tokens MLM, Replace MLM) over BERT's"),
    # Table 5 at lab scale on one GPU, the 19 jobs sharing it (engine/ablations/paper.py LAB, BENCHMARKS.md "Lab scale")
    "lab_table5.minutes_h200": Measured(
        10.2, "min", "h200", "2026-11-27",
        "python -m engine ablate run pretraining-tasks --lab --seeds 1 --foreground --parallel 6",
        "Table 5 at lab scale, one seed, 6 jobs at once on one GPU"),
    # the engine against transformers (python -m engine bench): both sides from the same weights and loss
    "bench.cpu_pretrain_ratio": Measured(
        3.16, "x", "avx2", "2026-12-06",
        "python -m engine bench --threads 2 --scenario pretrain --preset mini --seq-len 128 --batch-size 32 "
        "--precision fp32", "BERT-mini pre-training step, 2 threads, fp32: engine / transformers"),
    "bench.gpu_base_ratio_eager": Measured(
        1.25, "x", "h200", "2026-12-04",
        "python -m engine bench --scenario pretrain --preset base --seq-len 128 --batch-size 256 --precision bf16 "
        "--device cuda", "BERT-base pre-training step, 128 x 256, bf16: engine / transformers"),
    "bench.gpu_base_ratio_compiled": Measured(
        1.79, "x", "h200", "2026-12-04",
        "python -m engine bench --scenario pretrain --preset base --seq-len 128 --batch-size 256 --precision bf16 "
        "--device cuda --compile", "the same step with the engine compiled (torch.compile), transformers eager"),
    "bench.gpu_base_mfu": Measured(
        44.5, "%", "h200", "2026-12-04",
        "python -m engine bench --scenario pretrain --preset base --seq-len 128 --batch-size 256 --precision bf16 "
        "--device cuda --compile", "the engine's MFU on that compiled step"),
    "bench.gpu_large_mfu": Measured(
        38.6, "%", "h200", "2026-12-04",
        "python -m engine bench --scenario pretrain --preset large --seq-len 128 --batch-size 128 --precision bf16 "
        "--device cuda", "BERT-large pre-training step, 128 x 128, bf16: the engine's MFU"),
    "bench.gpu_packed_512_gain": Measured(
        1.21, "x", "h200", "2026-12-04",
        "python -m engine bench --scenario pretrain --preset base --seq-len 512 --batch-size 32 --precision bf16 "
        "--device cuda --data all --packing (against the same without --packing)",
        "BERT-base at 512 tokens, real corpus lengths: packed / padded useful tokens/s"),
    # nsp-vs-sop (ALBERT Table 5) at classroom scale, its first run: cancelled at its time limit with the MLM + SOP
    # row's fine-tunings not done, so a partial run: no study time, no verdict (docs/lab-notes/family-studies.md);
    # the machine loaded 2-4 (once 7) by another session's tests throughout
    "nsp_vs_sop.partial_minutes": Measured(
        65.6, "min", "zen4", "2026-12-07", _NSP_VS_SOP,
        "nsp-vs-sop at classroom scale, first run, loaded: cancelled at the time limit with 11 of its 15 jobs done"),
    "nsp_vs_sop.nsp_model_nsp_accuracy": Measured(0.742, "", "zen4", "2026-12-07", _NSP_VS_SOP,
                                                  "the BERT (MLM + NSP) row's held-out NSP accuracy (rule 0.605)"),
    "nsp_vs_sop.nsp_model_sop_accuracy": Measured(
        0.473, "", "zen4", "2026-12-07", _NSP_VS_SOP,
        "the same model on sentence-order pairs rebuilt from its held-out pairs (113 of 239; chance 0.5, ALBERT 52.0%)"),
    "nsp_vs_sop.sop_model_sop_accuracy": Measured(0.583, "", "zen4", "2026-12-07", _NSP_VS_SOP,
                                                  "the MLM + SOP row's held-out SOP accuracy (length rule 0.562)"),
    "nsp_vs_sop.sop_model_nsp_accuracy": Measured(
        0.460, "", "zen4", "2026-12-07", _NSP_VS_SOP,
        "the same model on next-sentence pairs rebuilt from its held-out pairs (420; chance 0.5, ALBERT 78.9%)"),
    # the same study completed by `ablate resume` (the SOP row's four fine-tunings, 17:06-17:11, load about 2): its verdicts
    "nsp_vs_sop.sop_minus_nsp_span_f1": Measured(
        6.8, "%", "zen4", "2026-12-07", _NSP_VS_SOP + "; then ablate resume nsp-vs-sop --foreground",
        "MLM + SOP minus BERT (MLM + NSP) on BBC cloze span F1 (points), 95% interval [+3.6, +9.6], one pre-training seed: reproduced"),
    "nsp_vs_sop.sop_minus_mlm_span_f1": Measured(
        8.0, "%", "zen4", "2026-12-07", _NSP_VS_SOP + "; then ablate resume nsp-vs-sop --foreground",
        "MLM + SOP minus MLM only on BBC cloze span F1 (points), 95% interval [+3.9, +11.3], one pre-training seed: reproduced"),
}


def fact(key: str) -> Measured:
    return FACTS[key]


def study(key: str) -> StudyMeasurement:
    """The classroom measurement of a study (a key of engine.ablations.paper.STUDIES), or None."""
    return STUDIES.get(key)


def lesson(key: str) -> LessonMeasurement:
    return LESSONS[key]


README_START = "<!-- measured facts: generated by `python -m engine measured --write README.md` from engine/measured.py -->"
README_END = "<!-- end of measured facts -->"


def readme_table() -> str:
    """README.md's table of measured figures, between README_START and README_END (a test keeps them equal)."""
    rows = [("the classroom pre-training run, bf16", FACTS["classroom_run.minutes_bf16"]),
            ("the classroom pre-training run, fp32", FACTS["classroom_run.minutes_fp32"]),
            (f"its held-out accuracy at [MASK] (most frequent token {FACTS['classroom_run.frequent_token'].text()})",
             FACTS["classroom_run.mask_accuracy"]),
            (f"its held-out NSP accuracy (a no-model rule {FACTS['classroom_run.nsp_rule'].text()})",
             FACTS["classroom_run.nsp_accuracy"]),
            ("preparing a class: all three parts", FACTS["class_prepare.minutes"]),
            ("building the probe-ready model", FACTS["probe_ready.minutes"]),
            ("building the probe-ready model, fp32", FACTS["probe_ready.minutes_fp32"]),
            ("its held-out MLM accuracy", FACTS["probe_ready.mlm_accuracy"]),
            ("its held-out NSP accuracy", FACTS["probe_ready.nsp_accuracy"])]
    rows += [(s.minutes.what, s.minutes) for s in STUDIES.values()]
    rows += [(m.what, m) for k, m in FACTS.items() if k.startswith("bench.")]
    lines = [README_START, "", "| what (CPUs: 2 vCPUs, idle) | measured | machine, date |", "| --- | --- | --- |"]
    lines += [f"| {what} | {m.text()} | {m.where} |" for what, m in rows]
    return "\n".join(lines + ["", README_END])


def write_readme(path) -> None:
    """Replace the generated table between README_START and README_END in the file `path` (`measured --write`).
    The file is replaced atomically (engine.fileio: a temporary file beside it, then a rename), so a full disk or a
    failed write leaves it as it was; a file without exactly one start line followed by one end line, one that is not
    UTF-8 or one that is read-only is refused. Every failure is one EngineError line."""
    import os
    from pathlib import Path

    from engine.errors import EngineError
    from engine.fileio import atomic_write_text
    path = Path(os.path.realpath(path))  # a symlinked README: its target is rewritten, the link stays
    try:
        data = path.read_bytes() if path.is_file() else b""  # no file: "has no generated table", below
    except OSError as e:
        raise EngineError(f"could not read {path}: {e.strerror or e}; check its permissions") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EngineError(f"{path} is not UTF-8 text (byte {e.start}); re-save it as UTF-8, then run again") from e
    n_start, n_end = text.count(README_START), text.count(README_END)
    if not n_start or not n_end:
        raise EngineError(f"{path} has no generated table (the lines {README_START} and {README_END}); add "
                          "them where the table goes")
    if n_start > 1 or n_end > 1:
        which = " and ".join(f"the line {line} {n} times" for line, n in ((README_START, n_start), (README_END, n_end)) if n > 1)
        raise EngineError(f"{path} holds {which}; keep one start line and one end line around the table, then run again")
    start, end = text.index(README_START), text.index(README_END)
    if end < start:
        raise EngineError(f"{path} has the line {README_END} before the line {README_START}; put the start line above "
                          f"the end line, then run again")
    if not os.access(path, os.W_OK):
        raise EngineError(f"{path} is read-only; make it writable (chmod u+w) and run again")
    atomic_write_text(path, text[:start] + readme_table() + text[end + len(README_END):])


def main(argv: list = None) -> int:
    """`python -m engine measured [--readme]`: every measured fact with its machine, date and command."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m engine measured", description=main.__doc__)
    ap.add_argument("--readme", action="store_true", help="print README.md's generated table of measured figures")
    ap.add_argument("--write", metavar="README", help="replace the generated table in this README file")
    args = ap.parse_args(argv)
    if args.write:
        write_readme(args.write)
        return 0
    if args.readme:
        print(readme_table())
        return 0
    for key, m in FACTS.items():
        print(f"{key}: {m.text(3)} | {m.where} | {m.command}")
    for key, s in STUDIES.items():
        print(f"studies.{key}.minutes: {s.minutes.text()} | {s.minutes.where} | {s.minutes.command}")
        for f in s.findings:
            print(f"  {f.finding}: {f.ours} ({f.verdict})")
    for key, lesson in LESSONS.items():
        print(f"lessons.{key}.minutes: {lesson.minutes.text()} | {lesson.minutes.where} | {lesson.minutes.command}")
    return 0
