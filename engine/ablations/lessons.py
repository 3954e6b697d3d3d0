"""Lessons: classroom studies with the settings a class runs them with, what each was measured to show, and what
it cost. A lesson is one `python -m engine ablate run ...` command (`Lesson.argv`), nothing more: the Ablations
page's "Start from a lesson" fills its New-study form with it, `python -m engine ablate lesson KEY` runs it.

What each lesson showed when it was measured, and what it took, is in engine/measured.py (machine, date,
command); a lesson run elsewhere reports its own verdicts, which may differ. Lessons that build on another take over its finished runs
(engine/ablations/reuse.py) when run in the same runs folder, which is what keeps them inside a lesson's time.
"""
from dataclasses import dataclass

from engine import measured
from engine.ablations.run_args import run_parser, study_of_run
from engine.ablations.study import Study
from engine.errors import EngineError


@dataclass(frozen=True)
class Lesson:
    key: str  # `ablate lesson KEY`
    title: str
    study: str  # a key of engine.ablations.paper.STUDIES, at classroom scale
    name: str  # the study folder under <runs>/studies/
    seeds: int = None  # None: the classroom default (one pre-training seed)
    steps: int = None  # None: the study's at classroom scale (paper.CLASSROOM: the scale's, or what it sets for the study)
    budget: str = None  # steps | flops (engine/ablations/planner.py); None: the study's at classroom scale, likewise
    after: str = None  # the lesson whose finished runs this one takes over, run first in the same runs folder

    @property
    def shows(self) -> str:
        """What the lesson showed when it was measured (engine/measured.py)."""
        return measured.lesson(self.key).shows

    @property
    def cost(self) -> str:
        """The measured wall time, machine and date (engine/measured.py)."""
        m = measured.lesson(self.key)
        scratch = f" (about {m.from_scratch:.0f} min from scratch)" if m.from_scratch else ""
        after = f" after the '{self.after}' lesson" if self.after else ""
        return f"{m.minutes.text()}{after} on {m.minutes.where}{scratch}"

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
        return study_of_run(run_parser().parse_args(self.argv()[1:]))


LESSONS = (
    Lesson("table5", "Why BERT reads both ways, and what NSP is for (Table 5)", "pretraining-tasks", "table5"),
    Lesson("table5-second-seed", "A second pre-training start (Table 5, two seeds)", "pretraining-tasks",
           "table5-two-seeds", seeds=2, after="table5"),
    Lesson("table5-3k", "Equal steps at 3,000: the left-to-right model ahead on span", "pretraining-tasks",
           "table5-3k", steps=3000, budget="steps"),
    Lesson("table5-3k-equal-flops", "Equal compute instead of equal steps, at 3,000 steps", "pretraining-tasks",
           "table5-3k-equal-flops", steps=3000, budget="flops", after="table5-3k"),
    Lesson("span", "Span extraction needs more steps (Figure 5 at 12,000 steps)", "training-steps", "figure5-12k",
           steps=12000),
    Lesson("table5-12k", "The whole Table 5 at 12,000 steps", "pretraining-tasks", "table5-12k", steps=12000,
           budget="steps", after="span"),
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
