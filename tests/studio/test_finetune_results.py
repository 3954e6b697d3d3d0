"""studio.finetune_results: the Fine-tune page's Results tables from eval.json trials and metrics.jsonl records."""
from studio.finetune_results import epoch_rows, grid_point, trial_label, trial_rows

CFG = {"lr": [5e-5, 3e-5], "batch_size": [32], "epochs": [2, 3], "restarts": 2}


def test_grid_point_follows_finetunes_order_and_pads_past_the_grid():
    assert grid_point(CFG, 0) == {"lr": 5e-5, "batch_size": 32, "epochs": 2, "restart": 0}
    assert grid_point(CFG, 1) == {"lr": 5e-5, "batch_size": 32, "epochs": 2, "restart": 1}
    assert grid_point(CFG, 6) == {"lr": 3e-5, "batch_size": 32, "epochs": 3, "restart": 0}
    assert grid_point(CFG, 8) == {"lr": 0.0, "batch_size": 0, "epochs": 0, "restart": 0}


def test_trial_rows_keep_settings_score_and_numeric_dev_scores():
    t = {"trial": 1, "lr": 3e-5, "batch_size": 32, "epochs": 3, "restart": 0, "best_epoch": 2, "score": 0.9,
         "seconds": 12.5, "dev": {"accuracy": 0.9, "f1": 0.8, "per_example": [1, 0]}}
    assert trial_label(t) == "#1 lr 3e-05 · bs 32 · ep 3 · r0"
    assert trial_rows([t], "accuracy") == [{
        "trial": "#1 lr 3e-05 · bs 32 · ep 3 · r0", "lr": 3e-5, "batch size": 32, "epochs": 3, "restart": 0,
        "best epoch": 2, "accuracy": 0.9, "seconds": 12.5, "dev accuracy": 0.9, "dev f1": 0.8}]


def test_epoch_rows_label_unlisted_trials_from_the_grid_and_skip_other_records():
    listed = [{"trial": 0, "lr": 5e-5, "batch_size": 32, "epochs": 2, "restart": 0}]
    records = [{"step": 10, "loss": 0.7}, {"trial": 0, "epoch": 1, "score": 0.5}, {"trial": 2, "epoch": 1, "score": 0.6},
               {"trial": 0, "epoch": 2, "score": None}, {"trial": "x", "epoch": 1, "score": 0.1}]
    assert epoch_rows(records, listed, CFG) == [
        {"trial": "#0 lr 5e-05 · bs 32 · ep 2 · r0", "epoch": 1, "value": 0.5},
        {"trial": "#2 lr 5e-05 · bs 32 · ep 3 · r0", "epoch": 1, "value": 0.6}]
