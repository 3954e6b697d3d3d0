"""What a probe-set score should be compared with, and what it means (Probe page, notebooks).

- chance: a uniform guess over the vocabulary for the cloze items (top-1 1/V, top-k k/V) and a coin flip for the
  next-sentence pairs (0.5; the built-in set is balanced, 15 IsNext / 15 NotNext).
- the unigram baseline: a model that ignores the sentence and always predicts the k most frequent words of its
  training corpus. Every masked LM passes through this stage first (predicting "the", ",", "."), so a score at
  the unigram baseline means "not using the context yet". For next-sentence pairs the context-free answer is
  always "IsNext" (the majority of the probe set, 0.5).
- `reading(scores, baselines)`: one sentence per part saying where the model stands and what to expect, with
  the classroom figures of BENCHMARKS.md.
Words are counted lowercased, split into letters/digits runs and single punctuation marks (how the probe set is
written); only words that are whole tokens of the model's vocabulary can be predicted, so only those count.
"""
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

_WORD = re.compile(r"\w+|[^\w\s]")
NSP_NOISE = 0.15  # with 30 pairs one standard error of an accuracy near 0.5 is 0.09 (0.11 with 20)


@lru_cache(maxsize=4)
def corpus_unigrams(corpus: str) -> Counter:
    """Word counts of a corpus (a built-in name or a path), lowercased."""
    from engine.corpora import load_corpus
    counts = Counter()
    for doc in load_corpus(corpus):
        for sentence in doc:
            counts.update(_WORD.findall(sentence.lower()))
    return counts


def training_corpus(bundle) -> str:
    """The corpus the model was pre-trained on, from its run's run.json; "bbc" when unknown (MiniLM, HF folders)."""
    import json

    from engine.records import RUN_JSON
    if bundle.path:
        p = Path(bundle.path)
        for run in (p, p.parent.parent):
            try:
                corpus = json.loads((run / RUN_JSON).read_text()).get("config", {}).get("corpus")
            except (OSError, ValueError):
                continue
            if corpus:
                return str(corpus)
    return "bbc"


def probe_set_baselines(bundle, top_k: int = 5, corpus: str = None, probe_set: dict = None) -> dict:
    """{"corpus", "chance_top1", "chance_topk", "unigram_top1", "unigram_topk", "unigram_words", "nsp_chance",
    "nsp_majority", "top_k"} for the built-in probe set (or `probe_set`) and this model's vocabulary."""
    from engine.probe_set import PROBE_SET
    ps = probe_set or PROBE_SET
    tok = bundle.tokenizer
    corpus = corpus or training_corpus(bundle)
    try:
        counts = corpus_unigrams(corpus)
    except Exception:  # a corpus path that is gone: fall back to BBC News
        corpus, counts = "bbc", corpus_unigrams("bbc")
    words = [w for w, _ in counts.most_common() if tok.token_to_id(w) is not None][:max(1, top_k)]
    kept = []
    for _, answers in ps.get("cloze", []):
        norm = [a.lower() if tok.lowercase else a for a in answers]
        if any(tok.token_to_id(a) is not None for a in norm):
            kept.append(norm)
    n = len(kept)
    pairs = ps.get("nsp", [])
    V = tok.vocab_size
    return {"corpus": corpus, "top_k": top_k, "unigram_words": words,
            "chance_top1": 1.0 / V, "chance_topk": min(1.0, top_k / V),
            "unigram_top1": sum(words[0] in a for a in kept) / n if n else None,
            "unigram_topk": sum(any(w in a for w in words) for a in kept) / n if n else None,
            "nsp_chance": 0.5,
            "nsp_majority": sum(bool(y) for _, _, y in pairs) / len(pairs) if pairs else None}


def reading(scores: dict, baselines: dict) -> list:
    """Sentences saying what the scores mean at this stage of training (scores: probe_set_accuracy's dict)."""
    from engine.measured import fact
    run_mask, frequent = fact("classroom_run.mask_accuracy"), fact("classroom_run.frequent_token")
    run_nsp, rule, ready_nsp = (fact("classroom_run.nsp_accuracy"), fact("classroom_run.nsp_rule"),
                                fact("probe_ready.nsp_accuracy"))
    out = []
    top1, b1 = scores.get("cloze_top1"), baselines.get("unigram_top1")
    if top1 is not None:
        words = ", ".join(f"'{w}'" for w in baselines.get("unigram_words", [])[:3])
        if top1 <= (b1 or 0.0) + 0.05:
            out.append(f"Cloze: at the unigram baseline ({top1:.0%} vs {b1:.0%}): the model still answers with frequent "
                       f"words ({words}) whatever the sentence, the plateau every masked LM passes through first. A "
                       f"classroom run has left it but not by far (held-out accuracy at [MASK] {run_mask.text()} "
                       f"against {frequent.text()} for always answering the most frequent token); a real pre-trained "
                       "BERT gets most of these items.")
        else:
            out.append(f"Cloze: above the unigram baseline ({top1:.0%} vs {b1:.0%}): the model uses the context, not only "
                       "word frequency. Longer pre-training keeps raising this; a real pre-trained BERT gets most items.")
    nsp = scores.get("nsp_acc")
    n_pairs = int(scores.get("nsp_n") or 0)
    if nsp is not None:
        if abs(nsp - 0.5) <= NSP_NOISE:
            out.append(f"Next sentence: {nsp:.0%}, at chance (50%; {n_pairs} pairs, so ±{100 * (0.25 / max(n_pairs, 1)) ** 0.5:.0f} "
                       f"points is noise). NSP is learned late: the classroom run ends at held-out {run_nsp.text()} "
                       f"(a rule that uses no model: {rule.text()}), the probe-ready model at {ready_nsp.text()}. A "
                       "P(IsNext) near 0.50 for every pair is what a barely trained model shows.")
        elif nsp > 0.5:
            out.append(f"Next sentence: {nsp:.0%}, above chance (50%): the model tells a following sentence from a random one.")
        else:
            out.append(f"Next sentence: {nsp:.0%}, below chance (50%): more than noise on {n_pairs} pairs; the model answers "
                       "one way for most pairs or has learned a cue that misleads it here.")
    return out
