"""Head roles across training: what each attention head looks at, at every checkpoint of a run, and when its role
settles; beside what Clark et al. 2019 ("What Does BERT Look At?") found on BERT-base.

L = layers, A = heads per layer, T = WordPieces.

Over a fixed probe set (`probe_texts`: the classroom probe set's true next-sentence pairs, [CLS] A [SEP] B [SEP], the
input format Clark et al. used), every head's share of attention to [CLS], to [SEP], to punctuation, to the previous
and to the next token and to itself, and its entropy, are engine.analysis.head_statistics_from_attention's (Clark et
al.'s statistics, averaged over every query token); this module adds:
- `word`: the share to the other WordPieces of the query's own word, averaged over the pieces of words of several
  pieces (NaN when the probe set has none in this vocabulary);
- `breadth`: the entropy over that of uniform attention over the same keys (1 = as broad as it gets);
- `role`: the target with at least ROLE_SHARE of the head's attention ("sep", "next", ...); else "broad" when
  breadth >= BROAD, else "focused" (on something that is not one of these targets);
- over checkpoints, `settled_step`: the first step from which the head keeps its final role.
`findings(table)` sets Clark et al.'s findings on BERT-base (12 layers, 12 heads) beside ours, layer ranges read at the
same relative depth.
The notebook entry point is `engine.head_role_table` and the CLI `python -m engine layers --heads` (engine.layers).
"""
import math
import time

import numpy as np

from engine.errors import EngineError

TARGETS = ("cls", "sep", "punct", "prev", "next", "self", "word")  # what a role can be named after
ROLE_LABELS = {"cls": "[CLS]", "sep": "[SEP]", "punct": "punctuation", "prev": "previous token", "next": "next token",
               "self": "itself", "word": "same word", "broad": "broad", "focused": "focused"}
ROLE_SHARE = 0.5  # a head is named after a target that gets at least half its attention
BROAD = 0.75  # ... else broad when its entropy is at least this share of uniform attention's
COLUMNS = ("step", "layer", "head", *TARGETS, "entropy", "breadth", "role")


def probe_texts() -> list:
    """The fixed probe set: the classroom probe set's (A, B) pairs where B follows A."""
    from engine.probe_set import NSP_PAIRS
    return [(a, b) for a, b, follows in NSP_PAIRS if follows]


def word_share_sums(tokens, att: np.ndarray) -> tuple:
    """((L, A) summed share of attention from each piece of a several-piece word to its other pieces, number of
    such pieces)."""
    from engine.analysis import word_spans
    att = np.asarray(att, dtype=np.float64)
    total, n = np.zeros(att.shape[:2]), 0
    for _, idx in word_spans(list(tokens)):
        if len(idx) < 2:
            continue
        for i in idx:
            others = [j for j in idx if j != i]
            total += att[:, :, i, others].sum(axis=-1)
            n += 1
    return total, n


def role_of(row) -> str:
    """The role of a head from its shares and breadth (module docstring)."""
    shares = {k: row[k] for k in TARGETS if row.get(k) is not None and not math.isnan(row[k])}
    if shares:
        top = max(shares, key=shares.get)
        if shares[top] >= ROLE_SHARE:
            return top
    return "broad" if row["breadth"] >= BROAD else "focused"


def table_from_attention(items, step=None):
    """`items`: (tokens, att (L, A, T, T), special or None) per text -> DataFrame with COLUMNS, one row per head."""
    from engine.analysis import head_statistics_from_attention
    items = list(items)
    df = head_statistics_from_attention(items)
    word, n_word = 0.0, 0
    n_tok, uniform = 0, 0.0
    for tokens, att, _ in items:
        s, n = word_share_sums(tokens, att)
        word, n_word = word + s, n_word + n
        T = np.asarray(att).shape[-1]
        n_tok, uniform = n_tok + T, uniform + T * math.log(T)
    L, A = np.asarray(items[0][1]).shape[:2]
    shares = (word / n_word) if n_word else np.full((L, A), np.nan)
    df["word"] = [float(shares[l - 1, h - 1]) for l, h in zip(df["layer"], df["head"])]
    df["breadth"] = df["entropy"] / (uniform / n_tok) if uniform > 0 else 0.0
    df["step"] = step
    df["role"] = [role_of(r) for r in df.to_dict("records")]
    return df[list(COLUMNS)]


def head_table(bundle, texts=None, step=None):
    """The role table of one model over `texts` (default the probe set): one row per (layer, head), 1-based."""
    from engine.probes.attention_maps import attention
    texts = list(texts) if texts else probe_texts()
    items = []
    for t in texts:
        a, b = (t, None) if isinstance(t, str) else (t[0], t[1])
        tokens, att = attention(bundle, a, b)
        items.append((list(tokens), att, tokens.special))
    if not items:
        raise EngineError("no texts to read head roles from; give at least one sentence")
    return table_from_attention(items, step)


def settled(table) -> list:
    """Per head: {"layer", "head", "role" (at the last step), "settled_step"}: the first step from which the head
    keeps that role through the last checkpoint."""
    out = []
    for (l, h), g in table.sort_values("step", na_position="first").groupby(["layer", "head"], sort=True):
        roles, steps = list(g["role"]), list(g["step"])
        k = len(roles) - 1
        while k > 0 and roles[k - 1] == roles[-1]:
            k -= 1
        step = steps[k]
        out.append({"layer": int(l), "head": int(h), "role": roles[-1],
                    "settled_step": None if step is None or (isinstance(step, float) and math.isnan(step)) else int(step)})
    return out


def depth_range(L: int, lo12: int, hi12: int) -> tuple:
    """Layers (1-based, inclusive) at the relative depth of BERT-base's layers lo12..hi12 (of 12)."""
    lo = max(1, min(L, round(L * lo12 / 12)))
    return lo, max(lo, min(L, round(L * hi12 / 12)))


def _mean(table, col, lo, hi) -> float:
    part = table[(table["layer"] >= lo) & (table["layer"] <= hi)][col]
    return float(part.mean()) if len(part) else float("nan")


def heads_count(layers: list, which: str) -> str:
    """'2 next-token heads (layers 1, 3)'; '1 previous-token head (layer 2)'; '0 next-token heads'."""
    if not layers:
        return f"0 {which}-token heads"
    one = len(layers) == 1
    return f"{len(layers)} {which}-token head{'' if one else 's'} (layer{'' if one else 's'} {', '.join(map(str, layers))})"


def findings(table) -> list:
    """Clark et al.'s findings on BERT-base beside this model's (the last step of `table`): [{"finding", "bert_base",
    "ours"}]. Percentages are shares of attention averaged over the heads of the layers named."""
    last = table[table["step"].isna()] if table["step"].isna().all() else table[table["step"] == table["step"].max()]
    L = int(last["layer"].max())
    third = max(1, round(L / 3))
    s_lo, s_hi = depth_range(L, 6, 10)
    pct = lambda x: "n/a" if math.isnan(x) else f"{100 * x:.0f}%"
    early, late = (1, third), (L - third + 1, L)
    nxt = sorted(int(l) for l in last[last["role"] == "next"]["layer"])
    prv = sorted(int(l) for l in last[last["role"] == "prev"]["layer"])
    return [
        {"finding": "[SEP] in the middle layers", "bert_base": "over half of the attention in layers 6-10 goes to [SEP]",
         "ours": f"{pct(_mean(last, 'sep', s_lo, s_hi))} to [SEP] in layers {s_lo}-{s_hi} (of {L})"},
        {"finding": "[CLS] early", "bert_base": "heads in the early layers attend much to [CLS]",
         "ours": f"{pct(_mean(last, 'cls', *early))} to [CLS] in layers {early[0]}-{early[1]}, {pct(_mean(last, 'cls', third + 1, L))} later"},
        {"finding": "punctuation late", "bert_base": "heads in the last layers attend much to periods and commas",
         "ours": f"{pct(_mean(last, 'punct', *late))} to punctuation in layers {late[0]}-{late[1]}, {pct(_mean(last, 'punct', 1, late[0] - 1))} before"},
        {"finding": "previous / next token heads", "bert_base": "some heads put most of their attention on the previous "
         "or the next token, most of them in the early layers",
         "ours": f"{heads_count(prv, 'previous')}, {heads_count(nxt, 'next')}"},
        {"finding": "little on the token itself", "bert_base": "most heads put little attention on the current token",
         "ours": f"median share to itself {pct(float(last['self'].median()))}"},
        {"finding": "broad heads early", "bert_base": "some heads, mostly in the lower layers, attend very broadly",
         "ours": f"breadth {pct(_mean(last, 'breadth', *early))} of uniform in layers {early[0]}-{early[1]}, "
                 f"{pct(_mean(last, 'breadth', *late))} in layers {late[0]}-{late[1]}"},
    ]


def roles_over_models(models, model_name: str, texts=None, device="auto", on_step=None) -> dict:
    """Head roles of every (step, path) in `models` (engine.layers.model_list): the result object of
    `python -m engine layers --heads` ({"analysis": "heads", "heads": rows, "settled", "findings", ...})."""
    import pandas as pd
    from engine.checkpoint import load
    from engine.device import resolve_device
    t0, dev = time.time(), resolve_device(device)
    tables, result = [], {"kind": "layers", "analysis": "heads", "model": model_name,
                          "checkpoints": [s for s, _ in models] if models[0][0] is not None else None,
                          "texts": len(list(texts) if texts else probe_texts())}
    for k, (step, path) in enumerate(models, 1):
        tables.append(head_table(load(path, device=dev), texts, step))
        table = pd.concat(tables, ignore_index=True)
        result.update(heads=records_of(table), settled=settled(table), findings=findings(table),
                      seconds=round(time.time() - t0, 2))
        if on_step is not None:
            on_step(result, k, len(models))
    return result


def records_of(table) -> list:
    """Rows as JSON-ready dicts (NaN -> None)."""
    out = []
    for r in table.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return out


def frame(result: dict):
    """The `heads` rows of a result object as a DataFrame with COLUMNS plus `settled_step`."""
    import pandas as pd
    df = pd.DataFrame(result.get("heads") or [], columns=list(COLUMNS))
    settle = {(s["layer"], s["head"]): s["settled_step"] for s in result.get("settled") or []}
    df["settled_step"] = [settle.get((l, h)) for l, h in zip(df["layer"], df["head"])]
    return df


def summary_lines(result: dict) -> list:
    """A few readable lines of a heads result (the CLI without --json)."""
    lines = [f"head roles of {result['model']} over {result['texts']} probe texts"
             + (f", checkpoints {', '.join(map(str, result['checkpoints']))}" if result.get("checkpoints") else "")]
    for s in result["settled"]:
        when = "" if s["settled_step"] is None else f" (settled at step {s['settled_step']})"
        lines.append(f"  layer {s['layer']} head {s['head']}: {ROLE_LABELS[s['role']]}{when}")
    lines += [f"{f['finding']}: BERT-base (Clark et al. 2019): {f['bert_base']}; here: {f['ours']}" for f in result["findings"]]
    return lines
