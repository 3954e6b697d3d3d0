"""A study's settings at a scale are declared once, in the Scale (engine/ablations/paper.py `Scale.studies`, read
through `Scale.settings` by `at_scale`): a Study carries no per-scale fields of its own."""
from dataclasses import fields, replace

import engine.ablations as A
from engine.ablations.paper import StudyAtScale


def test_study_has_no_per_scale_fields():
    assert not [f.name for f in fields(A.Study) if f.name.startswith("classroom")]


def test_every_scale_override_names_a_built_in_study():
    for scale in A.SCALES.values():
        assert set(scale.studies) <= set(A.STUDIES), scale.name
    assert A.CLASSROOM.settings("model-size") == StudyAtScale()  # a study the table leaves alone: the scale's own


def test_at_scale_reads_the_scale_table_and_only_it():
    """Changing the table entry changes the study at that scale (steps, budget, epochs, training examples), and an
    entry on another scale (the lab's, here) is what that scale then does: one place per setting."""
    own = StudyAtScale(steps=1234, budget="flops", epochs=9, max_train=321)
    scale = replace(A.CLASSROOM, studies={"model-size": own})
    s = A.at_scale(A.STUDIES["model-size"](), scale)
    assert (s.base.steps, s.budget, s.finetune.epochs, s.finetune.max_train, s.feature_epochs) == (1234, "flops", (9,), 321, 9)
    # the built-in Table 5 loses its classroom settings when the table no longer names it
    bare = A.at_scale(A.STUDIES["pretraining-tasks"](), replace(A.CLASSROOM, studies={}))
    assert (bare.base.steps, bare.budget) == (A.CLASSROOM.pretrain["steps"], "steps")
    lab = A.at_scale(A.STUDIES["model-size"](), replace(A.LAB, studies={"model-size": own}))
    assert (lab.base.steps, lab.finetune.max_train) == (1234, 321)


def test_the_built_in_classroom_settings_reach_the_studies():
    """The classroom scale's decisions, as values (engine/ablations/paper.py says why each): Table 5 pre-trains
    6,000 steps at BERT's FLOPs, Table 7 fine-tunes 15 epochs in both arms, Table 8 at most 1,000 training examples;
    every other study of the paper takes the scale's 3,000 steps, equal steps, 5 epochs and 1,500 examples. The family's
    studies take Table 5's budget, so their BERT and MLM-only rows are Table 5's (the masking rate at equal steps)."""
    got = {name: (s.base.steps, s.budget, s.finetune.epochs, s.finetune.max_train, s.feature_epochs)
           for name in A.STUDIES for s in [A.get_study(name, scale="classroom")]}
    family = {name: (6000, "steps" if name == "masking-rate" else "flops", (5,), 1500, None) for name in A.GROUPS["after BERT"]}
    assert got == {"pretraining-tasks": (6000, "flops", (5,), 1500, None),
                   "model-size": (3000, "steps", (5,), 1500, None),
                   "feature-based": (3000, "steps", (15,), 1500, 15),
                   "masking": (3000, "steps", (5,), 1000, None),
                   "training-steps": (3000, "steps", (5,), 1500, None)} | family
