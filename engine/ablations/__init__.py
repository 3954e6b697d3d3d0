"""Ablation studies: the paper's Tables 5, 6, 7 and 8 and Figure 5 at classroom scale, and the family's studies
(what changed after BERT: engine/ablations/family.py).

An ablation study is a base configuration plus named variants, each a small override of the base. A study becomes
a list of jobs, each one `python -m engine ...` command: per seed and variant, a `pretrain` run, then the study's
downstream evaluations of it. The jobs go to the job queue, which runs them one at a time and survives restarts,
or run here one after another (`--foreground`). The study's state lives in `<runs_root>/studies/<name>/study.json`,
its runs in `<runs_root>/studies/<name>/runs/`. `collect_results(study_dir)` reads them back into the paper's
layout and checks the paper's qualitative finding.

One module per job, read in this order:
- study.py    what a study is: the dataclasses (FinetuneArgs, FeatureArgs, Evaluation, Variant, Study; pre-training is PretrainConfig)
- findings.py the comparisons a finding check is made of (means per variant, "a better than b")
- paper.py    the built-in studies (`STUDIES`), each with the paper's finding and its check; the scales (`Scale`:
              classroom, lab) with what each sets for single studies (`Scale.settings`)
- family.py   the family's studies (RoBERTa, ALBERT, SpanBERT, ELECTRA, the masking rate), registered in `STUDIES`
              below beside the paper's, with their classroom settings; `GROUPS`: "BERT, 2018" and "after BERT"
- planner.py  study -> jobs (`plan`)
- folders.py  study folders and study.json (`study_from_dict`)
- reuse.py    a pre-training another run has already done (or a fine-tuning another study has), taken over instead of run again (`take_over`)
- runner.py   launching (queue or foreground) and each job's state (`launch`, `run_foreground`, `job_states`)
- control.py  a study as one: its state in words, Cancel and Resume (`study_state`, `cancel_study`, `resume_study`)
- results.py  reading results back: tables, curves, checks (`collect_results`)
- lessons.py  classroom studies with the settings a class runs them with, what each showed and cost (`LESSONS`)
- timing.py   how long a classroom study takes on this machine (`speed_check`, `estimate`)
- run_args.py `ablate run`'s arguments and the study they make (`study_of_run`; a lesson builds its study here too)
- cli.py      `python -m engine ablate run|lesson|show|resume|cancel|list|estimate`
"""
from engine.ablations.cli import main
from engine.ablations.control import cancel_study, find_study, is_active, queued_jobs, resume_study, study_state
from engine.ablations.folders import (STUDY_JSON, list_studies, new_study_dir, read_study, studies_root, study_from_dict,
                                      update_job, write_study)
from engine.ablations.lessons import LESSONS, Lesson, describe_lesson, get_lesson
from engine.ablations.paper import (BBC, CLASSROOM, CLASSROOM_FINETUNE, CLASSROOM_PRETRAIN, CLOZE, FEATURE_ROWS, LAB,
                                    LAB_FINETUNE, LAB_PARALLEL_HINT, LAB_PRETRAIN, NEXT, PARALLEL_HELP, PUNCT,
                                    PUNCT_FEATURES, ROBUST_SPREAD, SCALES, STORY, SHARED_DATA, SMALL_GRID, STUDIES, TABLE5_FINDINGS, TABLE5_TASKS, TABLE6_TASKS,
                                    TABLE8_ROWS, TABLE8_TASKS, WNUT, Scale, StudyAtScale, at_scale, available_evaluations, classroom,
                                    get_study, mask_ratios_for_row, shared_evaluations, table8_label)
from engine.ablations.planner import Job, feature_epochs, plan
from engine.ablations.results import (CURVE_X, StudyResults, best_score, collect_results, combination_score,
                                      final_pretrain_metrics, fmt_cell, paper_table, pretrain_eval_records, summarise)
from engine.ablations.reuse import REUSE_HELP, training_key
from engine.ablations.runner import REPO_ROOT, job_states, launch, run_foreground
from engine.ablations.timing import (REFERENCE_MACHINE, REFERENCE_MINUTES, SpeedCheck, describe_check, estimate,
                                     fastest_check, reusable, speed_check)
from engine.ablations.verdict import VERDICTS, Contrast, bootstrap_difference, describe_entry, judge, verdict
from engine.ablations.study import (Evaluation, FeatureArgs, FinetuneArgs, Study, Variant, describe,
                                    with_epochs, with_steps)
from engine.ablations import family
from engine.ablations.paper import CLASSROOM_STUDIES

family.register(STUDIES, CLASSROOM_STUDIES)  # the family's studies beside the paper's, at every entry point
GROUPS = family.groups(STUDIES)  # {"BERT, 2018": [...], "after BERT": [...]}: the Ablations page's two groups
