"""studio.finetune_plan: the Fine-tune page's grid size, its optimizer steps as engine.finetune counts them, one
step timed here without changing the loaded model, and the estimate only from timed batch sizes."""
import math

import pytest
import torch

import engine
from engine.finetune import FinetuneConfig, _trial_grid
from studio import finetune_plan as plan


def test_the_default_grid_is_classroom_sized_and_the_paper_grid_is_18():
    G, P = plan.grid("classroom"), plan.grid("paper")
    assert plan.n_trials(P["lr"].split(","), P["batch_size"], P["epochs"], P["restarts"]) == 18
    n = plan.n_trials(G["lr"].split(","), G["batch_size"], G["epochs"], G["restarts"])
    assert 1 < n <= 4  # still a grid (the dev set chooses), a fraction of the paper's wait


@pytest.mark.parametrize("n_train,lrs,bs,ep,r", [(10, [5e-5, 3e-5], [32], [3], 1), (1781, [5e-5], [16, 32], [2, 3, 4], 2)])
def test_train_steps_are_the_steps_engine_finetune_runs(n_train, lrs, bs, ep, r):
    cfg = FinetuneConfig(lr=tuple(lrs), batch_size=tuple(bs), epochs=tuple(ep), restarts=r)
    engine_steps = sum(math.ceil(n_train / t["batch_size"]) * t["epochs"] for t in _trial_grid(cfg))
    by_batch = plan.train_steps(n_train, lrs, bs, ep, r)
    assert sum(by_batch.values()) == engine_steps and set(by_batch) == set(bs)


def test_estimate_needs_every_batch_size_timed():
    by_batch = {16: 100, 32: 50}
    assert plan.estimate(by_batch, {32: 0.5}) is None
    assert plan.estimate(by_batch, {16: 0.2, 32: 0.5}) == pytest.approx(100 * 0.2 + 50 * 0.5)


@pytest.mark.slow
def test_time_step_times_a_copy(tiny_checkpoint):
    bundle = engine.load(tiny_checkpoint)
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    t = plan.time_step(bundle, 4, 16, precision="fp32")
    assert t["seconds"] > 0 and t["batch_size"] == 4 and t["seq_len"] == 16 and t["precision"] == "fp32"
    assert all(torch.equal(before[k], v) for k, v in bundle.model.state_dict().items())
