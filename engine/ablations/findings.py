"""The comparisons a study's finding check is made of (each built-in study in `engine.ablations.paper` states its
claims with these): mean scores per variant and column, and "is variant a better than variant b".

A check result is {"claim": str, "holds": True | False | None, "detail": str}; None means not enough results
yet, or no signal to compare. A check is the direction of the means (A ≥ B), never a size and never a verdict:
whether a finding is reproduced is decided by engine.ablations.verdict, beyond the uncertainty.
"""

NOT_YET = {"holds": None, "detail": "not enough results yet"}


def means(summary, step="last") -> dict:
    """{variant: {column: mean}}; for Figure 5 (`step`="last") the last evaluated step of each column."""
    out = {}
    if summary is None or len(summary) == 0:
        return out
    for _, r in summary.iterrows():
        if r["step"] is not None and step == "last":
            prev = out.get(r["variant"], {}).get(("_step", r["column"]))
            if prev is not None and prev > r["step"]:
                continue
            out.setdefault(r["variant"], {})[("_step", r["column"])] = r["step"]
        out.setdefault(r["variant"], {})[r["column"]] = float(r["mean"])
    return {v: {c: m for c, m in d.items() if not isinstance(c, tuple)} for v, d in out.items()}


def compare(means: dict, a: str, b: str, cols: list, every: bool, strict: bool) -> dict:
    """Is variant a better than b (on every column, or on the average)?"""
    common = [c for c in cols if c in means.get(a, {}) and c in means.get(b, {})]
    if not common:
        return dict(NOT_YET)
    # a task on which both scored 0 (e.g. entity F1 of a model too small to find any entity) says nothing
    silent = [c for c in common if abs(means[a][c]) < 1e-9 and abs(means[b][c]) < 1e-9]
    common = [c for c in common if c not in silent]
    if not common:
        return {"holds": None, "detail": "both score 0 on every task: no signal to compare"}
    diffs = {c: means[a][c] - means[b][c] for c in common}
    ok = (lambda d: d > 0) if strict else (lambda d: d >= 0)
    res = all(ok(d) for d in diffs.values()) if every else ok(sum(diffs.values()) / len(diffs))
    detail = "; ".join(f"{c}: {100 * means[a][c]:.1f} vs {100 * means[b][c]:.1f}" for c in common)
    if silent:
        detail += "; ignored (both 0): " + ", ".join(silent)
    return {"holds": bool(res), "detail": detail}


def claim(text: str, result: dict) -> dict:
    """One check: the claim in words with its result ({holds, detail})."""
    return {"claim": text, **result}
