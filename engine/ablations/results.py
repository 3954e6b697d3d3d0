"""Reading a study back: every run's eval.json and metrics.jsonl into the paper's layout (rows variants, columns
tasks, mean ± std over seeds and n), the pre-training curves of all variants, and the study's finding checked.
"""
import json
import math
from dataclasses import dataclass
from pathlib import Path

from engine.ablations.folders import read_study
from engine.ablations.runner import job_states
from engine.ablations.study import Study, pretrain_column_name, study_from_dict
from engine.fileio import atomic_write_text


_METRIC_ALIASES = {
    "accuracy": ("accuracy", "acc", "dev_accuracy", "eval_accuracy"),
    "f1": ("f1", "entity_f1", "micro_f1", "dev_f1", "eval_f1"),
    "mcc": ("mcc", "matthews", "matthews_corrcoef", "matthews_correlation"),
    "exact_match": ("exact_match", "em", "exact"),
    "pearson": ("pearson",),
    "spearman": ("spearman",),
}


def _pick_metric(d, metric: str):
    if not isinstance(d, dict):
        return None
    for name in _METRIC_ALIASES.get(metric, (metric,)):
        v = d.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    for sub in ("metrics", "dev", "dev_metrics", "best_metrics", "scores"):
        if isinstance(d.get(sub), dict):
            v = _pick_metric(d[sub], metric)
            if v is not None:
                return v
    return None


def best_score(eval_data: dict, metric: str):
    """The best dev score of `metric` in an eval.json written by `finetune` or `features` (None when absent)."""
    if not isinstance(eval_data, dict):
        return None
    for key in ("best", "best_dev", "result", "dev"):
        v = _pick_metric(eval_data.get(key), metric)
        if v is not None:
            return v
    v = _pick_metric(eval_data, metric)
    if v is not None:
        return v
    trials = eval_data.get("trials") or eval_data.get("results") or []
    vals = [x for x in (_trial_score(t, metric) for t in trials) if x is not None]
    return max(vals) if vals else None


def combination_score(eval_data: dict, combine: str, metric: str):
    """The dev `metric` of one combination in an eval.json written by `engine features` (its "results" list)."""
    for r in (eval_data or {}).get("results") or []:
        if isinstance(r, dict) and r.get("combine") == combine:
            v = _pick_metric(r.get("dev"), metric)
            if v is None and r.get("metric") == metric and isinstance(r.get("score"), (int, float)):
                v = float(r["score"])
            return v
    return None


def _trial_score(t, metric: str):
    if not isinstance(t, dict):
        return None
    v = _pick_metric(t.get("best") or t.get("dev") or t, metric)
    if v is not None:
        return v
    epochs = t.get("epochs") or t.get("history") or []
    vals = [x for x in (_pick_metric(e, metric) for e in epochs if isinstance(e, dict)) if x is not None]
    return max(vals) if vals else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list:
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            out.append(r)
    return out


def pretrain_eval_records(records: list) -> list:
    """The held-out records of a pre-training metrics.jsonl without their `eval_` prefix: {step, mlm_loss, mlm_acc,
    mlm_ppl, nsp_loss, nsp_acc, ...} (an `ltr` run has lm_loss, lm_acc, lm_ppl: next-token, not masked-token)."""
    out = []
    for r in records:
        step = r.get("step")
        if not isinstance(step, (int, float)):
            continue
        ev = {}
        if r.get("split") == "eval":  # engine.pretrain: {"step", "split": "eval", "eval_mlm_loss", ...}
            ev = {(k[len("eval_"):] if k.startswith("eval_") else k): v for k, v in r.items()}
        elif isinstance(r.get("eval"), dict):
            ev = dict(r["eval"])
        else:
            for k, v in r.items():
                for p in ("eval_", "heldout_", "held_out_", "val_"):
                    if k.startswith(p) and isinstance(v, (int, float)) and not isinstance(v, bool):
                        ev[k[len(p):]] = v
        if not ev:
            continue
        ev = {k: float(v) for k, v in ev.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        for a, b in (("mlm_ppl", "mlm_perplexity"), ("mlm_ppl", "perplexity"), ("mlm_ppl", "ppl"), ("mlm_acc", "mlm_accuracy"), ("nsp_acc", "nsp_accuracy")):
            if a not in ev and b in ev:
                ev[a] = ev[b]
        if "mlm_ppl" not in ev and isinstance(ev.get("mlm_loss"), float) and ev["mlm_loss"] < 50:
            ev["mlm_ppl"] = math.exp(ev["mlm_loss"])
        ev["step"] = int(step)
        out.append(ev)
    return out


@dataclass
class StudyResults:
    study: Study
    table: "object"  # pandas DataFrame, the paper's layout: one row per variant, "mean ± std (n)" per column
    summary: "object"  # DataFrame: variant, column, step, mean, std, n (numbers behind `table`)
    scores: "object"  # DataFrame: variant, column, step, seed, value (one row per finished evaluation)
    curves: "object"  # DataFrame: variant, seed, step, metric, split (train|eval), value (pre-training curves)
    checks: list  # [{claim, reproduced (True/False/None), detail}]
    finding: str
    jobs: list  # job_states()
    progress: dict  # {total, finished, failed, running, queued}

    def to_csv(self, path=None) -> str:
        """The summary as CSV (variant, column, step, mean, std, n); written atomically to `path` when given."""
        text = self.summary.to_csv(index=False)
        if path is not None:
            atomic_write_text(Path(path), text)
        return text


def collect_results(study_dir) -> StudyResults:
    """Read a study folder back: the paper's table, the pre-training curves, and the finding's checks."""
    import pandas as pd

    study_dir = Path(study_dir)
    data = read_study(study_dir)
    study = study_from_dict(data["study"])
    jobs = data["jobs"]
    score_rows, curve_rows = [], []
    for j in jobs:
        out = study_dir / j["out"]
        if j["kind"] == "pretrain":
            recs = _read_jsonl(out / "metrics.jsonl")
            for r in recs:
                if isinstance(r.get("step"), (int, float)) and r.get("split") != "eval":
                    for m in ("loss", "mlm_loss", "mlm_acc", "lm_loss", "lm_acc", "nsp_loss", "nsp_acc", "lr", "tokens_per_s"):
                        if isinstance(r.get(m), (int, float)) and not isinstance(r.get(m), bool):
                            curve_rows.append({"variant": j["variant"], "seed": j["seed"], "step": int(r["step"]),
                                               "metric": m, "split": "train", "value": float(r[m])})
            evals = pretrain_eval_records(recs)
            for ev in evals:
                for m, val in ev.items():
                    if m != "step":
                        curve_rows.append({"variant": j["variant"], "seed": j["seed"], "step": ev["step"],
                                           "metric": m, "split": "eval", "value": val})
            if evals:
                for col in study.pretrain_columns:
                    if col in evals[-1]:
                        score_rows.append({"variant": j["variant"], "column": pretrain_column_name(col), "step": None,
                                           "seed": j["seed"], "value": evals[-1][col]})
            continue
        ev_data = _read_json(out / "eval.json")
        if ev_data is None:
            continue
        try:
            ev = next(e for e in study.evaluations if e.name == j["evaluation"])
        except StopIteration:
            continue
        for variant, combine in (j.get("combines") or {j["variant"]: None}).items():
            val = combination_score(ev_data, combine, ev.metric) if combine else best_score(ev_data, ev.metric)
            if val is not None:
                score_rows.append({"variant": variant, "column": ev.name, "step": j.get("step"), "seed": j["seed"], "value": val})
    scores = pd.DataFrame(score_rows, columns=["variant", "column", "step", "seed", "value"])
    curves = pd.DataFrame(curve_rows, columns=["variant", "seed", "step", "metric", "split", "value"])
    summary = summarise(scores)
    table = paper_table(study, summary)
    states = job_states(study_dir)
    progress = {"total": len(states)}
    for s in ("finished", "failed", "running", "queued", "cancelled"):
        progress[s] = sum(1 for r in states if r["state"] == s)
    progress["seconds"] = round(sum(j.get("seconds") or 0 for j in jobs), 1)  # foreground runs record each job's time
    return StudyResults(study=study, table=table, summary=summary, scores=scores, curves=curves,
                        checks=study.check_finding(summary), finding=study.finding, jobs=states, progress=progress)


def final_pretrain_metrics(curves):
    """Held-out pre-training metrics at each run's last evaluation: one row per (variant, seed)."""
    import pandas as pd

    ev = curves[curves["split"] == "eval"] if len(curves) else curves
    rows = []
    for (variant, seed), g in ev.groupby(["variant", "seed"], sort=False):
        last = g[g["step"] == g["step"].max()]
        row = {"variant": variant, "seed": int(seed), "step": int(last["step"].iloc[0])}
        for m in ("mlm_acc", "mlm_ppl", "nsp_acc", "lm_acc", "lm_ppl"):
            hit = last[last["metric"] == m]
            if len(hit):
                row[m] = round(float(hit["value"].iloc[0]), 4)
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(scores):
    """mean, std (sample, 0 for n=1) and n per (variant, column, step)."""
    import pandas as pd

    cols = ["variant", "column", "step", "mean", "std", "n"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    s = scores.copy()
    s["step"] = s["step"].astype("object").where(s["step"].notna(), -1)
    g = s.groupby(["variant", "column", "step"], sort=False)["value"]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    out["step"] = out["step"].map(lambda x: None if x == -1 else int(x))
    return out[cols]


def _column_label(col: str, step) -> str:
    return col if step is None else f"{col} @ {step}"


def fmt_cell(mean: float, std: float, n: int, percent: bool = True) -> str:
    if percent:
        return f"{100 * mean:.1f} ± {100 * std:.1f} (n={n})"
    return f"{mean:.2f} ± {std:.2f} (n={n})"


def paper_table(study: Study, summary):
    """Rows variants (in the study's order), columns the evaluations (and pre-training columns), "mean ± std (n)"."""
    import pandas as pd

    columns = []
    steps = list(study.checkpoint_steps) or [None]
    for ev in study.evaluations:
        for k in steps:
            columns.append((ev.name, k))
    for c in study.pretrain_columns:
        columns.append((pretrain_column_name(c), None))
    rows = []
    for v in study.variants:
        row = {"variant": v.name}
        for col, k in columns:
            hit = summary[(summary["variant"] == v.name) & (summary["column"] == col)
                          & (summary["step"].map(lambda x: x == k if k is not None else x is None))] if len(summary) else summary
            if len(hit):
                r = hit.iloc[0]
                row[_column_label(col, k)] = fmt_cell(r["mean"], r["std"], int(r["n"]), percent="ppl" not in col)
            else:
                row[_column_label(col, k)] = "–"
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")
