"""studio/pretrain_figures.py: the pre-training curves draw each objective's own metrics."""
import pytest

from engine.objectives import ELECTRA, MLM_NSP, MLM_SOP
from studio.pretrain_figures import pretraining_curves


def _records(pair: str):
    train = [{"step": s, "split": "train", "loss": 3.0 - s / 100, "mlm_loss": 2.0, "mlm_acc": 0.1 * s / 100,
              f"{pair}_loss": 0.69, f"{pair}_acc": 0.5 + s / 1000} for s in (10, 20, 30)]
    evals = [{"step": 30, "split": "eval", "eval_mlm_loss": 2.1, "eval_mlm_acc": 0.05, f"eval_{pair}_loss": 0.7,
              f"eval_{pair}_acc": 0.52}]
    return train, evals


def test_a_sop_run_draws_its_sentence_order_curves_as_an_nsp_run_draws_its_nsp_curves():
    for obj in (MLM_NSP, MLM_SOP):
        train, evals = _records(obj.pairs)
        figs = dict(pretraining_curves(train, evals, obj))  # (title, figure) pairs
        assert list(figs)[:2] == ["MLM", obj.pairs.upper()]
        pair = figs[obj.pairs.upper()]
        titles = [a.text for a in pair.layout.annotations]
        assert titles[:2] == [f"{obj.pairs.upper()} loss", f"{obj.pairs.upper()} accuracy"]
        drawn = [t for t in pair.data if t.y is not None and len(t.y)]
        assert len(drawn) == 4  # train and held-out, loss and accuracy
        assert list(drawn[2].y) == [0.51, 0.52, 0.53]  # the train accuracy of the pair task, from its own keys


def test_an_electra_run_draws_its_discriminator_beside_the_always_original_rule():
    """The discriminator is an ELECTRA run's model: its loss and accuracy get their own figure, with the accuracy of
    calling every token "original" (1 - the replaced share) drawn beside it and, beside the loss, the loss of saying
    the share at every token, train and held out."""
    train = [{"step": s, "split": "train", "loss": 30.0, "mlm_loss": 7.0, "mlm_acc": 0.05, "disc_loss": 0.54,
              "disc_acc": 0.75 + s / 1000, "disc_replaced": 0.25} for s in (10, 20, 30)]
    evals = [{"step": 30, "split": "eval", "eval_mlm_loss": 7.1, "eval_mlm_acc": 0.05, "eval_disc_loss": 0.44,
              "eval_disc_acc": 0.86, "eval_disc_replaced": 0.15}]
    figs = dict(pretraining_curves(train, evals, ELECTRA))
    assert list(figs)[:2] == ["MLM", "Replaced-token detection"]
    traces = {t.name: list(t.y) for t in figs["Replaced-token detection"].data}
    assert traces["always 'original' (train)"] == [0.75, 0.75, 0.75]
    assert traces["always 'original' (held out)"] == [0.85] and traces["held-out acc"] == [0.86]
    # the loss of saying the share everywhere: the binary entropy of 0.25 (train) and 0.15 (held out), in nats
    assert traces["the share alone (train)"] == pytest.approx([0.5623] * 3, abs=1e-4)
    assert traces["the share alone (held out)"] == pytest.approx([0.4227], abs=1e-4) and traces["held-out loss"] == [0.44]
    assert "Replaced-token detection" not in dict(pretraining_curves(*_records("nsp"), MLM_NSP))
