"""Run comparison (the Compare page's logic; no streamlit import, so it is tested directly).

- `find_runs(root)`: every run with a run.json under the runs folder: top-level runs (pre-training, fine-tuning,
  features) and the runs of every study under `studies/` (labelled "study / variant / seed", grouped by variant,
  from the study's study.json). A top-level run's group is its name without a trailing seed suffix
  ("bert-s0", "bert-seed1" -> "bert"), so a user's repeated runs group too.
- `metrics_frame(entries)`: their metrics.jsonl records in one long DataFrame (run, group, seed, kind, then the
  record's fields); `numeric_metrics` lists what can be plotted. Each run's file is streamed and each of its series
  down-sampled evenly to at most MAX_ROWS_PER_SERIES points, its last kept (engine.runs.read_metrics), so memory
  follows what the chart shows, not the size of the file. run.json and study.json are read only when they are
  regular files inside their folder and of a sane size (engine.fileio.read_regular); a FIFO, a device or a symlink
  out is skipped.
- x axes: engine.records.CURVE_X (steps, tokens seen, training time), each a field of the records (pre-training writes all three,
  fine-tuning steps and elapsed time; a run without the chosen field is left out and the page says so).
- `ema(values, weight)`: TensorBoard's debiased exponential moving average: s_t = w s_{t-1} + (1 - w) y_t from
  s_0 = 0, divided by 1 - w^t so the first points are not pulled towards 0. weight 0 = the raw curve.
- `group_band(curves)`: per group, every run interpolated onto the union of their x values (only inside each
  run's own range): the mean line and the band from the lowest to the highest run (the seed band).
- `differing_settings(entries)`: the run.json config keys whose values differ between the selected runs.
- `comparison_figure(...)`: the plotly chart: each run's raw curve faint behind its smoothed curve, each run with
  its own dash and marker (`line_style`: runs with the same curve stay visible and named), or per group the smoothed
  mean line over its seed band; metrics named in words (engine.records.metric_label).
"""
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.records import CURVE_X, RUN_JSON, metric_label, read_json_or_empty

MAX_ROWS_PER_SERIES = 5_000  # points per run and series on the chart (a chart is a few hundred pixels wide)
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]  # a run's curve: its colour, dash and marker
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"]
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
NOT_METRICS = {"step", "tokens", "elapsed", "trial", "epoch", "phase", "seed"}  # x axes and bookkeeping
NOT_SETTINGS = {"out"}  # config keys that always differ (the run's own folder)
_SEED_SUFFIX = re.compile(r"[-_](?:s|seed)(\d+)$")


@dataclass
class RunEntry:
    label: str  # what the picker shows
    path: str
    kind: str  # pretrain | finetune | features | ...
    group: str  # runs of one variant share it
    seed: int = None
    config: dict = field(default_factory=dict)


def _entry(path: Path, label: str, group: str = None, seed=None, kind=None) -> RunEntry:
    info = read_json_or_empty(path / RUN_JSON)
    m = _SEED_SUFFIX.search(path.name)
    if group is None:
        group = _SEED_SUFFIX.sub("", path.name) if m else path.name
    if seed is None:
        seed = int(m.group(1)) if m else (info.get("config") or {}).get("seed")
    return RunEntry(label=label, path=str(path), kind=kind or info.get("kind") or "?", group=group, seed=seed,
                    config=dict(info.get("config") or {}))


def find_runs(root) -> list:
    """[RunEntry] for the runs under `root`: top-level runs by name, then each study's runs."""
    root = Path(root)
    out = []
    if not root.is_dir():
        return out
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (d / RUN_JSON).is_file():
            out.append(_entry(d, d.name))
    studies = root / "studies"
    if studies.is_dir():
        for s in sorted(p for p in studies.iterdir() if (p / "study.json").is_file()):
            data = read_json_or_empty(s / "study.json")
            for job in data.get("jobs", []):
                run = s / job.get("out", "")
                if not job.get("out") or not (run / RUN_JSON).is_file():
                    continue
                what = job.get("variant", "?") + (f" · {job['evaluation']}" if job.get("evaluation") else "")
                if job.get("step") is not None:
                    what += f" · step {job['step']}"
                out.append(_entry(run, f"{s.name} / {what} / seed {job.get('seed')}", group=f"{s.name}: {what}",
                                  seed=job.get("seed"), kind=job.get("kind")))
    return out


def metrics_frame(entries) -> pd.DataFrame:
    """Every record of the runs' metrics.jsonl, one row each: run, group, seed, kind, then the record's fields."""
    from engine.runs import read_metrics
    frames = []
    for e in entries:
        recs = read_metrics(e.path, max_rows=MAX_ROWS_PER_SERIES)
        if not recs:
            continue
        df = pd.DataFrame(recs)
        df.insert(0, "kind", e.kind)
        df.insert(0, "seed", e.seed)
        df.insert(0, "group", e.group)
        df.insert(0, "run", e.label)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["run", "group", "seed", "kind", "step"])
    return pd.concat(frames, ignore_index=True, sort=False)


def numeric_metrics(df: pd.DataFrame) -> list:
    """The plottable columns: numeric, not an x axis or bookkeeping; the common training loss first."""
    cols = [c for c in df.columns if c not in NOT_METRICS and c not in ("run", "group", "seed", "kind", "split")
            and pd.api.types.is_numeric_dtype(df[c]) and df[c].notna().any()]
    order = ["loss", "mlm_loss", "eval_mlm_acc", "eval_loss", "score"]
    return sorted(cols, key=lambda c: (order.index(c) if c in order else len(order), c))


def ema(values, weight: float) -> np.ndarray:
    """Debiased exponential moving average (TensorBoard's smoothing); NaNs are skipped and kept as NaN."""
    y = np.asarray(values, dtype=float)
    out = np.full_like(y, np.nan)
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    last, n = 0.0, 0
    for i, v in enumerate(y):
        if np.isnan(v):
            continue
        last = last * weight + (1.0 - weight) * v
        n += 1
        out[i] = last / (1.0 - weight ** n)
    return out


def curves(df: pd.DataFrame, metric: str, x: str, weight: float = 0.0) -> dict:
    """{run label: (group, x array, raw y, smoothed y)} for the runs that have both `x` and `metric`."""
    out = {}
    if metric not in df.columns or x not in df.columns:
        return out
    for run, d in df.groupby("run", sort=False):
        d = d[d[metric].notna() & d[x].notna()].sort_values(x)
        if d.empty:
            continue
        xs, ys = d[x].to_numpy(dtype=float), d[metric].to_numpy(dtype=float)
        out[run] = (d["group"].iloc[0], xs, ys, ema(ys, weight))
    return out


def group_band(items) -> tuple:
    """`items`: [(x array, y array)] of one group -> (grid, mean, low, high) on the union of the x values; each run
    counts only inside its own x range."""
    grid = np.unique(np.concatenate([np.asarray(x, dtype=float) for x, _ in items]))
    stack = np.full((len(items), len(grid)), np.nan)
    for r, (x, y) in enumerate(items):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        inside = (grid >= x.min()) & (grid <= x.max())
        stack[r, inside] = np.interp(grid[inside], x, y)
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return grid, np.nanmean(stack, axis=0), np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)


def differing_settings(entries) -> pd.DataFrame:
    """One row per run, one column per run.json config key whose value is not the same in every run."""
    keys = []
    for e in entries:
        keys += [k for k in e.config if k not in keys and k not in NOT_SETTINGS]
    vals = {k: [json.dumps(e.config.get(k), sort_keys=True, default=str) for e in entries] for k in keys}
    diff = [k for k in keys if len(set(vals[k])) > 1]
    # as text: a layer count stays "6" beside a run without one ("—"), not 6.0 beside NaN
    rows = [{"run": e.label, "kind": e.kind, **{k: "—" if e.config.get(k) is None else str(e.config[k]) for k in diff}}
            for e in entries]
    return pd.DataFrame(rows, columns=["run", "kind", *diff])


def line_style(i: int, colour: str, width: float) -> dict:
    """The i-th curve's line and markers: its own dash and marker symbol as well as its colour, so two runs with the
    same curve stay two visible, named curves (one drawn on the other would hide it)."""
    return dict(line=dict(color=colour, width=width, dash=DASHES[i % len(DASHES)]),
                marker=dict(color=colour, symbol=SYMBOLS[i % len(SYMBOLS)], size=7, maxdisplayed=24))


def comparison_figure(cv: dict, metric: str, x: str, grouped: bool = False) -> go.Figure:
    """`cv`: curves(...)'s dict. Per run: raw curve faint, smoothed curve on top, each run with its own colour, dash
    and marker and its name in the legend and in the hover (all runs at the hovered x); grouped: per group the mean
    of the smoothed curves over a band from the lowest to the highest run, raw curves faint behind. The metric is
    named in words (engine.records.metric_label)."""
    fig = go.Figure()
    label = metric_label(metric)
    groups = list(dict.fromkeys(g for g, *_ in cv.values()))
    colour = {g: COLOURS[i % len(COLOURS)] for i, g in enumerate(groups)} if grouped else {}
    for i, (run, (g, xs, raw, sm)) in enumerate(cv.items()):
        c = colour.get(g) or COLOURS[i % len(COLOURS)]
        fig.add_trace(go.Scatter(x=xs, y=raw, mode="lines", line=dict(color=c, width=1), opacity=0.25, showlegend=False,
                                 name=f"{run} (raw)", hoverinfo="skip"))
        if not grouped:
            fig.add_trace(go.Scatter(x=xs, y=sm, mode="lines+markers", name=run, **line_style(i, c, 2),
                                     hovertemplate=f"{run}: %{{y:.4f}}<extra></extra>"))
    if grouped:
        for k, g in enumerate(groups):
            items = [(xs, sm) for gg, xs, _, sm in cv.values() if gg == g]
            grid, mean, lo, hi = group_band(items)
            c = colour[g]
            fig.add_trace(go.Scatter(x=np.concatenate([grid, grid[::-1]]), y=np.concatenate([hi, lo[::-1]]), fill="toself",
                                     fillcolor=c, opacity=0.2, line=dict(width=0), hoverinfo="skip", showlegend=False,
                                     name=f"{g} (seed band)"))
            fig.add_trace(go.Scatter(x=grid, y=mean, mode="lines+markers", name=f"{g} (mean of {len(items)})",
                                     **line_style(k, c, 3), hovertemplate=f"{g} mean: %{{y:.4f}}<extra></extra>"))
    fig.update_layout(title=f"{label} against {CURVE_X.get(x, x)}", xaxis_title=CURVE_X.get(x, x), yaxis_title=label,
                      hovermode="x unified", height=460, margin=dict(l=10, r=10, t=60, b=10),
                      legend=dict(orientation="h", y=-0.18))
    return fig
