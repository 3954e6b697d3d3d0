"""Lessons (engine/ablations/lessons.py): each is one `ablate run` command, `ablate lesson KEY` runs exactly the
study the lesson builds, a lesson that builds on another can take over its runs, and a bad key is one line."""
import json

import pytest

from engine import ablations as A
from engine.ablations import reuse
from engine.ablations.planner import pretrain_config
from engine.errors import EngineError


def job_lines(out: str) -> list:
    return [l for l in out.splitlines() if l.startswith("python -m engine")]


@pytest.mark.parametrize("lesson", A.LESSONS, ids=lambda l: l.key)
def test_a_lesson_runs_the_study_it_describes(lesson, tmp_path, capsys):
    """`ablate lesson KEY --dry-run` plans the same jobs as `ablate run` with the lesson's command line, and those are
    the jobs of `lesson.build()` in the lesson's study folder."""
    assert A.main(["lesson", lesson.key, "--dry-run", "--runs-root", str(tmp_path)]) == 0
    via_lesson = job_lines(capsys.readouterr().out)
    assert A.main(lesson.argv() + ["--dry-run", "--runs-root", str(tmp_path)]) == 0
    via_run = job_lines(capsys.readouterr().out)
    planned = [" ".join(["python -m engine"] + j.argv)
               for j in A.plan(lesson.build(), tmp_path / "studies" / lesson.name)]
    assert via_lesson == via_run == planned and planned
    study = lesson.build()
    default = A.get_study(lesson.study, scale="classroom")
    assert study.scale == "classroom" and study.budget == (lesson.budget or default.budget)
    assert study.base.steps == (lesson.steps or default.base.steps)


def test_the_table5_lesson_is_the_classroom_default_and_the_3000_step_one_is_equal_steps():
    """`table5` is `ablate run pretraining-tasks --classroom` as it stands (6,000 steps at equal FLOPs: LTR gets
    fewer steps); `table5-3k` keeps the recipe's 3,000 steps at equal steps, the paper's protocol."""
    assert A.get_lesson("table5").build() == A.get_study("pretraining-tasks", scale="classroom")
    study = A.get_study("pretraining-tasks", scale="classroom")
    assert (study.base.steps, study.budget) == (6000, "flops")
    steps = {v.name: pretrain_config(study, v).steps for v in study.variants if not v.reuse}
    assert steps["BERT (MLM + NSP)"] == 6000 and steps["LTR & No NSP"] < 3000 < steps["No NSP"]
    old = A.get_lesson("table5-3k").build()
    assert (old.base.steps, old.budget) == (3000, "steps")
    assert A.get_lesson("table5-12k").build().budget == "steps"  # takes over Figure 5's equal-step runs


def test_the_span_lesson_is_figure5_at_12000_steps():
    study = A.get_lesson("span").build()
    assert study.name == "training-steps" and study.base.steps == 12000
    assert study.checkpoint_steps == (3000, 6000, 12000)


def test_a_lesson_built_on_another_takes_over_its_pretrainings(tmp_path):
    """Every pre-training of the 'after' lesson has the training key of one of this lesson's (equal steps; Figure 5's
    two models are Table 5's BERT and LTR rows) or, at equal FLOPs, only BERT's does (the others get other steps), so
    run in one runs folder they are taken over."""
    keys = {l.key for l in A.LESSONS}
    for lesson in A.LESSONS:
        if not lesson.after:
            continue
        assert lesson.after in keys
        first, mine = (
            {json.dumps(reuse.training_key(reuse.config_of(j.argv)), sort_keys=True)
             for j in A.plan(study, tmp_path / n) if j.kind == "pretrain"}
            for n, study in (("a", A.get_lesson(lesson.after).build()), ("b", lesson.build())))
        shared = first & mine
        assert shared, lesson.key
        same_budget = A.get_lesson(lesson.after).build().budget == lesson.build().budget
        assert len(shared) == (len(first) if same_budget else 1), lesson.key


def test_lesson_list_and_bad_key(capsys):
    assert A.main(["lesson"]) == 0
    out = capsys.readouterr().out
    for lesson in A.LESSONS:
        assert lesson.command() in out and lesson.cost in out
    with pytest.raises(EngineError, match="unknown lesson 'nope'; choose one of table5, "):
        A.main(["lesson", "nope"])
