"""Lessons: classroom studies with the settings a class runs them with, what each was measured to show, and what
it cost. A lesson is one `python -m engine ablate run ...` command (`Lesson.argv`), nothing more: the Ablations
page's "Start from a lesson" fills its New-study form with it, `python -m engine ablate lesson KEY` runs it.

The texts quote measurements, each from the BENCHMARKS.md section it names (machine, command, date); a lesson run
elsewhere reports its own verdicts, which may differ. Lessons that build on another take over its finished runs
(engine/ablations/reuse.py) when run in the same runs folder, which is what keeps them inside a lesson's time.
"""
from dataclasses import dataclass

from engine.ablations.study import Study
from engine.errors import EngineError


@dataclass(frozen=True)
class Lesson:
    key: str  # `ablate lesson KEY`
    title: str
    study: str  # a key of engine.ablations.paper.STUDIES, at classroom scale
    name: str  # the study folder under <runs>/studies/
    shows: str  # what the class saw when it was measured, and where that is recorded
    cost: str  # the measured wall time, machine and date
    seeds: int = None  # None: the classroom default (one pre-training seed)
    steps: int = None  # None: the classroom default (3,000)
    budget: str = "steps"  # steps | flops (engine/ablations/planner.py)
    after: str = None  # the lesson whose finished runs this one takes over, run first in the same runs folder

    def argv(self) -> list:
        """The `python -m engine ablate` arguments of this lesson."""
        out = ["run", self.study, "--classroom", "--name", self.name]
        if self.seeds is not None:
            out += ["--seeds", str(self.seeds)]
        if self.steps is not None:
            out += ["--steps", str(self.steps)]
        if self.budget != "steps":
            out += ["--budget", self.budget]
        return out

    def command(self) -> str:
        return "python -m engine ablate " + " ".join(self.argv())

    def build(self) -> Study:
        """The study this lesson runs: `argv` parsed and built by `ablate run`'s own code."""
        from engine.ablations.cli import build_parser, study_of_run  # cli imports this module
        return study_of_run(build_parser().parse_args(self.argv()))


LESSONS = (
    Lesson("table5", "Why BERT reads both ways (Table 5)", "pretraining-tasks", "table5",
           shows="Restoring punctuation needs the words after the gap: BERT beats the left-to-right model on it beyond "
                 "the uncertainty on every pre-training start measured (+10.2 F1 on an AMD EPYC Zen 5, +8.9 on an "
                 "Intel Xeon). At 3,000 steps the span column goes the other way (LTR ahead, -7.8) and NSP is barely "
                 "learned, so the NSP rows are inconclusive; the span lesson shows what more steps change "
                 "(BENCHMARKS.md, Classroom Table 5 study, stop 37).",
           cost="39.6 min on an idle 2-core AMD EPYC Zen 5 with bf16, 2026-11-29"),
    Lesson("table5-hour", "Table 5 inside the hour: twice the steps at equal compute", "pretraining-tasks",
           "table5-6k-flops", steps=6000, budget="flops",
           shows="BERT pre-trained 6,000 steps, No NSP and LTR at BERT's FLOPs (6,002 and 2,840 steps). On its first "
                 "pre-training seed: BERT above LTR on span (+8.0 [+3.9, +13.3]) and on the token task (+16.8), MLM "
                 "alone above LTR on span (+5.5), removing NSP hurting the same-story task (+3.6 [+1.3, +6.0]; NSP "
                 "0.734); + BiLSTM ahead but inconclusive (+3.2); the topic control a small gap (-0.7). With a second seed "
                 "(`--seeds 2`, about 50 min more) the span findings held (+9.0 [+5.7, +12.7] pooled) and NSP's did not "
                 "clear its interval (+2.3 [-0.1, +5.0]; +3.6 and +1.0 by seed). This budget was chosen after the "
                 "12,000-step result was known; it is a lesson, not the default "
                 "(BENCHMARKS.md, Classroom Table 5 study, stop 41, twice the steps at equal FLOPs).",
           cost="49.7 min from scratch on an idle 2-core AMD EPYC Zen 5 with bf16, 2026-11-29"),
    Lesson("table5-second-seed", "A second pre-training start (Table 5, two seeds)", "pretraining-tasks",
           "table5-two-seeds", seeds=2, after="table5",
           shows="How much a verdict moves between pre-training starts: the first lesson's runs are taken over, seed 1 "
                 "is trained, and the verdicts resample the two seeds as clusters. The token task stays reproduced "
                 "(+11.3 pooled); span moves from -7.8 to -4.3 between the starts (BENCHMARKS.md, Classroom Table 5 "
                 "study, stop 37 and 39).",
           cost="45.2 min after the first lesson on the Zen 5, 2026-11-29 (about 76 min from scratch)"),
    Lesson("table5-equal-flops", "Equal compute instead of equal steps (Table 5)", "pretraining-tasks",
           "table5-equal-flops", budget="flops", after="table5",
           shows="A left-to-right loss trains every position, MLM's a quarter of them: at equal FLOPs the LTR model "
                 "gets 1,420 steps to BERT's 3,000. Its span lead narrows (-7.8 to -5.3) but stays beyond the "
                 "uncertainty, so the lead is not LTR's extra compute per step; the token task is still reproduced "
                 "(BENCHMARKS.md, Classroom Table 5 study, stop 40, at equal FLOPs).",
           cost="26.3 min after the first lesson on the Zen 5, 2026-11-29 (about 36 min from scratch)"),
    Lesson("span", "Span extraction needs more steps (Figure 5 at 12,000 steps)", "training-steps", "figure5-12k",
           steps=12000,
           shows="With four times the classroom steps the MLM model overtakes the left-to-right one on span "
                 "extraction: +10.8 F1 [+7.1, +14.9] at 12,000 steps (the paper's SQuAD gap: 10.7; the run's "
                 "checkpoints at 6,000 and 3,000: +6.7, +2.0); BERT also learns NSP (held-out 0.775 against the "
                 "no-model rule's 0.604). The "
                 "lesson after it runs the whole Table 5 at this budget on these two models "
                 "(BENCHMARKS.md, Classroom Table 5 study, stop 40, four times the steps).",
           cost="65.9 min on the Zen 5, 2026-11-29: over the classroom hour, a lesson of its own"),
    Lesson("table5-12k", "The whole Table 5 at 12,000 steps", "pretraining-tasks", "table5-12k", steps=12000,
           after="span",
           shows="At four times the classroom steps Table 5 comes out as the paper's: BERT above LTR on span (+10.8) "
                 "and on the token task (+18.2), MLM alone above LTR on span (+11.4), + BiLSTM recovering part of "
                 "LTR's loss (+8.2), and removing NSP hurting the same-story task, +7.9 [+5.4, +10.3], once NSP is "
                 "learned (0.775); the paper's two small gaps (NSP on span, the topic control) inconclusive. One "
                 "pre-training seed (BENCHMARKS.md, Classroom Table 5 study, stop 41).",
           cost="41.5 min after the span lesson on the Zen 5, 2026-11-29 (about 1 h 40 min from scratch)"),
)


def get_lesson(key: str) -> Lesson:
    for lesson in LESSONS:
        if lesson.key == key:
            return lesson
    raise EngineError(f"unknown lesson '{key}'; choose one of {', '.join(l.key for l in LESSONS)} "
                      "(`python -m engine ablate lesson` lists them)")


def describe_lesson(lesson: Lesson) -> str:
    after = f"\n  after: the '{lesson.after}' lesson, in the same runs folder (its runs are taken over)" if lesson.after else ""
    return (f"{lesson.key}: {lesson.title}\n  {lesson.command()}\n  shows: {lesson.shows}\n  took: {lesson.cost}{after}")
