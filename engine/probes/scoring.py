"""The classroom probe set (its sentences and pairs: engine.probe_set) scored: `probe_set_accuracy`, one model's
cloze top-1 / top-k accuracy per section (everyday facts, grammar, BBC-news-flavoured) and its true/false
next-sentence accuracy, each part batched in one forward pass; `compare_probe_set`, several models side by side
(one row per model and per item)."""
from engine.errors import EngineError
from engine.objectives import MLM_HEAD, NSP_HEAD
from engine.probe_set import CLOZE_SECTION_OF, PROBE_SET
from engine.probes.inputs import MASK_RE, forward_ids
from engine.probes.model_info import heads, model_name
from engine.tasks.batching import pad_batch


def probe_set_accuracy(bundle, probe_set: dict = None, top_k: int = 5) -> dict:
    """Score the built-in probe set: cloze top-1 / top-k accuracy (an item counts when an acceptable answer is
    the best / among the best k predictions; items whose answers are not single WordPieces in this vocabulary
    are skipped) and NSP accuracy (IsNext when P(IsNext) > 0.5). A part is None when the model lacks its head.
    Returns {"cloze_top1", "cloze_topk", "cloze_n", "nsp_acc", "nsp_n", "top_k", "by_section" ({section: {"n",
    "top1", "topk"}} for the cloze sections scored), "items" (each with its "section"), "notes"}."""
    ps = probe_set or PROBE_SET
    has_mlm, has_nsp = MLM_HEAD in heads(bundle), NSP_HEAD in heads(bundle)
    if not has_mlm and not has_nsp:
        raise EngineError(f"{model_name(bundle)} has no MLM head and no NSP head, so the probe set cannot be scored; "
                          "use a checkpoint pre-trained with mlm or mlm+nsp")
    tok = bundle.tokenizer
    items, notes = [], []
    res = {"cloze_top1": None, "cloze_topk": None, "cloze_n": 0, "nsp_acc": None, "nsp_n": 0, "top_k": top_k,
           "by_section": {}}
    limit = int(bundle.config.max_position_embeddings)
    if has_mlm:
        hit1 = hitk = 0
        kept, skipped = [], 0
        for sentence, answers in ps.get("cloze", []):
            norm = [x.lower() if tok.lowercase else x for x in answers]
            if any(tok.token_to_id(x) is not None for x in norm) and MASK_RE.search(sentence):
                kept.append((MASK_RE.sub("[MASK]", sentence), answers, norm))
            else:
                skipped += 1
        if kept:
            encs = tok.encode_batch([s for s, _, _ in kept], max_length=limit)
            ids, tt, am = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T) each
            is_mask = ids == tok.mask_id  # (B, T)
            first = is_mask & (is_mask.cumsum(dim=1) == 1)  # the first [MASK] of each row
            keep_rows = first.any(dim=1)
            if bundle.config.causal:
                first = first.roll(-1, dims=1)  # LTR: read position p-1, which predicts token p
            out = forward_ids(bundle, ids, tt, am, mlm_positions=first)
            probs = out.mlm_logits.float().softmax(dim=-1)  # (N, V), one row per sentence that kept its [MASK]
            top_p, top_i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (N, k)
            r = 0
            for (sentence, answers, norm), has in zip(kept, keep_rows.tolist()):
                if not has:
                    skipped += 1
                    continue
                words = [tok.id_to_token(int(i)) for i in top_i[r]]
                h1, hk = words[0] in norm, any(w in norm for w in words)
                hit1, hitk = hit1 + h1, hitk + hk
                items.append({"kind": "cloze", "section": CLOZE_SECTION_OF.get(sentence, "custom"), "input": sentence,
                              "expected": "/".join(answers), "predicted": words[0],
                              "prob": float(top_p[r, 0]), "correct": bool(h1), f"in_top{top_k}": bool(hk)})
                r += 1
        n = sum(1 for it in items if it["kind"] == "cloze")
        if skipped:
            notes.append(f"{skipped} cloze item(s) skipped: their answers are not whole words in this vocabulary")
        res.update(cloze_n=n, cloze_top1=hit1 / n if n else None, cloze_topk=hitk / n if n else None)
        for it in items:
            sec = res["by_section"].setdefault(it["section"], {"n": 0, "top1": 0.0, "topk": 0.0})
            sec["n"] += 1
            sec["top1"] += float(it["correct"])
            sec["topk"] += float(it[f"in_top{top_k}"])
        for sec in res["by_section"].values():
            sec["top1"], sec["topk"] = sec["top1"] / sec["n"], sec["topk"] / sec["n"]
    else:
        notes.append(f"{model_name(bundle)} has no MLM head: cloze items not scored")
    if has_nsp:
        pairs = ps.get("nsp", [])
        correct = 0
        if pairs:
            encs = tok.encode_batch([(a, b) for a, b, _ in pairs], max_length=limit)
            ids, tt, am = pad_batch([(e.ids, e.type_ids) for e in encs], tok.pad_id)  # (B, T) each
            p_next = forward_ids(bundle, ids, tt, am).nsp_logits.float().softmax(dim=-1)[:, 0].tolist()  # (B,) P(IsNext)
            for (a, b, is_next), p in zip(pairs, p_next):
                ok = (p > 0.5) == bool(is_next)
                correct += ok
                items.append({"kind": "nsp", "section": "next sentence", "input": f"{a} ||| {b}", "expected": "IsNext" if is_next else "NotNext",
                              "predicted": "IsNext" if p > 0.5 else "NotNext", "prob": p, "correct": bool(ok)})
        res.update(nsp_n=len(pairs), nsp_acc=correct / len(pairs) if pairs else None)
    else:
        notes.append(f"{model_name(bundle)} has no NSP head: next-sentence pairs not scored")
    res["items"], res["notes"] = items, notes
    return res


def compare_probe_set(bundles, top_k: int = 5, probe_set: dict = None) -> dict:
    """The probe set scored on several models side by side (the Probe page's comparison).

    `bundles`: a list of loaded models, or of (name, bundle) pairs. Returns {"names", "summary" (one row per
    model: cloze top-1/top-k and n, each section's top-1, next-sentence accuracy and n; None where the model
    cannot answer), "cloze" (one row per cloze item: section, sentence, answers, then each model's best word
    with a check mark when it is acceptable; "-" where the model skipped the item), "nsp" (one row per pair:
    A, B, the truth, each model's P(IsNext)), "notes" ({name: [notes or the error that model gave]})}.
    Two models with different vocabularies may skip different cloze items: compare their n as well."""
    pairs = [b if isinstance(b, (tuple, list)) else (model_name(b), b) for b in bundles]
    if not pairs:
        raise EngineError("pick at least one model to score on the probe set")
    names, seen = [], {}
    for name, _ in pairs:  # two checkpoints may share a short name
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    ps = probe_set or PROBE_SET
    results, notes = {}, {}
    for name, (_, bundle) in zip(names, pairs):
        try:
            results[name] = probe_set_accuracy(bundle, probe_set=ps, top_k=top_k)
            notes[name] = list(results[name]["notes"])
        except EngineError as e:
            results[name], notes[name] = None, [str(e)]
    sections = list(dict.fromkeys([CLOZE_SECTION_OF.get(s, "custom") for s, _ in ps.get("cloze", [])]))
    summary = []
    for name in names:
        r = results[name] or {}
        row = {"model": name, "cloze top-1": r.get("cloze_top1"), f"cloze top-{top_k}": r.get("cloze_topk"),
               "cloze items": r.get("cloze_n", 0)}
        for sec in sections:
            row[f"{sec} top-1"] = ((r.get("by_section") or {}).get(sec) or {}).get("top1")
        row["next sentence"], row["pairs"] = r.get("nsp_acc"), r.get("nsp_n", 0)
        summary.append(row)
    by_input = {name: {(it["kind"], it["input"]): it for it in (results[name] or {}).get("items", [])} for name in names}
    cloze = []
    for sentence, answers in ps.get("cloze", []):
        row = {"section": CLOZE_SECTION_OF.get(sentence, "custom"), "sentence": sentence, "answers": " / ".join(answers)}
        for name in names:
            it = by_input[name].get(("cloze", MASK_RE.sub("[MASK]", sentence)))
            row[name] = "-" if it is None else f"{it['predicted']} {'✓' if it['correct'] else '✗'}"
        cloze.append(row)
    nsp = []
    for a, b, is_next in ps.get("nsp", []):
        row = {"A": a, "B": b, "truth": "IsNext" if is_next else "NotNext"}
        for name in names:
            it = by_input[name].get(("nsp", f"{a} ||| {b}"))
            row[name] = None if it is None else round(it["prob"], 3)
        nsp.append(row)
    return {"names": names, "summary": summary, "cloze": cloze, "nsp": nsp, "notes": notes}
