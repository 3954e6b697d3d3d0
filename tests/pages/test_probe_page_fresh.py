"""The Probe page from the first minute: on a fresh runs folder (only MiniLM, real weights but no MLM or NSP head)
it says so once, in one line, offers the probe-ready build and keeps attention working, with no red error; the
picker puts a model that can fill blanks first (the probe-ready model, else the newest finished pre-training run's
latest checkpoint) and says on each line what the model can do; sections that need a head are offered only on a
model that has it (engine.probes.heads, heads_on_disk)."""
import json
from pathlib import Path

import pytest
import torch

import engine
from engine import jobs, probes, runs
from studio import probe_ready
from studio.common import HEAD_SKILLS, choice_label, fill_blanks_model, list_model_choices

PAGE = "5_Probe.py"
NEEDS_A_HEAD = ("probe_text", "probe_top_k", "probe_nsp_a", "probe_nsp_b", "probe_set_go", "probe_compare_go",
                "probe_steps_go")


def _texts(at) -> list:
    """Every line of text the page shows (alerts, captions, markdown)."""
    kinds = ("error", "warning", "info", "success", "caption", "markdown", "exception")
    return [str(e.value) for k in kinds for e in getattr(at, k)]


def _keys(at) -> set:
    return {w.key for kind in ("text_input", "slider", "button", "multiselect") for w in getattr(at, kind)}


def _charts(at):
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _save(path: Path, tok, mlm=True, nsp=True) -> Path:
    """A tiny model saved with the heads asked for (an encoder only when neither)."""
    torch.manual_seed(0)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_heads=2,
                                   max_position_embeddings=64, has_mlm_head=mlm, has_nsp_head=nsp)
    return engine.save(engine.BertForPreTraining(cfg), path, tokenizer=tok)


def _run(root: Path, name: str, tok, status="finished", mlm=True, nsp=True) -> Path:
    """A pre-training run folder with one complete checkpoint."""
    d = root / name
    runs.write_run_json(d, kind="pretrain", status=status, config={"objective": "mlm+nsp", "preset": "tiny"})
    ck = _save(d / "checkpoints" / "step-5", tok, mlm, nsp)
    runs.mark_complete(ck, step=5)
    return ck


# ---------------------------------------------------------------------------------------------- which heads
@pytest.mark.slow  # loads MiniLM
def test_heads_of_a_loaded_model_and_from_the_weight_names_alone(tmp_path, tiny_checkpoint, bbc_tokenizer):
    assert probes.heads(engine.load(tiny_checkpoint)) == ("mlm", "nsp") == probes.heads_on_disk(tiny_checkpoint)
    assert probes.heads(engine.load("minilm")) == () == probes.heads_on_disk("minilm")
    mlm_only = _save(tmp_path / "mlm-only", bbc_tokenizer, nsp=False)
    encoder = _save(tmp_path / "encoder", bbc_tokenizer, mlm=False, nsp=False)
    assert probes.heads_on_disk(mlm_only) == ("mlm",) == probes.heads(engine.load(mlm_only))
    assert probes.heads_on_disk(encoder) == () == probes.heads(engine.load(encoder))
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text("{}")
    assert probes.heads_on_disk(tmp_path / "no-weights") is None  # not known cheaply
    assert probes.heads_on_disk(tmp_path / "absent") is None
    with pytest.raises(engine.EngineError, match="no NSP head"):
        probes.require_head(engine.load(mlm_only), "nsp")


def test_the_picker_puts_a_model_that_fills_blanks_first(tmp_path, bbc_tokenizer):
    root = tmp_path / "runs"
    assert fill_blanks_model(root) is None and list_model_choices(root, fill_first=True) == ["minilm"]
    _run(root, "encoder-only", bbc_tokenizer, mlm=False, nsp=False)  # finished, but cannot fill blanks
    _run(root, "failed-run", bbc_tokenizer, status="failed")  # not finished
    assert fill_blanks_model(root) is None and list_model_choices(root, fill_first=True)[0] == "minilm"
    ck = _run(root, "classroom", bbc_tokenizer)
    assert fill_blanks_model(root) == str(ck)
    assert list_model_choices(root, fill_first=True)[0] == str(ck)
    assert list_model_choices(root)[0] == "minilm"  # other pages keep MiniLM first
    assert HEAD_SKILLS[("mlm", "nsp")] in choice_label(str(ck))
    assert HEAD_SKILLS[()] in choice_label("minilm")
    assert HEAD_SKILLS[()] in choice_label(str(root / "encoder-only" / "checkpoints" / "step-5"))
    assert choice_label(str(tmp_path / "absent")) == str(tmp_path / "absent")  # unknown: the name alone


# ---------------------------------------------------------------------------------------------- the page
@pytest.mark.slow
def test_fresh_runs_folder_one_line_the_build_offered_no_error(tmp_path, monkeypatch, page_app):
    submitted = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None:
                        submitted.append(list(argv)) or {"id": "job1", "status": "queued"})
    monkeypatch.setattr(jobs, "get", lambda job_id, root=None: {"id": job_id, "status": "queued"})
    root = tmp_path / "runs"  # does not even exist yet
    at = page_app(PAGE, root)
    assert not at.exception and not at.error
    assert at.selectbox(key="probe_model").value == "minilm"
    about_heads = [t for t in _texts(at) if "MLM" in t and "head" in t]
    assert len(about_heads) == 1, about_heads
    from studio.probe_ready import build_minutes
    build = build_minutes(root).clause()  # the build's time on this machine, said once (by the build panel)
    assert sum(build in t for t in _texts(at)) == 1
    assert not (_keys(at) & set(NEEDS_A_HEAD)) and not at.metric
    # attention needs no head: mask and watch still shows where the masked token looks, with no prediction bars
    charts = _charts(at)
    assert charts and not any(t["type"] == "bar" for c in charts for t in c["data"])
    at.button(key="probe_ready_go").click().run()
    assert not at.exception and not at.error
    assert submitted == [probe_ready.argv(root)]


@pytest.mark.slow
def test_a_model_with_both_heads_fills_masks_and_scores_pairs(tmp_path, bbc_tokenizer, page_app):
    root = tmp_path / "runs"
    ck = _run(root, "classroom", bbc_tokenizer)
    at = page_app(PAGE, root)  # no choice made: the finished run's checkpoint is the default
    assert at.selectbox(key="probe_model").value == str(ck)
    assert not at.exception and not at.error
    assert not [t for t in _texts(at) if "has no MLM" in t or "has no NSP" in t]
    bundle = engine.load(ck)
    preds = probes.fill_mask(bundle, "the prime [MASK] said the government would cut taxes .", top_k=5)
    line = [m.value for m in at.markdown if m.value.startswith("**[MASK] 1")][0]
    assert f"`{preds[0][0][0]}` {preds[0][0][1]:.3f}" in line
    p = probes.next_sentence(bundle, "the man went to the store .", "he bought a gallon of milk .")
    assert at.metric[0].label == "P(IsNext)" and at.metric[0].value == f"{float(p):.3f}"
    assert at.multiselect(key="probe_compare_models").options == [choice_label(str(ck))]  # MiniLM: nothing to score


@pytest.mark.slow
def test_a_model_without_nsp_offers_fill_mask_and_says_why_not_nsp(tmp_path, bbc_tokenizer, page_app):
    root = tmp_path / "runs"
    ck = _run(root, "no-nsp", bbc_tokenizer, nsp=False)
    at = page_app(PAGE, root)
    assert at.selectbox(key="probe_model").value == str(ck)
    assert not at.exception and not at.error
    assert [m for m in at.markdown if m.value.startswith("**[MASK] 1")] and not at.metric
    assert "probe_nsp_a" not in _keys(at)
    assert len([t for t in _texts(at) if "no NSP head" in t]) == 1
