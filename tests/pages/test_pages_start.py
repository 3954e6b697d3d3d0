"""The Start page and studio.start: the guided first class's steps, times, check marks from the runs folder, the
fields each button fills in, and the paper's Tables 5-8 shown before anything has run."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import measured, paper_tables
from engine.runs import mark_complete, write_run_json
from studio import start

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]
PAGE = "0_Start.py"


def _pretrain(root: Path, name: str, status: str, config=None, step=2000):
    run = root / name
    write_run_json(run, kind="pretrain", status=status, total_steps=2000, config=config or {"objective": "mlm+nsp"})
    ck = run / "checkpoints" / f"step-{step}"
    ck.mkdir(parents=True)
    mark_complete(ck, step=step)
    (run / "metrics.jsonl").write_text(json.dumps({"step": step, "split": "train", "loss": 7.0}) + "\n")
    return run


def test_empty_runs_folder_shows_four_open_steps_times_and_the_paper_tables(tmp_path, page_app):
    at = page_app(PAGE, tmp_path / "runs")
    assert not at.exception and not at.error
    steps = [m.value for m in at.markdown if m.value.startswith("**") and ". " in m.value[:6]]
    assert [s.split("**")[1] for s in steps] == ["1. Look inside a real model", "2. Pre-train a tiny BERT",
                                                "3. Probe it and the probe-ready model",
                                                "4. Run the paper's Table 5 at classroom scale"]
    from engine import classroom
    assert steps[1].endswith(" · " + classroom.part_estimate(tmp_path / "runs", "reference").clause())
    assert "(" not in steps[1].split(" · ", 1)[1]  # one clause, its details behind the help icon
    assert not any("✅" in m.value for m in at.markdown)  # nothing done yet
    from engine.pretraining.config import CONTINUED_PRETRAINING
    cmd = (f"python -m engine pretrain --recipe continued --corpus {CONTINUED_PRETRAINING['corpus']} --init minilm --out "
           f"{tmp_path / 'runs' / 'minilm-continued'}")
    assert start.probe_ready_command(tmp_path / "runs") == cmd
    assert any(cmd in c.value and "Model page's button" in c.value for c in at.caption)  # how to make it
    # the paper's numbers, before anything has run
    t5 = at.dataframe[0].value
    assert list(t5.columns) == ["Tasks", "MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD"]
    assert t5.iloc[0].tolist() == ["BERT-BASE", 84.4, 88.4, 86.7, 92.7, 88.5]
    # Table 5 at classroom scale as measured (the table's values), beside the paper's, before anything has run
    ours = measured.study("pretraining-tasks")
    table, findings = at.table[0].value, at.table[1].value
    assert table.loc["BERT (MLM + NSP)", "BBC cloze span (F1)"] == ours.table["BERT (MLM + NSP)"]["BBC cloze span (F1)"]
    assert list(findings["verdict"]) == [f.verdict for f in ours.findings]
    table8 = [d.value for d in at.dataframe if "MNLI fine-tune" in d.value.columns]
    assert len(table8) == 1 and table8[0].iloc[0]["MNLI fine-tune"] == 84.2
    shown = [list(t.value["verdict"]) for t in at.table if "verdict" in t.value.columns]
    assert shown == [[f.verdict for f in measured.study(k).findings] for k in paper_tables.PAPER_TABLES
                     if measured.study(k) and measured.study(k).findings]


def test_steps_check_off_from_the_runs_folder_and_session(tmp_path, fake_runs, page_app):
    from engine import ablations as A
    root = tmp_path / "runs"
    _pretrain(root, "first-bert", "finished")
    _pretrain(root, "minilm-continued", "finished", config={"objective": "mlm+nsp", "init": "minilm"})
    study = root / "studies" / "pretraining-tasks"
    plan = A.get_study("pretraining-tasks", scale="classroom")
    jobs = A.plan(plan, study)
    A.write_study(study, plan, jobs, mode="foreground")
    fake_runs.pretrain(study / jobs[0].out, 5.0)  # one job of the study finished
    at = page_app(PAGE, root, class_visited_model=True)
    assert not at.exception and not at.error
    marks = [m.value for m in at.markdown if m.value.startswith("### ")]
    assert marks == ["### ✅", "### ✅", "### 3", "### 4"]  # model seen, run finished; not probed; study half done
    assert any(m.value == "_finished: first-bert_" for m in at.markdown)
    assert any(m.value == f"_pretraining-tasks: 1 of {len(jobs)} jobs finished_" for m in at.markdown)
    assert any("The probe-ready model: minilm-continued" in c.value for c in at.caption)
    steps = start.guided_steps(root, {"model": True})
    assert steps[2].prefill == {"probe_model": str(root / "first-bert" / "checkpoints" / "step-2000")}
    assert steps[1].prefill == {"pretrain_name": "first-bert-2"}  # a free name
    assert steps[3].prefill == {"abl_study": "pretraining-tasks", "abl_scale": "classroom", "abl_tab": "New study"}
    assert steps[2].alt == ("Probe the probe-ready model", {"probe_model": str(root / "minilm-continued")})
    assert at.button(key="start_step_3_alt").label == "Probe the probe-ready model"
    assert steps[0].prefill == {"model_page_model": "minilm"}


def test_running_pretraining_shows_progress(tmp_path):
    root = tmp_path / "runs"
    run = _pretrain(root, "first-bert", "running", step=400)
    from engine.runs import RunLock
    with RunLock(run):  # alive: this process writes it
        steps = start.guided_steps(root, {})
    assert not steps[1].done and steps[1].status == "running: first-bert, step 400 / 2000"


def test_paper_tables_have_every_row_of_the_paper():
    assert [len(t.rows) for t in paper_tables.PAPER_TABLES.values()] == [4, 6, 11, 6]
    for t in paper_tables.PAPER_TABLES.values():
        assert all(len(r) == len(t.columns) for r in t.rows)
    assert paper_tables.frame("model-size").iloc[-1].tolist() == [24, 1024, 16, 3.23, 86.6, 87.8, 93.7]


def test_a_finished_table5_study_is_checked_and_shown_beside_the_paper(tmp_path, fake_runs, page_app):
    from engine import ablations as A
    root = tmp_path / "runs"
    study = A.get_study("pretraining-tasks", seeds=1, evaluations=(A.BBC, A.WNUT))
    d = root / "studies" / "pretraining-tasks"
    jobs = A.plan(study, d)
    A.write_study(d, study, jobs, mode="foreground")
    fake_runs.fill_table5(d, jobs)
    at = page_app(PAGE, root)
    assert not at.exception and not at.error
    marks = [m.value for m in at.markdown if m.value.startswith("### ")]
    assert marks[3] == "### ✅"
    assert any(m.value == f"_pretraining-tasks: {len(jobs)} of {len(jobs)} jobs finished_" for m in at.markdown)
    ours = at.dataframe[1].value  # right after the paper's Table 5
    expect = A.collect_results(d).table
    assert list(ours.index) == list(expect.index) and ours.equals(expect)


def _marks(at) -> list:
    return [m.value for m in at.markdown if m.value.startswith("### ")]


def test_probing_without_a_pretrained_model_does_not_check_step_3(tmp_path, page_app):
    at = page_app(PAGE, tmp_path / "runs", class_probed=True)  # MiniLM probed on the Probe page, no run of the class yet
    assert not at.exception and not at.error
    assert _marks(at)[2] == "### 3"
    assert any(m.value == "_pre-train a model first (step 2)_" for m in at.markdown)
    _pretrain(tmp_path / "runs", "first-bert", "finished")
    assert _marks(page_app(PAGE, tmp_path / "runs", class_probed=True))[:3] == ["### 1", "### ✅", "### ✅"]


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_a_stopped_step_2_run_says_what_to_do_and_offers_its_checkpoint_to_step_3(tmp_path, status, page_app):
    root = tmp_path / "runs"
    run = _pretrain(root, "first-bert", status, step=800)
    if status == "failed":
        write_run_json(run, error="could not write checkpoints/step-1000: No space left on device; free disk space")
    at = page_app(PAGE, root, class_probed=True)
    assert not at.exception and not at.error
    assert _marks(at)[1:3] == ["### 2", "### ✅"]  # not done; its checkpoint was there to probe
    steps = start.guided_steps(root, {})
    assert "Resume on the Pre-train page" in steps[1].status and "checkpoint step-800" in steps[1].status
    assert ("No space left on device" in steps[1].status) == (status == "failed")
    assert steps[1].prefill == {"pretrain_pick": "first-bert"}  # the Pre-train page picks it, its Resume button below
    assert at.button(key="start_step_2").label == "Resume it on the Pre-train page"
    assert steps[2].prefill == {"probe_model": str(root / "first-bert" / "checkpoints" / "step-800")}


def test_the_reference_run_is_not_the_class_s_step_2_but_step_3_may_probe_it(tmp_path):
    from engine.classroom import REFERENCE_RUN
    root = tmp_path / "runs"
    _pretrain(root, REFERENCE_RUN, "finished")
    steps = start.guided_steps(root, {"probed": True})
    assert not steps[1].done and steps[1].status == ""
    assert steps[2].done and steps[2].prefill == {"probe_model": str(root / REFERENCE_RUN / "checkpoints" / "step-2000")}
    assert REFERENCE_RUN in steps[2].status


def test_the_prepare_panel_shows_each_part_and_its_button_queues_them(tmp_path, monkeypatch, page_app):
    from engine import classroom
    root = tmp_path / "runs"
    _pretrain(root, classroom.REFERENCE_RUN, "finished")
    calls = []
    monkeypatch.setattr(classroom, "prepare", lambda r: calls.append(str(r)))
    at = page_app(PAGE, root)
    assert not at.exception and not at.error
    lines = next(m.value for m in at.markdown if "reference" in m.value).split("  \n")
    # cache to do, reference done, probe-ready to do, bert-base-uncased skipped (offline)
    assert [ln.split(" ", 1)[0] for ln in lines] == ["▫️", "✅", "▫️", "⏭️"]
    assert lines[2].endswith("; " + classroom.part_estimate(root, "probe_ready").clause(left=True))
    at.button(key="class_prepare").click().run()
    assert not at.exception and calls == [str(root)]


def _open_tab(at) -> str:
    """The label of the tab the browser shows first (the tab container's default_tab_index)."""
    def containers(node):
        proto = getattr(node, "proto", None)
        if type(proto).__name__ == "Block" and proto.WhichOneof("type") == "tab_container":
            yield node
        for child in getattr(node, "children", {}).values():
            yield from containers(child)
    [tabs] = list(containers(at._tree))
    return [t.label for t in at.tabs][tabs.proto.tab_container.default_tab_index]


def test_the_table5_button_lands_on_the_filled_new_study_form(tmp_path):
    at = AppTest.from_file(str(REPO / "streamlit_app.py"), default_timeout=90)
    at.session_state["runs_root"] = str(tmp_path / "runs")
    at.run()
    at.button(key="start_step_4").click().run()
    assert not at.exception and [t.value for t in at.title] == ["Ablation studies"]
    assert _open_tab(at) == "New study"
    assert at.selectbox(key="abl_study").value == "pretraining-tasks" and at.radio(key="abl_scale").value == "classroom"


@pytest.mark.parametrize("precision, device", [("bf16", "cpu"), ("fp32", "cpu"), ("bf16", "cuda")])
def test_the_classroom_runs_time_is_the_estimators_for_each_kind_of_machine(tmp_path, precision, device):
    """Whatever machine runs the suite, each kind of machine's wording with no reading of it yet: the measured
    minutes of its precision, not said to be this machine's; 'under' that on a GPU."""
    fact = measured.fact(f"classroom_run.minutes_{precision}")
    s2 = start.guided_steps(tmp_path / "runs", {}, precision, device)[1]
    if device == "cpu":
        assert s2.time == f"about {fact.value:.0f} min" and fact.where in s2.time_help
    else:
        assert s2.time == f"under {measured.fact('classroom_run.minutes_bf16').value:.0f} min here"


def test_step_2_and_the_prepare_panel_give_one_figure_for_the_same_run(tmp_path, monkeypatch, page_app):
    """With a speed check recorded (the classroom step read 1.5x its reading where the figure was measured), step 2's
    caption and the Prepare panel's reference part both say the estimator's one figure, each in one clause."""
    from engine import classroom
    root = tmp_path / "runs"
    fig = measured.fact("classroom_run.minutes_bf16")
    ref_ms = measured.MACHINES[fig.machine].check_ms
    state = root / classroom.STATE_DIR
    state.mkdir(parents=True)
    check = {"precision": "bf16", "threads": 2, "step_ms": 1.5 * ref_ms, "gpu": False}
    (state / "prepare.json").write_text(json.dumps({"checks": {"classroom": check}}))
    monkeypatch.setattr(classroom, "machine", lambda: ("bf16", "cpu"))  # (a GPU would make it an upper bound)
    at = page_app(PAGE, root)
    assert not at.exception and not at.error
    want = f"about {1.5 * fig.value:.0f} min"
    step2 = next(m for m in at.markdown if m.value.startswith("**2. "))
    assert step2.value.endswith(f" · {want} here") and fig.where in step2.help
    panel = next(m.value for m in at.markdown if "reference" in m.value).split("  \n")
    assert panel[1].endswith(f"; {want} left here")


def test_the_measured_tables_row_labels_read_as_text_not_markdown_lists(tmp_path, page_app):
    """st.table renders its labels as markdown, where "+ BiLSTM" is a list item (it showed as "• BiLSTM"): every
    row label of the measured tables renders as the plain label."""
    from markdown_it import MarkdownIt  # the CommonMark parser streamlit's own dependencies bring
    at = page_app(PAGE, tmp_path / "runs")
    assert not at.exception
    labels = [str(r) for t in at.table for r in t.value.index]
    assert any(l.endswith("+ BiLSTM") for l in labels)
    md = MarkdownIt()
    for label in labels:
        html = md.render(label)
        assert html.startswith("<p>") and "<li>" not in html, (label, html)
        assert html[3:-5].replace("&amp;", "&") == label.replace("\\+", "+"), (label, html)


def test_step_3_says_what_the_models_measurably_do_and_names_bert_base_once_cached(tmp_path, offline_hub_cache):
    from engine import hub
    from tests.helpers import tiny_bert_in_hub_cache
    does = start.probe_ready_does()
    for key in ("probe_ready.mlm_accuracy", "probe_ready.nsp_accuracy"):
        assert measured.fact(key).text() in does
    top1, top5 = (round(measured.fact(f"probe_ready.everyday_{k}").value * 16) for k in ("top1", "top5"))
    assert f"of the probe set's 16 everyday blanks it fills {top1} first try and has {top5} in its top five" in does
    s3 = start.guided_steps(tmp_path / "runs", {})[2]
    assert "English" not in s3.what and hub.BERT_BASE not in s3.what
    tiny_bert_in_hub_cache(offline_hub_cache, hub.BERT_BASE, tmp_path)
    assert f"Google's {hub.BERT_BASE}" in start.guided_steps(tmp_path / "runs", {})[2].what


def test_the_second_class_plan_sets_up_the_nsp_vs_sop_study(tmp_path, page_app):
    """The Start page names the second class (after BERT) with the study's own finding, and its button opens the
    Ablations page's New study tab on the NSP-vs-SOP study at classroom scale."""
    from engine import ablations as A
    from studio import start
    at = page_app("0_Start.py", tmp_path / "runs")
    assert not at.exception
    title, plan = start.second_class_text()
    assert A.family.FAMILY_GROUP in title and "52.0%" in plan and "78.9%" in plan
    assert any(e.label == title for e in at.expander)
    at.button(key="start_second_class").click().run()
    assert at.session_state["abl_study"] == start.SECOND_CLASS == A.get_study(start.SECOND_CLASS).name
    assert at.session_state["abl_scale"] == "classroom" and at.session_state["abl_tab"] == "New study"
