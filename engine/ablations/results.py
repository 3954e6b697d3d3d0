"""Reading a study back: every run's eval.json and metrics.jsonl into the paper's layout (rows variants, columns
tasks, mean ± std over the replicates (seeds x restarts) and n), the pre-training curves of all variants, and the study's finding checked.
"""
from dataclasses import dataclass
from pathlib import Path

from engine import records, runs
from engine.ablations.folders import read_study, study_of
from engine.ablations.runner import job_states
from engine.ablations.study import Study, pretrain_column_name
from engine.ablations.verdict import judge
from engine.fileio import atomic_write_text
from engine.objectives import every
from engine.commands import PRETRAIN, kind_of
from engine.status import CANCELLED, FAILED, FINISHED, QUEUED, RUNNING, status_of


# an eval.json's best dev score and one features combination's score: engine.records reads them for every page
best_score = records.best_dev_score
combination_score = records.combination_score

CURVE_X = records.CURVE_X


def pretrain_eval_records(recs: list) -> list:
    """The held-out records of a pre-training metrics.jsonl without their `eval_` prefix: {step, mlm_loss, mlm_acc,
    mlm_ppl, nsp_loss, nsp_acc, ...} (an `ltr` run has lm_loss, lm_acc, lm_ppl: next-token, not masked-token)."""
    return [ev for ev in map(records.eval_record, recs) if ev is not None]


@dataclass
class StudyResults:
    study: Study
    table: "object"  # pandas DataFrame, the paper's layout: one row per variant, "mean ± std (n)" per column
    summary: "object"  # DataFrame: variant, column, step, mean, std, n (numbers behind `table`)
    scores: "object"  # DataFrame: variant, column, step, seed, value (one row per replicate: seed x restart)
    curves: "object"  # DataFrame: variant, seed, step, tokens, elapsed, metric, split (train|eval), value (pre-training curves)
    checks: list  # [{claim, holds (True/False/None), detail}]: the direction of the means, no uncertainty
    findings: list  # per Study.findings() contrast: verdict.judge's entry (statement, verdict, numbers, interval)
    finding: str
    jobs: list  # job_states()
    progress: dict  # {total, finished, failed, running, queued, cancelled, seconds, reused}

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
    study = study_of(study_dir, data)
    jobs = data["jobs"]
    score_rows, curve_rows = [], []
    replicates = {}  # (variant, column, step) -> [(score, per-example values or None, pre-training seed)], one per seed and restart
    floors = {}  # accuracy column -> its dev set's majority-class rate, from a fine-tuning's eval.json (the same dev set)
    for j in jobs:
        out = study_dir / j["out"]
        if kind_of(j["kind"]) is PRETRAIN:
            recs = runs.read_metrics(out)
            seen = {}  # step -> (tokens, elapsed) of the training record: the x axes of the held-out points too
            for r in recs:
                if isinstance(r.get("step"), (int, float)) and r.get("split") != "eval":
                    x = {"step": int(r["step"]), "tokens": r.get("tokens"), "elapsed": r.get("elapsed")}
                    seen[x["step"]] = x
                    for m in every("metrics") + ("lr", "tokens_per_s"):
                        if isinstance(r.get(m), (int, float)) and not isinstance(r.get(m), bool):
                            curve_rows.append({"variant": j["variant"], "seed": j["seed"], **x,
                                               "metric": m, "split": "train", "value": float(r[m])})
            evals = pretrain_eval_records(recs)
            for ev in evals:
                x = seen.get(ev["step"], {"step": ev["step"], "tokens": ev.get("tokens"), "elapsed": None})
                for m, val in ev.items():
                    if m not in CURVE_X:
                        curve_rows.append({"variant": j["variant"], "seed": j["seed"], **x,
                                           "metric": m, "split": "eval", "value": val})
            if evals:
                for col in study.pretrain_columns:
                    if col in evals[-1]:
                        score_rows.append({"variant": j["variant"], "column": pretrain_column_name(col), "step": None,
                                           "seed": j["seed"], "value": evals[-1][col]})
                        replicates.setdefault((j["variant"], pretrain_column_name(col), None), []).append((evals[-1][col], None, j["seed"]))
            continue
        ev_data = records.read_eval(out)
        if not ev_data:
            continue
        try:
            ev = next(e for e in study.evaluations if e.name == j["evaluation"])
        except StopIteration:
            continue
        for variant, combine in (j.get("combines") or {j["variant"]: None}).items():
            val = combination_score(ev_data, combine, ev.metric) if combine else best_score(ev_data, ev.metric)
            if val is None:
                continue
            # the replicates: a fine-tune's restarts at its best grid point, or a feature combination's one
            # classifier, each with its per-example scores; a cell of the table is their mean and spread
            reps = records.combination_scores(ev_data, combine, ev.metric) if combine else records.trial_scores(ev_data, ev.metric)
            reps = reps or [(val, None)]
            for score, _ in reps:
                score_rows.append({"variant": variant, "column": ev.name, "step": j.get("step"), "seed": j["seed"], "value": score})
            # the pre-trained model it came from (verdict.py resamples those first); a fixed model is one for all seeds
            pre = j["seed"] if study.model is None else 0
            replicates.setdefault((variant, ev.name, j.get("step")), []).extend((s, p, pre) for s, p in reps)
            if ev.metric == "accuracy" and not combine and (ev_data.get("data") or {}).get("dev_majority_accuracy") is not None:
                floors[ev.name] = ev_data["data"]["dev_majority_accuracy"]
    scores = pd.DataFrame(score_rows, columns=["variant", "column", "step", "seed", "value"])
    curves = pd.DataFrame(curve_rows, columns=["variant", "seed", *CURVE_X, "metric", "split", "value"])
    summary = summarise(scores)
    table = paper_table(study, summary)
    states = job_states(study_dir, data)  # the study.json read above, not a second read
    progress = {"total": len(states)}
    for s in (FINISHED.name, FAILED.name, RUNNING.name, QUEUED.name, CANCELLED.name):
        progress[s] = sum(1 for r in states if r["state"] == s)
    progress["seconds"] = round(sum(j.get("seconds") or 0 for j in jobs), 1)  # foreground runs record each job's time
    progress["reused"] = sum(1 for r in states if r.get("reused_from"))  # pre-trainings and evaluations taken over (engine.ablations.reuse)
    return StudyResults(study=study, table=table, summary=summary, scores=scores, curves=curves,
                        checks=study.check_finding(summary),
                        findings=judge_findings(study, replicates, floors, incomplete_cells(study, data["jobs"], states)),
                        finding=study.finding, jobs=states, progress=progress)


def incomplete_cells(study: Study, jobs: list, states: list) -> dict:
    """{(variant, column): (jobs finished, jobs planned)} for each table cell some of whose jobs have not finished
    (`states`: job_states of `jobs`, in order). A cell's jobs are its evaluations of the variant (each seed; a
    features job counts for every variant it combines) and the variant's pre-trainings (its held-out columns, and
    every downstream column: a fine-tuning of an unfinished pre-training is not the variant's)."""
    cells, pretrainings = {}, {}  # (variant, column) -> [finished?]; variant -> [finished?]
    for job, row in zip(jobs, states):
        done = status_of(row["state"]) is FINISHED
        if kind_of(job["kind"]) is PRETRAIN:
            pretrainings.setdefault(job["variant"], []).append(done)
            for col in study.pretrain_columns:
                cells.setdefault((job["variant"], pretrain_column_name(col)), []).append(done)
            continue
        for variant in (job.get("combines") or {job["variant"]: None}):
            cells.setdefault((variant, job.get("evaluation")), []).append(done)
    out = {}
    for (variant, column), flags in cells.items():
        own = flags if column in {pretrain_column_name(c) for c in study.pretrain_columns} else flags + pretrainings.get(variant, [])
        if not all(own):
            out[(variant, column)] = (sum(own), len(own))
    return out


def judge_findings(study: Study, replicates: dict, floors: dict = None, incomplete: dict = None) -> list:
    """Each of the study's findings judged (engine.ablations.verdict) on its replicates; Figure 5's at each row's
    last evaluated step. `floors`: {column: majority-class accuracy} for the columns whose fine-tuning recorded it.
    `incomplete`: `incomplete_cells` (a finding on one of them is not judged yet)."""
    last = {}
    for (variant, column, step) in replicates:
        k = (variant, column)
        if k not in last or (step is not None and (last[k] is None or step > last[k])):
            last[k] = step
    at_last = {k: replicates[(k[0], k[1], step)] for k, step in last.items()}
    return [judge(c, at_last, floor=(floors or {}).get(c.column), incomplete=incomplete) for c in study.findings()]


def final_pretrain_metrics(curves):
    """Held-out pre-training metrics at each run's last evaluation: one row per (variant, seed)."""
    import pandas as pd

    ev = curves[curves["split"] == "eval"] if len(curves) else curves
    rows = []
    for (variant, seed), g in ev.groupby(["variant", "seed"], sort=False):
        last = g[g["step"] == g["step"].max()]
        row = {"variant": variant, "seed": int(seed), "step": int(last["step"].iloc[0])}
        for m in every("held_out_metrics"):
            hit = last[last["metric"] == m]
            if len(hit):
                row[m] = round(float(hit["value"].iloc[0]), 4)
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(scores):
    """mean, std (sample, 0 for n=1) and n per (variant, column, step): n counts the replicates (pre-training seeds
    x fine-tuning restarts)."""
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
    for c in dict.fromkeys(pretrain_column_name(c) for c in study.pretrain_columns):  # two keys may share a header
        columns.append((c, None))
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
