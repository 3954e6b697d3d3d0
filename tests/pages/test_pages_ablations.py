"""The Ablations page (AppTest): the dashboard of a finished fake study shows the paper's table with mean ± std,
the finding with its checks, the charts and a CSV download; the New-study tab shows the study and queues it."""
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine import ablations as A
from engine import measured

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]

PAGE = str(REPO / "pages" / "7_Ablations.py")


@pytest.fixture
def study_root(tmp_path, monkeypatch, fake_runs):
    root = tmp_path / "runs"
    monkeypatch.setenv("BERT_STUDIO_RUNS", str(root))
    study = A.get_study("pretraining-tasks", seeds=2, evaluations=(A.BBC, A.WNUT))
    d = root / "studies" / "t5"
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    fake_runs.fill_table5(d, jobs)
    return root


def frame_with(at, column):
    return next(d.value for d in at.dataframe if column in getattr(d.value, "columns", []))


def app(root) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    return at


def test_dashboard_shows_table_findings_and_charts(study_root):
    at = app(study_root).run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table.index) == ["BERT (MLM + NSP)", "No NSP", "LTR & No NSP", "+ BiLSTM"]
    assert table.loc["BERT (MLM + NSP)", A.BBC.name] == "90.5 ± 0.7 (n=2)"
    assert table.loc["LTR & No NSP", A.WNUT.name] == "10.5 ± 0.7 (n=2)"
    md = " ".join(m.value for m in at.markdown)
    assert any("Removing NSP hurts" in i.value for i in at.info)
    # "reproduced?" is the bootstrap verdict of the finding this study's columns allow (the topic control), with the
    # paper's numbers; the direction of the means comes after it, labelled as no verdict
    assert "**Reproduced here?**" in md and "control: on topic classification" in md and "paper (SST-2 acc): 92.7 vs 92.1" in md
    assert "↗ holds — " in md and "MLM beats left-to-right" in md and "does not hold" not in md
    assert md.index("**Reproduced here?**") < md.index("↗ holds")
    assert any(e.label.startswith("Direction of the means (no uncertainty") for e in at.expander)
    # bar chart + pre-training curve chart
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    bars = json.loads(charts[0].proto.spec)
    assert [t["name"] for t in bars["data"]] == ["BERT (MLM + NSP)", "No NSP", "LTR & No NSP", "+ BiLSTM"]
    assert bars["data"][0]["y"] == pytest.approx([90.5, 30.5])  # the tasks only: held-out accuracy at [MASK] is no dev score
    curve = json.loads(charts[1].proto.spec)
    assert {t["name"].rsplit(" (seed", 1)[0] for t in curve["data"]} == {"BERT (MLM + NSP)", "No NSP", "LTR & No NSP"}
    assert "16 of 16" not in at.get("progress")[0].proto.text and "27 of 27" not in at.get("progress")[0].proto.text
    assert at.get("progress")[0].proto.text == "22 of 22 done"
    # the CSV download is there
    assert at.get("download_button")


def test_dashboard_curve_selector_switches_metric(study_root):
    at = app(study_root).run()
    box = at.selectbox(key="abl_curve")
    held = next(o for o in box.options if o.startswith("mlm_loss (held-out"))
    box.set_value(held).run()
    assert not at.exception
    spec = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert "held-out mlm_loss" in spec["layout"]["title"]["text"]
    assert sorted(y for t in spec["data"] for y in t["y"]) == [4.0, 4.0, 5.0, 5.0]
    assert spec["layout"]["xaxis"]["title"]["text"] == "steps"
    # against training time: the held-out points sit at their step's training time (LTR's steps cost 2.5x here)
    at.radio(key="abl_curve_x").set_value("elapsed").run()
    spec = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert spec["layout"]["xaxis"]["title"]["text"] == "training time (s)"
    assert {t["name"]: t["x"] for t in spec["data"]}["No NSP (seed 0)"] == [20.0]
    at.selectbox(key="abl_curve").set_value(next(o for o in box.options if o.startswith("loss (train"))).run()
    xs = {t["name"]: t["x"] for t in json.loads(at.get("plotly_chart")[1].proto.spec)["data"]}
    assert xs["LTR & No NSP (seed 0)"] == [25.0, 50.0] and xs["No NSP (seed 0)"] == [10.0, 20.0]


def test_new_study_tab_shows_study_and_launches(study_root, monkeypatch):
    import engine.jobs as Q
    submitted = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: submitted.append(argv) or {"id": f"j{len(submitted)}"})
    at = app(study_root).run()
    assert not at.exception
    assert at.selectbox(key="abl_study").value == "pretraining-tasks"
    variants = frame_with(at, "override of the base")
    assert list(variants["variant"]) == ["BERT (MLM + NSP)", "No NSP", "LTR & No NSP", "+ BiLSTM"]
    assert any("19 jobs" in m.value for m in at.markdown)  # 3 pre-training runs, 4 rows x 4 tasks
    # the time caption gives this study's measured minutes, machine and date from the table (engine/measured.py)
    for key in ("pretraining-tasks", "masking"):
        at.selectbox(key="abl_study").set_value(key).run()
        m = measured.study(key).minutes
        machine = measured.MACHINES[m.machine].name
        assert any(f"{m.value:g} min" in c.value and machine in c.value and m.date in c.value for c in at.caption)
    variants = frame_with(at, "override of the base")
    assert len(variants) == 6 and "mask_ratios = (0.8, 0.2, 0.0)" in variants["override of the base"][2]
    at.selectbox(key="abl_study").set_value("pretraining-tasks").run()
    # the scale is one choice: lab scale shows its base (mini preset) and two seeds' jobs
    assert at.radio(key="abl_scale").value == "classroom"
    at.radio(key="abl_scale").set_value("lab").run()
    assert not at.exception
    base = frame_with(at, "setting").set_index("setting")["value"]
    assert base["preset"] == "mini" and base["steps"] == "5000" and base["fine-tune max train"] == "all"
    assert any("38 jobs" in m.value for m in at.markdown)  # 2 seeds x (3 pre-training runs + 16 fine-tunes)
    # and how to run it several jobs at once on a GPU, with the command for this study
    assert any("ablate run pretraining-tasks --lab --foreground --parallel 6" in c.value for c in at.caption)
    at.number_input(key="abl_parallel_lab").set_value(6).run()
    assert any("38 jobs" in m.value and "run 6 at a time" in m.value for m in at.markdown)
    at.radio(key="abl_scale").set_value("classroom").run()
    budget = "abl_budget_pretraining-tasks_classroom"
    assert at.selectbox(key=budget).value == "flops"  # the classroom Table 5 compares at equal FLOPs by default
    assert any(" --steps 2840 " in l and "--objective ltr" in l for l in at.code[-1].value.splitlines())
    at.selectbox(key=budget).set_value("time").run()  # equal training time: every pre-training run stops at M minutes
    at.number_input(key="abl_budget_minutes").set_value(7.5).run()
    assert not at.exception and "--max-minutes 7.5" in at.code[-1].value
    at.selectbox(key=budget).set_value("steps").run()
    at.button(key="abl_launch").click().run()
    assert not at.exception, at.exception
    assert len(submitted) == 19 and submitted[0][:2] == ["ablate", "job"]  # a pre-training checks reuse when it starts
    assert any("Queued 19 jobs" in s.value for s in at.success)
    assert (study_root / "studies" / "pretraining-tasks" / "study.json").is_file()
    # at lab scale with 6 jobs at once: one queued job resumes the whole study 6 at a time
    at.radio(key="abl_scale").set_value("lab").run()
    at.number_input(key="abl_parallel_lab").set_value(6).run()
    at.button(key="abl_launch").click().run()
    assert not at.exception, at.exception
    assert len(submitted) == 20 and submitted[-1][:2] == ["ablate", "resume"] and submitted[-1][-2:] == ["--parallel", "6"]
    assert any("one job that runs its 38 jobs 6 at a time" in s.value for s in at.success)


def test_new_study_downstream_epochs_and_name_follow_the_study(study_root):
    """'Downstream epochs' puts the same --epochs on every fine-tuning and features job; the study name follows
    the chosen study (a keyed text box once kept the first study's name)."""
    at = app(study_root).run()
    at.selectbox(key="abl_study").set_value("masking").run()
    assert [t.value for t in at.text_input if t.label == "Study name"] == ["masking"]
    box = at.number_input(key="abl_epochs_masking_classroom")
    assert box.value == 5
    box.set_value(7).run()
    assert not at.exception, at.exception
    lines = at.code[-1].value.splitlines()
    evals = [l for l in lines if " finetune " in l or " features " in l]
    assert len(evals) == 12 and all(" --epochs 7 " in l for l in evals)
    base = frame_with(at, "setting").set_index("setting")["value"]
    assert base["feature classifier epochs"] == "7" and base["fine-tune epochs"] == "7"  # what will run, not the default


def test_new_study_time_estimate(study_root, monkeypatch):
    """The classroom scale offers a speed check; its estimate scales the study's reference time, and warns when
    that is over the hour (here: a machine 3x slower than the reference, in fp32)."""
    slow = A.SpeedCheck("fp32", 2, 3 * A.timing.REFERENCE_STEP_MS)
    monkeypatch.setattr(A, "fastest_check", lambda: slow)
    at = app(study_root).run()
    at.selectbox(key="abl_study").set_value("training-steps").run()
    assert not [w for w in at.warning if "**Time:**" in w.value]
    at.button(key="abl_speed").click().run()
    assert not at.exception, at.exception
    ref = A.REFERENCE_MINUTES["training-steps"][0]
    warn = next(w.value for w in at.warning if "**Time:**" in w.value)
    assert f"about {ref * 3:.0f} min on this machine" in warn and "over the classroom hour" in warn and "fp32" in warn
    at.number_input(key="abl_epochs_training-steps_classroom").set_value(8).run()  # kept for the session, re-estimated
    warn = next(w.value for w in at.warning if "**Time:**" in w.value)
    assert "your settings differ" in warn


def test_the_estimate_takes_off_what_jobs_queued_ahead_will_train(study_root, monkeypatch):
    """A pre-training of Figure 5's queued ahead of it in the job queue (here a plain `pretrain` job with the same
    settings, saving the checkpoints Figure 5 reads) is taken off the page's estimate, and the page says which job."""
    from dataclasses import replace

    from engine import cli
    from engine.ablations import reuse
    from engine.pretraining.config import PretrainConfig
    slow = A.SpeedCheck("fp32", 2, 3 * A.timing.REFERENCE_STEP_MS)
    monkeypatch.setattr(A, "fastest_check", lambda: slow)
    fig5 = A.get_study("training-steps", scale="classroom")
    mlm = next(j for j in A.plan(fig5, study_root / "x") if j.kind == "pretrain" and j.variant == "MLM (BERT)")
    argv = cli.argv(replace(PretrainConfig.classroom(**reuse.config_of(mlm.argv)), out=str(study_root / "bert")))
    (study_root / ".jobs").mkdir(parents=True, exist_ok=True)
    (study_root / ".jobs" / "queue.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": "j1", "name": "class bert", "argv": argv, "status": "queued"}]}))
    at = app(study_root).run()
    at.selectbox(key="abl_study").set_value("training-steps").run()
    at.button(key="abl_speed").click().run()
    assert not at.exception, at.exception
    warn = next(w.value for w in at.warning if "**Time:**" in w.value)
    assert "1 to be done by jobs queued ahead of it with the same settings (class bert)" in warn
    ref = A.REFERENCE_MINUTES["training-steps"][0] * 3
    assert f"about {ref:.0f} min on this machine" in warn and "min it would train here" in warn


def test_no_studies_says_so(tmp_path):
    at = app(tmp_path / "empty").run()
    assert not at.exception
    assert any("No studies yet" in i.value for i in at.info)


def test_figure5_study_draws_score_against_steps(tmp_path, fake_runs):
    root = tmp_path / "runs"
    study = A.get_study("training-steps", scale="classroom")
    d = root / "studies" / "fig5"
    d.mkdir(parents=True)
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    for j in jobs:
        if j.kind == "pretrain":
            fake_runs.pretrain(d / j.out, 5.0, "ltr" if j.variant == "LTR" else "mlm+nsp")
        else:
            fake_runs.eval(d / j.out, "f1", (0.6 if j.variant == "LTR" else 0.7) + j.step / 10000, "span")
    at = app(root).run()
    assert not at.exception, at.exception
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["xaxis"]["title"]["text"] == "pre-training steps"
    mlm = next(t for t in spec["data"] if t["name"] == "MLM (BERT)")
    assert mlm["x"] == list(study.checkpoint_steps)
    assert mlm["y"] == pytest.approx([100 * (0.7 + k / 10000) for k in study.checkpoint_steps])
    assert list(at.dataframe[0].value.columns) == [f"{A.CLOZE.name} @ {k}" for k in study.checkpoint_steps]


def test_dashboard_shows_the_papers_numbers_beside_ours(study_root):
    from engine import paper_tables
    at = app(study_root).run()
    assert not at.exception
    paper = frame_with(at, "MNLI-m")
    assert paper.equals(paper_tables.frame("pretraining-tasks"))
    assert paper.iloc[2].tolist() == ["LTR & No NSP", 82.1, 84.3, 77.5, 92.1, 77.8]
    # the New study tab shows the paper's numbers of the study about to be launched
    at.selectbox(key="abl_study").set_value("masking").run()
    assert frame_with(at, "NER feature-based").equals(paper_tables.frame("masking"))


def test_new_study_reuses_a_finished_pretraining_unless_told_not_to(study_root, monkeypatch):
    """With a finished run of Table 5's BERT under the runs folder, launching the classroom Table 5 takes it over
    (18 jobs queued, the success line says so, the study's jobs table names the source); with the box unticked all
    19 are queued."""
    import engine.jobs as Q
    from engine.ablations import reuse
    from engine.ablations.planner import plan
    submitted = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: submitted.append(argv) or {"id": f"j{len(submitted)}"})
    monkeypatch.setattr(reuse, "_fingerprint", lambda key: "f" * 64)
    bert = next(j for j in plan(A.get_study("pretraining-tasks", scale="classroom"), study_root / "x") if j.kind == "pretrain")
    src = study_root / "classroom-bert"
    (src / "tokenizer").mkdir(parents=True)
    (src / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished", "config": reuse.config_of(bert.argv),
                                              "total_steps": 3000, "corpus_fingerprint": "f" * 64,
                                              "training_version": reuse.TRAINING_VERSION}))
    at = app(study_root).run()
    assert at.checkbox(key="abl_reuse").value is True
    at.button(key="abl_launch").click().run()
    assert not at.exception, at.exception
    assert len(submitted) == 18 and bert.argv not in submitted
    assert any("Queued 18 jobs" in s.value and "1 job(s) reused" in s.value for s in at.success)
    at.checkbox(key="abl_reuse").uncheck().run()
    at.button(key="abl_launch").click().run()
    assert len(submitted) == 18 + 19
    at.selectbox(key="abl_pick").set_value("pretraining-tasks").run()
    assert not at.exception, at.exception
    jobs = frame_with(at, "reused_from")
    assert list(jobs["reused_from"].dropna()) == [str(src)]


def test_a_lesson_fills_the_new_study_form_and_launches(study_root, monkeypatch):
    """'Start from a lesson': the span lesson sets Figure 5 at classroom scale with 12,000 steps and its folder name;
    Launch queues exactly the lesson's study; the equal-FLOPs lesson sets the budget. No widget warns that it got a
    value twice (its default and the lesson's)."""
    import engine.jobs as Q
    submitted = []
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw: submitted.append(argv) or {"id": f"j{len(submitted)}"})
    at = app(study_root).run()
    assert not at.exception, at.exception
    span = A.get_lesson("span")
    at.selectbox(key="abl_lesson").set_value("span").run()
    assert any(span.command() in c.value for c in at.code)
    assert any("65.9 min" in m.value and "What it showed" in m.value for m in at.markdown)
    at.button(key="abl_lesson_setup").click().run()
    assert not at.exception, at.exception
    assert at.selectbox(key="abl_study").value == "training-steps" and at.radio(key="abl_scale").value == "classroom"
    assert at.number_input(key="abl_steps_training-steps_classroom").value == 12000
    assert [t.value for t in at.text_input if t.label == "Study name"] == ["figure5-12k"]
    assert any("holds this lesson's study" in s.value for s in at.success)
    assert not [w for w in at.warning if "Session State API" in w.value]
    planned = A.plan(span.build(), study_root / "studies" / "figure5-12k")
    assert any(" --steps 12000 " in l for l in at.code[-1].value.splitlines())
    at.button(key="abl_launch").click().run()
    assert not at.exception, at.exception
    assert len(submitted) == len(planned)
    saved = A.read_study(study_root / "studies" / "figure5-12k")
    assert saved["study"]["base"]["steps"] == 12000 and [j["key"] for j in saved["jobs"]] == [j.key for j in planned]
    # a lesson on another study: the study, its name, steps and budget follow (the 3,000-step lesson sets equal steps
    # against Table 5's classroom default of equal FLOPs)
    at.selectbox(key="abl_lesson").set_value("table5-3k").run()
    at.button(key="abl_lesson_setup").click().run()
    assert not at.exception, at.exception
    assert at.selectbox(key="abl_study").value == "pretraining-tasks"
    assert at.selectbox(key="abl_budget_pretraining-tasks_classroom").value == "steps"
    assert at.number_input(key="abl_steps_pretraining-tasks_classroom").value == 3000
    assert [t.value for t in at.text_input if t.label == "Study name"] == ["table5-3k"]
    at.selectbox(key="abl_lesson").set_value("table5-3k-equal-flops").run()
    at.button(key="abl_lesson_setup").click().run()
    assert at.selectbox(key="abl_budget_pretraining-tasks_classroom").value == "flops"
    assert any("Run it after" in m.value for m in at.markdown)


def test_a_study_says_its_state_in_words_with_cancel_and_resume_beside_the_measured_table(tmp_path, monkeypatch):
    """A study queued one job at a time, read through a stand-in queue: cancelled, it says "cancelled", offers Resume
    (not Cancel) and the measured Table 5 stays beside its empty table, labelled with machine and date; Resume queues
    its 19 jobs again, each fine-tune waiting for its pre-training; running, it says which job and how far, and Cancel
    cancels every job, the queued ones first; failed, it names the job that failed."""
    import engine.jobs as Q
    root = tmp_path / "runs"
    d = root / "studies" / "t5"
    d.mkdir(parents=True)
    jobs = A.plan(A.get_study("pretraining-tasks", scale="classroom"), d)
    A.write_study(d, A.get_study("pretraining-tasks", scale="classroom"), jobs, mode="queue", runs_root=str(root))
    queue = [{"id": f"q{i}", "name": f"t5: {j.key}", "status": "cancelled", "run_dir": str(d / j.out),
              "error": "cancelled by the user"} for i, j in enumerate(jobs)]
    submitted, cancelled = [], []
    monkeypatch.setattr(Q, "list_jobs", lambda root=None: list(reversed(queue)))
    monkeypatch.setattr(Q, "submit", lambda argv, name=None, run_dir=None, root=None, **kw:
                        submitted.append((argv, kw["depends_on"])) or {"id": f"n{len(submitted)}"})

    def cancel(job_id, root=None, timeout=None):
        rec = next(r for r in queue if r["id"] == job_id)
        cancelled.append((job_id, rec["status"]))
        rec.update(status="cancelled")
        return dict(rec)
    monkeypatch.setattr(Q, "cancel", cancel)
    at = app(root).run()
    assert not at.exception, at.exception
    assert at.get("progress")[0].proto.text == "cancelled (0 of 19 done)"
    assert at.button(key="abl_cancel").disabled and not at.button(key="abl_resume").disabled
    ours = measured.study("pretraining-tasks")
    t5 = pd.DataFrame(ours.table).T  # the measured table, not dashes (its row labels escaped for st.table's markdown)
    assert any(list(t.value.columns) == list(t5.columns) and (t.value.values == t5.values).all() for t in at.table)
    assert any(f"as we measured it** ({ours.minutes.where})" in m.value for m in at.markdown)
    assert (at.dataframe[0].value == "–").all().all()  # the study's own table: nothing finished yet
    at.button(key="abl_resume").click().run()
    assert not at.exception, at.exception
    assert [a[3] for a, _ in submitted] == [j.key for j in jobs] and all(a[:2] == ["ablate", "job"] for a, _ in submitted)
    first_pre = [f"n{i + 1}" for i, j in enumerate(jobs) if j.kind == "pretrain"][0]
    assert submitted[0][1] == [] and submitted[1][1] == [first_pre]  # a fine-tune waits for its pre-training
    assert any("queued 19 unfinished job(s) of study t5" in s.value for s in at.success)

    for i, rec in enumerate(queue):  # the study runs again: its first pre-training running, the rest queued
        rec.update(status="running" if i == 0 else "queued", error=None)
    at.run()
    assert at.get("progress")[0].proto.text == f"running {jobs[0].key} (0 of 19 done)"
    assert not at.button(key="abl_cancel").disabled and at.button(key="abl_resume").disabled
    at.button(key="abl_cancel").click().run()
    assert not at.exception, at.exception
    assert len(cancelled) == 19 and cancelled[-1] == ("q0", "running")  # the queued ones first
    assert at.get("progress")[0].proto.text == "cancelled (0 of 19 done)"
    assert any("cancelled 19 job(s) of study t5" in s.value for s in at.success)

    queue[0].update(status="failed", error="error: out of memory")
    for rec in queue[1:]:
        rec.update(status="failed", error="not run: t5: pretrain failed; resume the study with ...")
    at.run()
    assert at.get("progress")[0].proto.text == f"failed at {jobs[0].key} (0 of 19 done)"
