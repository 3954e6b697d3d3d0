"""The probe-ready model in one step (studio.probe_ready): the Model page's button queues exactly
`pretrain --recipe continued --corpus everyday --init minilm --out <runs>/minilm-continued --quiet`, its live progress, its card, and the Probe
and Attention pages offering it first. The job queue is replaced by a recorder: no training runs here."""
import os
import socket
from pathlib import Path

import pytest
import torch

import engine
from engine import jobs, runs
from engine.pretraining.config import CONTINUED_PRETRAINING, PROBE_READY_RUN
from studio import probe_ready


@pytest.fixture
def queue(monkeypatch):
    """studio.jobs.submit / get recorded instead of starting a process."""
    submitted = []

    def submit(argv, name=None, run_dir=None, root=None):
        submitted.append({"argv": list(argv), "name": name, "run_dir": run_dir, "root": root})
        return {"id": f"job{len(submitted)}", "status": "queued"}

    monkeypatch.setattr(jobs, "submit", submit)
    monkeypatch.setattr(jobs, "get", lambda job_id, root=None: {"id": job_id, "status": "queued"})
    return submitted


def _fake_probe_ready_run(root: Path, bbc_tokenizer, status="finished", step=600) -> Path:
    """A minilm-continued run folder as the job leaves it: run.json with the init, metrics, one checkpoint (a
    tiny model stands in for MiniLM: the pages read run.json and load whatever checkpoint is there)."""
    d = root / PROBE_READY_RUN
    cfg = dict(CONTINUED_PRETRAINING, init="minilm", out=str(d))
    runs.start_run(d, "pretrain", config=cfg, total_steps=cfg["steps"], objective="mlm+nsp",
                   init={"source": "minilm", "kind": "minilm", "path": "x", "heads_from_init": [], "heads_new": ["mlm", "nsp"]})
    if status != "running":
        runs.set_status(d, status)
    runs.append_metrics(d, {"step": step, "split": "train", "loss": 3.0, "mlm_acc": 0.4})
    runs.append_metrics(d, {"step": step, "split": "eval", "eval_mlm_acc": 0.412, "eval_nsp_acc": 0.83})
    torch.manual_seed(0)
    model = engine.BertForPreTraining(engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, hidden_size=64,
                                                               num_heads=2, max_position_embeddings=128))
    tmp = runs.new_checkpoint_dir(d, step)
    engine.save(model, tmp, tokenizer=bbc_tokenizer, extra_files={"training_state.json": {"step": step}})
    runs.publish_checkpoint(tmp)
    return d


@pytest.mark.slow
def test_the_button_queues_the_one_step_command(tmp_path, queue, page_app):
    at = page_app("1_Model.py", tmp_path)
    assert not at.exception and not at.error
    from engine.pretraining.config import CONTINUED_PRETRAINING
    corpus = CONTINUED_PRETRAINING["corpus"]
    assert f"python -m engine pretrain --recipe continued --corpus {corpus} --init minilm --out" in " ".join(c.value for c in at.caption)
    at.button(key="probe_ready_go").click().run()
    assert not at.exception and not at.error
    d = tmp_path / PROBE_READY_RUN
    assert queue == [{"argv": ["pretrain", "--recipe", "continued", "--corpus", corpus, "--init", "minilm", "--out", str(d), "--quiet"],
                      "name": PROBE_READY_RUN, "run_dir": str(d), "root": str(tmp_path)}]
    assert probe_ready.argv(tmp_path) == queue[0]["argv"]
    from engine.pretraining.run import build_parser, config_from_args
    cfg = config_from_args(vars(build_parser().parse_args(queue[0]["argv"][1:])))
    assert cfg == engine.PretrainConfig.for_init("minilm", out=str(d), quiet=True)  # no other flag: the recipe
    assert any("Queued (job job1)" in i.value for i in at.info)
    assert "probe_ready_go" not in [b.key for b in at.button]  # one job at a time


@pytest.mark.slow
def test_live_progress_while_it_runs(tmp_path, bbc_tokenizer, queue, page_app):
    d = _fake_probe_ready_run(tmp_path, bbc_tokenizer, status="running", step=200)
    info = runs.read_run_json(d)  # start_run recorded this process as the writer, so the run counts as live
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert runs.effective_status(d) == "running"
    at = page_app("1_Model.py", tmp_path)
    assert not at.exception and not at.error
    m = {x.label: x.value for x in at.metric}
    assert m["Step"] == f"200 / {CONTINUED_PRETRAINING['steps']}"
    assert m["Held-out MLM accuracy"] == "0.412" and m["Held-out NSP accuracy"] == "0.830"
    assert at.get("progress")[0].proto.value == round(100 * 200 / CONTINUED_PRETRAINING["steps"])
    assert not queue


@pytest.mark.slow
def test_the_finished_model_has_its_card_and_is_offered_first(tmp_path, bbc_tokenizer, page_app):
    R = CONTINUED_PRETRAINING
    d = _fake_probe_ready_run(tmp_path, bbc_tokenizer, step=R["steps"])
    assert probe_ready.model_path(tmp_path) == str(d)
    at = page_app("1_Model.py", tmp_path, model_page_model=str(d / "checkpoints" / f"step-{R['steps']}"))
    assert not at.exception and not at.error
    assert any("Done" in s.value for s in at.success)
    card = [i.value for i in at.info if "MiniLM's encoder" in i.value]
    assert card and "not Google's BERT" in card[0].replace("Not", "not")
    assert "masked LM + next sentence prediction" in card[0] and "State of the Union" in card[0]
    assert f"{R['steps']} steps of {R['batch_size']} x" in card[0]
    assert f"The first {round(R['heads_first'] * R['steps'])} steps trained only the heads, on the frozen encoder" in card[0]
    probe = page_app("5_Probe.py", tmp_path)
    assert not probe.exception
    assert probe.selectbox(key="probe_model").value == str(d)  # offered first, so picked by default
    assert any("MiniLM's encoder" in c.value for c in probe.caption)
    att = page_app("6_Attention.py", tmp_path)
    assert not att.exception
    assert att.selectbox(key="att_model").value == str(d)


def test_a_scratch_run_has_no_card_and_minilm_stays_first_elsewhere(tmp_path, bbc_tokenizer):
    assert probe_ready.card("minilm") == "" and probe_ready.model_path(tmp_path) is None
    d = _fake_probe_ready_run(tmp_path, bbc_tokenizer)
    info = runs.read_run_json(d)
    runs.write_run_json(d, config=dict(info["config"], init=None))
    assert probe_ready.card(str(d)) == ""
    from studio.common import list_model_choices
    assert list_model_choices(tmp_path)[0] == "minilm"
    # a run of other settings in the probe-ready folder is not offered as the probe-ready model
    assert probe_ready.model_path(tmp_path) is None
    assert list_model_choices(tmp_path, probe_ready_first=True)[0] == "minilm"
    runs.write_run_json(d, config=info["config"])  # the recipe's own run again: offered first
    assert probe_ready.model_path(tmp_path) == str(d)
    assert list_model_choices(tmp_path, probe_ready_first=True)[0] == str(d)


def test_any_run_continued_from_minilm_counts_when_the_buttons_run_is_absent(tmp_path, bbc_tokenizer):
    d = _fake_probe_ready_run(tmp_path, bbc_tokenizer)
    other = d.rename(tmp_path / "probe-ready")  # e.g. the command the Start page shows, another --out
    assert probe_ready.model_path(tmp_path) == str(other)
    info = runs.read_run_json(other)
    runs.write_run_json(other, config=dict(info["config"], init="runs/something-else"))
    assert probe_ready.model_path(tmp_path) is None
