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
    steps: int = None  # None: the study's classroom default (Table 5: 6,000; the others: 3,000)
    budget: str = None  # steps | flops (engine/ablations/planner.py); None: the study's (Table 5: flops; others: steps)
    after: str = None  # the lesson whose finished runs this one takes over, run first in the same runs folder

    def argv(self) -> list:
        """The `python -m engine ablate` arguments of this lesson."""
        out = ["run", self.study, "--classroom", "--name", self.name]
        if self.seeds is not None:
            out += ["--seeds", str(self.seeds)]
        if self.steps is not None:
            out += ["--steps", str(self.steps)]
        if self.budget is not None:
            out += ["--budget", self.budget]
        return out

    def command(self) -> str:
        return "python -m engine ablate " + " ".join(self.argv())

    def build(self) -> Study:
        """The study this lesson runs: `argv` parsed and built by `ablate run`'s own code."""
        from engine.ablations.cli import build_parser, study_of_run  # cli imports this module
        return study_of_run(build_parser().parse_args(self.argv()))


LESSONS = (
    Lesson("table5", "Why BERT reads both ways, and what NSP is for (Table 5)", "pretraining-tasks", "table5",
           shows="The classroom default: BERT pre-trained 6,000 steps, No NSP and the left-to-right model at BERT's "
                 "FLOPs (6,002 and 2,840 steps). On each of three pre-training starts BERT beat LTR on span extraction "
                 "(+8.0, +10.1, +5.4 F1) and on restoring punctuation (+16.8 to +20.5), each beyond its uncertainty; "
                 "MLM alone beat LTR on span too (+5.5 to +8.8). Removing NSP hurt the same-story task beyond its "
                 "uncertainty on two starts of three (+3.6 and +2.7; +1.0 on the other), +2.4 [+0.6, +4.4] pooled; "
                 "NSP was learned (0.67-0.73 held out against 0.60 for the no-model rule). The topic control "
                 "showed a small gap (-0.7 to +0.3), as the paper's. This budget was chosen after a 12,000-step run "
                 "and adopted on the third start, which it was not chosen on (BENCHMARKS.md, Classroom Table 5 study, "
                 "stops 41 and 42).",
           cost="49.7 min from scratch on an idle 2-core AMD EPYC Zen 5 with bf16, 2026-11-29 (51.4 for the third "
                "start's jobs)"),
    Lesson("table5-second-seed", "A second pre-training start (Table 5, two seeds)", "pretraining-tasks",
           "table5-two-seeds", seeds=2, after="table5",
           shows="How much a verdict moves between pre-training starts: the first lesson's runs are taken over, seed 1 "
                 "is trained, and the verdicts resample the two seeds as clusters. Measured: span held (+9.0 "
                 "[+5.7, +12.7] pooled), + BiLSTM reproduced pooled (+3.8), and NSP's value on the same-story task "
                 "did not clear its interval (+2.3 [-0.1, +5.0]; +3.6 and +1.0 by seed) (BENCHMARKS.md, Classroom "
                 "Table 5 study, stop 41).",
           cost="51.5 min after the first lesson on the Zen 5, 2026-11-29 (about 100 min from scratch)"),
    Lesson("table5-3k", "Equal steps at 3,000: the left-to-right model ahead on span", "pretraining-tasks",
           "table5-3k", steps=3000, budget="steps",
           shows="The paper's protocol (equal steps) at the classroom recipe's 3,000 steps, the default until stop 42. "
                 "Restoring punctuation already needs the words after the gap: BERT beats LTR on it beyond the "
                 "uncertainty (+10.2 F1 on a Zen 5, +8.9 on a Xeon). The span column goes the other way (LTR ahead, "
                 "-7.8; -6.2 pooled over three starts): a loss on every token learns faster per step than MLM's "
                 "quarter, early on. NSP is barely learned (0.600 against the rule's 0.604), so the NSP rows are "
                 "inconclusive (BENCHMARKS.md, Classroom Table 5 study, stops 37 and 38).",
           cost="39.6 min on an idle 2-core AMD EPYC Zen 5 with bf16, 2026-11-29"),
    Lesson("table5-3k-equal-flops", "Equal compute instead of equal steps, at 3,000 steps", "pretraining-tasks",
           "table5-3k-equal-flops", steps=3000, budget="flops", after="table5-3k",
           shows="A left-to-right loss trains every position, MLM's a quarter of them: at equal FLOPs the LTR model "
                 "gets 1,420 steps to BERT's 3,000. Its span lead narrows (-7.8 to -5.3) but stays beyond the "
                 "uncertainty, so at 3,000 steps the lead is not LTR's extra compute per step; the token task is still "
                 "reproduced (BENCHMARKS.md, Classroom Table 5 study, stop 40, at equal FLOPs).",
           cost="26.3 min after the 3,000-step lesson on the Zen 5, 2026-11-29 (about 36 min from scratch)"),
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
           budget="steps", after="span",
           shows="At four times the classroom steps, equal steps, Table 5 comes out as the paper's: BERT above LTR on "
                 "span (+10.8) and on the token task (+18.2), MLM alone above LTR on span (+11.4), + BiLSTM recovering "
                 "part of LTR's loss (+8.2), and removing NSP hurting the same-story task, +7.9 [+5.4, +10.3], once NSP "
                 "is well learned (0.775); the paper's two small gaps (NSP on span, the topic control) inconclusive. "
                 "One pre-training seed (BENCHMARKS.md, Classroom Table 5 study, stop 41).",
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
