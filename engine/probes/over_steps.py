"""The probes over the checkpoints of one run (training dynamics): `checkpoint_steps` lists a run's complete
checkpoints, `probe_checkpoints` runs fill-mask, P(IsNext) and the probe set on each, `mask_probs_over_steps` follows
the probability of the words a [MASK] is filled with from step to step."""
from pathlib import Path

from engine.errors import EngineError, quoted
from engine.probes.predictions import fill_mask, next_sentence
from engine.probes.scoring import probe_set_accuracy


def checkpoint_steps(run_dir) -> list:
    """[(step, checkpoint path)] of a run's complete checkpoints, by step."""
    from engine.runs import checkpoint_step, list_checkpoints
    p = Path(run_dir)
    if not p.is_dir():
        raise EngineError(f"run folder {quoted(run_dir)} does not exist; pick a run under the runs folder")
    return [(checkpoint_step(c), c) for c in list_checkpoints(p)]


def probe_checkpoints(checkpoints, text: str = None, pair=None, top_k: int = 5, probe_set: bool = False,
                      loader=None) -> list:
    """Run the probes on each checkpoint: `checkpoints` is a run folder or a list of checkpoint paths (or
    (step, path) pairs). `text` with [MASK] -> fill_mask; `pair` (a, b) -> P(IsNext); `probe_set` -> accuracy.
    A probe the checkpoint cannot answer (no head) gives None and an entry in "errors".
    Returns one dict per checkpoint: {"step", "path", "fill", "p_isnext", "probe_set", "errors"}."""
    if isinstance(checkpoints, (str, Path)):
        checkpoints = checkpoint_steps(checkpoints)
        if not checkpoints:
            raise EngineError("that run has no complete checkpoint yet; wait for its first save")
    if loader is None:
        from engine.checkpoint import load as loader
    from engine.runs import checkpoint_step
    rows = []
    for item in checkpoints:
        step, path = item if isinstance(item, (tuple, list)) else (checkpoint_step(item), item)
        bundle = loader(str(path))
        row = {"step": step, "path": str(path), "fill": None, "p_isnext": None, "probe_set": None, "errors": []}
        if text:
            try:
                row["fill"] = fill_mask(bundle, text, top_k=top_k)
            except EngineError as e:
                row["errors"].append(str(e))
        if pair and pair[0] and pair[1]:
            try:
                row["p_isnext"] = float(next_sentence(bundle, pair[0], pair[1]))
            except EngineError as e:
                row["errors"].append(str(e))
        if probe_set:
            try:
                row["probe_set"] = probe_set_accuracy(bundle, top_k=top_k)
            except EngineError as e:
                row["errors"].append(str(e))
        rows.append(row)
    return rows


def mask_probs_over_steps(rows: list, mask_index: int = 0, max_tokens: int = 8) -> dict:
    """{token: [prob at each row]} for the tokens that reach any checkpoint's top-k at mask `mask_index`
    (the most probable at the last step first), read from each step's full distribution."""
    usable = [r for r in rows if r.get("fill") is not None and len(r["fill"]) > mask_index]
    if not usable:
        return {}
    best = {}
    for r in usable:
        for tok, p in r["fill"][mask_index]:
            best[tok] = max(best.get(tok, 0.0), p)
    last = {t: p for t, p in usable[-1]["fill"][mask_index]}
    chosen = sorted(best, key=lambda t: (-last.get(t, 0.0), -best[t]))[:max_tokens]
    out = {}
    for tok in chosen:
        series = []
        for r in rows:
            f = r.get("fill")
            if f is None or len(f) <= mask_index:
                series.append(None)
                continue
            tid = f.token_to_id(tok) if f.token_to_id else None
            series.append(float(f.probs[mask_index, tid]) if tid is not None else None)
        out[tok] = series
    return out
