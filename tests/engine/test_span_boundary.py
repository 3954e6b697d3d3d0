"""engine/span_boundary.py: SpanBERT's span boundary objective. Each masked token's SBO input is the encoder's output at
its span's two boundary tokens and its position in the span, nothing inside the span; a short run with it trains and
its checkpoint resumes the head."""
from dataclasses import replace

import pytest
import torch

from engine import runs
from engine.config import BertConfig
from engine.errors import EngineError
from engine.pretraining.config import PretrainConfig, validate
from engine.span_boundary import (HEAD_FILE, MAX_SPAN_PIECES, SpanBoundaryHead, SpanBoundaryPreTraining,
                                  add_boundary_slots, boundary_inputs, span_boundaries)
from engine.pretraining.step_inputs import add_prediction_slots
from engine.vocab_loss import IGNORE_INDEX

X = IGNORE_INDEX


def test_each_masked_position_knows_its_span_s_boundaries_and_offset():
    labels = torch.tensor([[X, X, 5, 6, 7, X, X, 9, X, X],
                           [X, 3, X, 4, 4, X, X, X, X, X]])  # row 0: spans 2-4 and 7; row 1: 1 and 3-4
    left, right, offset = span_boundaries(labels)
    assert left[0].tolist() == [0, 0, 1, 1, 1, 0, 0, 6, 0, 0] and right[0].tolist() == [0, 0, 5, 5, 5, 0, 0, 8, 0, 0]
    assert offset[0].tolist() == [0, 0, 0, 1, 2, 0, 0, 0, 0, 0]
    assert left[1].tolist()[:5] == [0, 0, 0, 2, 2] and right[1].tolist()[:5] == [0, 2, 0, 5, 5]
    assert offset[1].tolist()[:5] == [0, 0, 0, 0, 1]
    # two spans drawn side by side are one run: its boundaries are never masked tokens
    left, right, offset = span_boundaries(torch.tensor([[X, 1, 2, 3, 4, X]]))
    assert (left[0, 1:5].tolist(), right[0, 1:5].tolist(), offset[0, 1:5].tolist()) == ([0] * 4, [5] * 4, [0, 1, 2, 3])


def test_the_sbo_input_reads_only_the_boundaries_and_the_position():
    """Changing the hidden state of a token inside the span (or anywhere but its boundaries) leaves each of the span's
    SBO inputs as it was; changing a boundary's changes them. The input is [x_{s-1}; x_{e+1}; p_{i-s+1}]."""
    labels = torch.tensor([[X, X, 5, 6, 7, X, X, X]])
    batch = add_prediction_slots({"labels": labels, "attention_mask": torch.ones(1, 8, dtype=torch.long)}, 4)
    batch = add_boundary_slots(batch)
    rows, left, right, offset = batch["mlm_rows"], batch["sbo_left"], batch["sbo_right"], batch["sbo_offset"]
    assert batch["mlm_cols"].tolist() == [2, 3, 4, 0] and left.tolist()[:3] == [1, 1, 1] and right.tolist()[:3] == [5, 5, 5]
    torch.manual_seed(0)
    hidden, positions = torch.randn(1, 8, 16), torch.randn(MAX_SPAN_PIECES, 16)
    h0 = boundary_inputs(hidden, rows, left, right, offset, positions)  # (4, 48)
    assert torch.equal(h0[0], torch.cat([hidden[0, 1], hidden[0, 5], positions[0]]))
    assert torch.equal(h0[2, 32:], positions[2])  # the third token of the span: p_3
    inside = hidden.clone()
    inside[0, 2:5] += 10.0  # the span's own tokens
    inside[0, 6:] -= 3.0  # and tokens beyond the boundary
    assert torch.equal(boundary_inputs(inside, rows, left, right, offset, positions)[:3], h0[:3])
    moved = hidden.clone()
    moved[0, 5] += 1.0  # the right boundary
    assert not torch.equal(boundary_inputs(moved, rows, left, right, offset, positions)[:3, 16:32], h0[:3, 16:32])
    head = SpanBoundaryHead(BertConfig(vocab_size=50, num_layers=1, hidden_size=16, num_heads=1, intermediate_size=32))
    assert head(h0).shape == (4, 16)


def test_settings_it_needs_are_one_line():
    base = PretrainConfig.classroom(span_mask=True, span_boundary=True)
    validate(base)
    for bad in (dict(span_mask=False), dict(packing=True), dict(objective="electra")):
        with pytest.raises(EngineError, match="--span-boundary .* needs --span-mask"):
            validate(replace(base, **bad))
    with pytest.raises(EngineError, match="masked objective"):
        SpanBoundaryPreTraining(BertConfig(vocab_size=50, num_layers=1, hidden_size=16, num_heads=1,
                                           intermediate_size=32, causal=True))


@pytest.mark.slow
def test_a_run_with_the_span_boundary_objective_trains_and_resumes(tmp_path, bbc_docs):
    """A short --span-mask --span-boundary run: sbo_loss and sbo_acc in its records, MLM and SBO losses fall, the
    checkpoint holds the head beside a BERT checkpoint engine.load reads, and a resume from step 20 ends as the
    straight run."""
    import engine
    from engine.pretraining.run import pretrain
    corpus = tmp_path / "bbc.txt"
    corpus.write_text("\n\n".join(" ".join(d) for d in bbc_docs[::20]), encoding="utf-8")
    cfg = PretrainConfig.classroom(corpus=str(corpus), objective="mlm", span_mask=True, span_boundary=True,
                                   vocab_size=1000, cache_dir=str(tmp_path / "cache"), layers=2, hidden=64, heads=1,
                                   max_positions=64, seq_len=64, phase2_seq_len=None, batch_size=16, steps=40, lr=2e-3,
                                   warmup=4, log_every=10, eval_every=40, save_every=20, eval_max_instances=32,
                                   quiet=True, num_threads=1, prefetch=0, out=str(tmp_path / "run"))
    run = pretrain(cfg)
    train = [r for r in runs.read_metrics(run) if r["split"] == "train"]
    assert {"sbo_loss", "sbo_acc", "mlm_loss"} <= set(train[-1])
    assert train[-1]["sbo_loss"] < train[0]["sbo_loss"] - 0.5 and train[-1]["loss"] < train[0]["loss"] - 1.0
    # L = L_MLM + L_SBO (the record's loss is a mean of batch means, its parts means over the window's tokens)
    assert train[0]["loss"] == pytest.approx(train[0]["mlm_loss"] + train[0]["sbo_loss"], rel=1e-2)
    ckpt = runs.latest_checkpoint(run)
    assert (ckpt / HEAD_FILE).is_file() and engine.load(ckpt).config.has_mlm_head
    half = replace(cfg, out=str(tmp_path / "half"), stop_after=20)
    pretrain(half)
    pretrain(replace(half, stop_after=None, resume=True))
    resumed = [r for r in runs.read_metrics(tmp_path / "half") if r["split"] == "train"]
    assert resumed[-1]["loss"] == pytest.approx(train[-1]["loss"], rel=1e-6)
    assert resumed[-1]["sbo_acc"] == train[-1]["sbo_acc"]
