"""A finding's verdict: is variant A better than variant B on a column, beyond the uncertainty of our numbers?

The data of one variant on one column are its replicates: one per (pre-training seed, fine-tuning restart), each
`(score, per-example values or None, pre-training seed)`: its dev score, its scores per dev example where the task
records them (engine.records.PER_EXAMPLE), and the pre-training run it was fine-tuned from (the third element may
be left out: one pre-training run).

The bootstrap (`bootstrap_difference`), `n_boot` rounds drawn from one numpy Generator(seed):
1. resample each variant's replicates (independently: A's and B's runs are different models). With one
   pre-training seed, its replicates with replacement. With several, in two stages, because restarts of one
   pre-trained model are not independent draws of the variant (between two pre-training starts the classroom span
   column moved by up to 4.7 F1 points, more than between restarts: BENCHMARKS.md): the pre-training seeds with
   replacement, then each drawn seed's restarts with replacement; the variant's round score is the mean over the
   drawn seeds of their restarts' mean (a cluster bootstrap). With two seeds its interval reaches each seed's own
   result, so a finding is reproduced only when it holds from either pre-training start;
2. resample the dev examples with replacement, ONE draw shared by both variants (they were scored on the same
   examples, so a hard example counts against both: a paired bootstrap over examples);
3. a replicate's score on the resampled examples is the task's metric of them (the mean of the per-example values;
   for tagging, entity F1 = 2tp / (2tp + fp + fn) of the summed counts); a variant's score is the mean over its
   resampled replicates (step 1); the round's difference is A - B.
With one pre-training seed per variant the interval holds the fine-tuning restarts' and the dev set's uncertainty
only, not the spread between pre-training runs; the judged entry says how many seeds each row had.
The 95% interval is the 2.5th and 97.5th percentiles of the rounds' differences; the difference itself is the
mean over replicates of A minus that of B on the full dev set. When a replicate has no per-example values (a
features run, a metric such as MCC that is not a mean over examples) step 2 is skipped for the whole comparison and
only the replicates are resampled ("resampled": "replicates"). With a single replicate per variant and no
per-example values there is nothing to resample: the verdict is `inconclusive`.

Verdict (exactly one of VERDICTS), with `direction` +1 when the paper says A > B:
- "reproduced": the interval lies entirely on the paper's side of 0;
- "not reproduced": entirely on the other side;
- "inconclusive": it contains 0.

The floor (`above_floor`), for an accuracy column whose fine-tuning recorded its dev set's majority-class rate
(eval.json data.dev_majority_accuracy): each row's score minus that rate, with the same bootstrap (its replicates,
and its dev examples when it has per-example values; the rate itself is held fixed). A row "learned" the task when
the interval lies above 0. When neither row did, the entry says so in its note: the verdict is still the
interval's, but a comparison of two rows at chance cannot show a finding (the classroom Table 5's next-sentence
column: every row at 50%, BENCHMARKS.md). What it does not correct for: a fine-tuning replicate's score is its best
epoch chosen on this same dev set, which lifts a model at chance above the floor (about a point for 5 epochs on
3,428 pairs: the classroom No NSP row on bbc-story, 51.2%, counts as "learned" by this check), so the check catches
rows clearly at chance and lets borderline ones through.
"""
from dataclasses import dataclass

import numpy as np

VERDICTS = ("reproduced", "not reproduced", "inconclusive")
N_BOOT = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Contrast:
    """One finding of the paper as a comparison of two rows on one column: `better` should score above `worse`."""
    statement: str  # the paper's finding in words
    better: str  # variant name
    worse: str  # variant name
    column: str  # the Evaluation name (a table column)
    paper: tuple = None  # the paper's own numbers (better, worse) on its corresponding task, e.g. (88.5, 77.8)
    paper_task: str = ""  # which of the paper's tasks those numbers are from


def metric_of(values: np.ndarray) -> float:
    """The metric of per-example values: their mean, or entity F1 of summed [tp, fp, fn] rows."""
    if values.ndim == 2:
        tp, fp, fn = values.sum(axis=0)
        return float(2 * tp / (2 * tp + fp + fn)) if (2 * tp + fp + fn) else 0.0
    return float(values.mean()) if len(values) else 0.0


def _per_example_metric(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The metric of each row of example indices `idx` (rounds x examples) on `values` (examples[, 3])."""
    picked = values[idx]
    if values.ndim == 2:
        tp, fp, fn = picked[..., 0].sum(1), picked[..., 1].sum(1), picked[..., 2].sum(1)
        den = 2 * tp + fp + fn
        return np.where(den > 0, 2 * tp / np.maximum(den, 1), 0.0)
    return picked.mean(1)


def pretraining_seeds(reps: list) -> list:
    """The pre-training seed of each replicate (its third element; 0 when a replicate has none)."""
    return [r[2] if len(r) > 2 else 0 for r in reps]


def seed_means(reps: list) -> dict:
    """{pre-training seed: the mean score of its replicates} (seeds as strings, for JSON)."""
    seeds = pretraining_seeds(reps)
    return {str(g): float(np.mean([r[0] for r, k in zip(reps, seeds) if k == g])) for g in dict.fromkeys(seeds)}


def _resampled_means(scores: np.ndarray, seeds: list, rng) -> np.ndarray:
    """A variant's score in each round (module docstring, step 1). `scores`: rounds x replicates, each replicate's
    score on the round's dev examples; `seeds`: each replicate's pre-training seed. Returns (rounds,)."""
    n_boot = scores.shape[0]
    groups = [np.flatnonzero(np.asarray(seeds) == g) for g in dict.fromkeys(seeds)]
    # per seed: its restarts drawn with replacement, their mean -> rounds x seeds
    per_seed = np.stack([np.take_along_axis(scores[:, g], rng.integers(0, len(g), size=(n_boot, len(g))), 1).mean(1)
                         for g in groups], axis=1)
    if len(groups) == 1:  # no seed draw: one seed's rounds use the generator exactly as the one-stage bootstrap did
        return per_seed[:, 0]
    return np.take_along_axis(per_seed, rng.integers(0, len(groups), size=(n_boot, len(groups))), 1).mean(1)


def bootstrap_difference(a: list, b: list, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """A minus B with its bootstrap interval (module docstring). `a`, `b`: replicates as (score, per-example values
    or None[, pre-training seed]). Returns {difference, low, high, resampled ("replicates+examples" | "replicates"
    | "nothing"), n_a, n_b, seeds_a, seeds_b (pre-training seeds), n_examples, a_mean, b_mean}."""
    if not a or not b:
        raise ValueError("both variants need at least one replicate")
    a_mean = float(np.mean([r[0] for r in a]))
    b_mean = float(np.mean([r[0] for r in b]))
    ga, gb = pretraining_seeds(a), pretraining_seeds(b)
    out = {"difference": a_mean - b_mean, "a_mean": a_mean, "b_mean": b_mean, "n_a": len(a), "n_b": len(b),
           "seeds_a": len(set(ga)), "seeds_b": len(set(gb))}
    rng = np.random.default_rng(seed)
    per = [r[1] for r in a + b]
    lengths = {len(p) for p in per if p is not None}
    if all(p is not None for p in per) and len(lengths) == 1:
        n = lengths.pop()
        idx = rng.integers(0, n, size=(n_boot, n))  # shared by both variants
        sa = np.stack([_per_example_metric(np.asarray(r[1], dtype=float), idx) for r in a], axis=1)  # rounds x replicates
        sb = np.stack([_per_example_metric(np.asarray(r[1], dtype=float), idx) for r in b], axis=1)
        diffs = _resampled_means(sa, ga, rng) - _resampled_means(sb, gb, rng)
        out.update(resampled="replicates+examples", n_examples=n)
    elif len(a) > 1 or len(b) > 1:
        sa = np.tile(np.array([r[0] for r in a]), (n_boot, 1))
        sb = np.tile(np.array([r[0] for r in b]), (n_boot, 1))
        diffs = _resampled_means(sa, ga, rng) - _resampled_means(sb, gb, rng)
        out.update(resampled="replicates", n_examples=None)
    else:
        out.update(resampled="nothing", n_examples=None, low=None, high=None)
        return out
    tail = (1 - LEVEL) / 2 * 100
    out["low"], out["high"] = float(np.percentile(diffs, tail)), float(np.percentile(diffs, 100 - tail))
    return out


def above_floor(reps: list, floor: float, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """One row's score minus `floor` with its bootstrap interval: {difference, low, high, learned} (learned: the
    interval lies above 0; None without anything to resample). `reps`: [(score, per-example values or None)].
    The floor is a row that scores `floor` on every dev example, compared with `bootstrap_difference`."""
    per = reps[0][1]
    fixed = [(floor, [floor] * len(per) if per is not None else None)]
    r = bootstrap_difference(reps, fixed, n_boot, seed)
    return {"difference": r["difference"], "low": r["low"], "high": r["high"],
            "learned": None if r["low"] is None else r["low"] > 0}


def verdict(low, high, direction: int = 1) -> str:
    """'reproduced' when [low, high] lies entirely on the paper's side of 0 (direction +1: A > B), 'not reproduced'
    when entirely on the other side, else (or without an interval) 'inconclusive'."""
    if low is None or high is None:
        return "inconclusive"
    lo, hi = (low, high) if direction > 0 else (-high, -low)
    if lo > 0:
        return "reproduced"
    if hi < 0:
        return "not reproduced"
    return "inconclusive"


def judge(contrast: Contrast, replicates: dict, n_boot: int = N_BOOT, seed: int = 0, floor: float = None,
          incomplete: dict = None) -> dict:
    """One finding's JSON entry: statement, verdict, our two numbers and their difference with its 95% interval,
    the paper's numbers beside them. `replicates`: {(variant, column): [(score, per-example values or None)]}.
    `floor`: the column's majority-class accuracy, when known: the entry then has "floor" (each row against it,
    `above_floor`) and, when neither row is above it, a note that says so.
    `incomplete`: {(variant, column): (jobs finished, jobs planned)} for the cells some of whose jobs have not
    finished (a cancelled study, a seed still to run, a fine-tuning stopped after one of its restarts): a finding
    on such a cell is `inconclusive` whatever its interval, with the numbers so far and a note saying what is
    missing; a partial cell's interval would judge fewer replicates than the study planned."""
    a, b = replicates.get((contrast.better, contrast.column)), replicates.get((contrast.worse, contrast.column))
    entry = {"statement": contrast.statement, "better": contrast.better, "worse": contrast.worse,
             "column": contrast.column,
             "paper": ({"task": contrast.paper_task, contrast.better: contrast.paper[0], contrast.worse: contrast.paper[1],
                        "difference": round(contrast.paper[0] - contrast.paper[1], 2)} if contrast.paper else None)}
    if not a or not b:
        return {**entry, "verdict": "inconclusive", "ours": None, "note": "not enough results yet"}
    r = bootstrap_difference(a, b, n_boot, seed)
    ours = {contrast.better: r["a_mean"], contrast.worse: r["b_mean"], "difference": r["difference"],
            "interval_95": [r["low"], r["high"]] if r["low"] is not None else None, "resampled": r["resampled"],
            "replicates": [r["n_a"], r["n_b"]], "pretraining_seeds": [r["seeds_a"], r["seeds_b"]],
            "dev_examples": r["n_examples"]}
    if max(r["seeds_a"], r["seeds_b"]) > 1:  # each pre-training seed's own mean: is the gap there from every start?
        ours["per_seed"] = {contrast.better: seed_means(a), contrast.worse: seed_means(b)}
    note = "one replicate each and no per-example scores: no uncertainty to compare against" if r["resampled"] == "nothing" else ""
    if floor is not None:
        rows = {contrast.better: above_floor(a, floor, n_boot, seed), contrast.worse: above_floor(b, floor, n_boot, seed)}
        entry["floor"] = {"majority_accuracy": floor}
        for k, x in rows.items():
            iv = [x["low"], x["high"]] if x["low"] is not None else None
            entry["floor"][k] = {"difference": x["difference"], "interval_95": iv, "learned": x["learned"]}
        if all(x["learned"] is False for x in rows.values()):
            note = (f"neither row is above the majority-class rate ({100 * floor:.1f}%) beyond its uncertainty: the task "
                    "was not learned here, so this comparison cannot show the finding")
    waiting = {k: v for k in ((contrast.better, contrast.column), (contrast.worse, contrast.column))
               if (v := (incomplete or {}).get(k))}
    if waiting:
        note = "incomplete, so not judged yet: " + "; ".join(f"{k[0]} has {done} of its {planned} jobs finished"
                                                            for k, (done, planned) in waiting.items())
        return {**entry, "verdict": "inconclusive", "ours": ours, "note": note, "incomplete": True}
    return {**entry, "verdict": verdict(r["low"], r["high"]), "ours": ours, "note": note}


def describe_entry(entry: dict) -> str:
    """One line of numbers for a judged finding: ours (percent), the difference with its interval, the paper's."""
    ours = entry.get("ours")
    text = entry.get("note") or "no results yet"
    if ours:
        iv = ours["interval_95"]
        text = (f"{100 * ours[entry['better']]:.1f} vs {100 * ours[entry['worse']]:.1f}, difference "
                f"{100 * ours['difference']:+.1f}" + (f" [{100 * iv[0]:+.1f}, {100 * iv[1]:+.1f}]" if iv else " (no interval)"))
        seeds = ours.get("pretraining_seeds") or [1, 1]
        text += (f"; pre-training seeds {seeds[0]} and {seeds[1]}" if max(seeds) > 1
                 else "; one pre-training seed (the interval leaves out the spread between pre-training runs)")
        per = ours.get("per_seed") or {}
        a, b = per.get(entry["better"]) or {}, per.get(entry["worse"]) or {}
        if len(a) > 1 and a.keys() == b.keys():
            text += " (difference by seed: " + ", ".join(f"{k}: {100 * (a[k] - b[k]):+.1f}" for k in a) + ")"
    paper = entry.get("paper")
    if paper:
        text += f"; paper ({paper['task']}): {paper[entry['better']]} vs {paper[entry['worse']]}"
    if ours and entry.get("note"):
        text += f"; {entry['note']}"
    return text
