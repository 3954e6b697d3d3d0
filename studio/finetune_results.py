"""The Fine-tune page's Results tab as tables: a trial's label, one row per finished trial, and the per-epoch dev
scores of metrics.jsonl (live, before eval.json lists the trial).

- `trial_label(t)`: "#0 lr 5e-05 · bs 32 · ep 3 · r0".
- `grid_point(cfg, i)`: trial i's settings from the run's config, in the order engine.finetune runs the grid.
- `trial_rows(trials, metric)`: one row per trial of eval.json (its settings, score, time and numeric dev scores).
- `epoch_rows(records, trials, cfg)`: one row per (trial, epoch) dev score in metrics.jsonl.
"""


def trial_label(t: dict) -> str:
    return f"#{t['trial']} lr {t['lr']:g} · bs {t['batch_size']} · ep {t['epochs']} · r{t.get('restart', 0)}"


def grid_point(cfg: dict, i: int) -> dict:
    """The grid point of trial i while eval.json does not list it yet (the order engine.finetune uses)."""
    pts = [{"lr": lr, "batch_size": bs, "epochs": e, "restart": r}
           for lr in cfg.get("lr", []) for bs in cfg.get("batch_size", []) for e in cfg.get("epochs", [])
           for r in range(cfg.get("restarts", 1))]
    return pts[i] if i < len(pts) else {"lr": 0.0, "batch_size": 0, "epochs": 0, "restart": 0}


def trial_rows(trials: list, metric: str) -> list:
    return [{"trial": trial_label(t), "lr": t["lr"], "batch size": t["batch_size"], "epochs": t["epochs"],
             "restart": t.get("restart"), "best epoch": t.get("best_epoch"), metric: t.get("score"),
             "seconds": t.get("seconds"),
             **{f"dev {k}": v for k, v in (t.get("dev") or {}).items() if isinstance(v, (int, float))}}
            for t in trials]


def epoch_rows(records: list, trials: list, cfg: dict) -> list:
    """{"trial": label, "epoch", "value"} per epoch record of metrics.jsonl; a trial eval.json does not list yet is
    labelled from the run's grid."""
    rows = []
    for r in records:
        if r.get("score") is None or "epoch" not in r or not isinstance(r.get("trial"), int):
            continue
        t = trials[r["trial"]] if r["trial"] < len(trials) else grid_point(cfg, r["trial"])
        rows.append({"trial": trial_label({**t, "trial": r["trial"]}), "epoch": r["epoch"], "value": r["score"]})
    return rows
