"""Extractive question answering on SQuAD v1.1 / v2.0 (paper 4.2, 4.3).

File format: the official SQuAD JSON, `{"version", "data": [{"title", "paragraphs": [{"context", "qas":
[{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible" (v2.0)}]}]}]}`. v2.0 is
detected by `version` starting with 2 or any `is_impossible` question.

Features: [CLS] question [SEP] passage-window [SEP], the question truncated to `max_query_len` pieces
(segment 0), the passage split into windows of at most `max_seq_len - len(question) - 3` pieces that start
`doc_stride` pieces apart (segment 1). The answer's character span is mapped to pieces with the
tokenizer's offsets; a window that does not hold the whole answer, or an unanswerable question, gets
start = end = 0 ([CLS]). Decoding scores a span (i, j) by start_logit[i] + end_logit[j] with i <= j,
j - i + 1 <= max_answer_len, both in the passage part of the window, and i in the window where that
piece has the most context on both sides (as the released code does); the answer text is the original
passage slice between the pieces' character offsets. v2.0: s_null = start[CLS] + end[CLS], the minimum
over an example's windows; the answer is "" when best_span_score <= s_null + tau, tau chosen on dev by
`best_threshold`. Metrics are the official evaluation scripts' exact match and F1 (lowercase, strip
punctuation and the articles a/an/the, collapse whitespace; max over the gold answers), reported as
fractions in [0, 1] (the scripts print percentages).
Departure from the released code: spans are mapped with the tokenizer's character offsets instead of
whitespace tokens + "get_final_text" (same result for WordPiece, simpler); every valid span is scored
exactly instead of only the top-20 starts x top-20 ends.
"""
import collections
import copy
import functools
import json
import re
import string
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine import records
from engine.errors import EngineError
from engine.tasks.batching import Prepared, cut_text, pad_batch, predict
from engine.tasks.kinds import SQUAD
from engine.tasks.tables import line_cap, read_text, too_long


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list  # [(text, answer_start char)], [] for an unanswerable question
    is_impossible: bool = False
    title: str = ""


@dataclass
class SquadFeature:
    example_index: int  # index of its SquadExample in the list given to make_features
    input_ids: list  # [CLS] question [SEP] window [SEP]
    token_type_ids: list
    offsets: list  # per position: (char start, char end) in the context for passage pieces, else None
    max_context: list  # per position: True when this window gives that passage piece its most context
    start_position: int = 0  # answer start/end piece in this window; 0 ([CLS]) when not inside or impossible
    end_position: int = 0


@dataclass
class SquadPrediction:
    qid: str
    text: str  # the best non-null span ("" when no span is valid)
    score: float  # its start + end logit (-inf when no span is valid)
    null_score: float  # s_null = start[CLS] + end[CLS], min over the example's windows
    nbest: list = field(default_factory=list)  # [(text, score)], best first, distinct texts


@dataclass
class SquadTask:
    name: str
    version: str  # "1.1" or "2.0"
    train: list  # of SquadExample
    dev: list  # of SquadExample
    metrics: tuple = ("f1", "exact")
    info: dict = field(default_factory=dict)
    kind: str = SQUAD.name

    def features(self, tok, split: str = "train", max_seq_len: int = 384, doc_stride: int = 128, max_query_len: int = 64) -> list:
        return make_features(tok, getattr(self, split), max_seq_len, doc_stride, max_query_len)

    def collate(self, tok):
        """A DataLoader `collate_fn` for lists of SquadFeatures."""
        return functools.partial(collate_squad, pad_id=tok.pad_id)

    def compute_metrics(self, predictions: dict, examples=None) -> dict:
        """Official EM/F1 of {qid: answer text} on the dev examples."""
        return squad_evaluate(self.dev if examples is None else examples, predictions, self.version)

    def prepare(self, tok, max_len: int, cfg) -> Prepared:
        """The loop's view: passage windows as items; the evaluator decodes spans per question (v2.0: with the
        null threshold swept on dev, the curve kept). `cfg` gives doc_stride, max_query_len, max_answer_len."""
        tr_feats = self.features(tok, "train", max_len, cfg.doc_stride, cfg.max_query_len)
        dv_feats = self.features(tok, "dev", max_len, cfg.doc_stride, cfg.max_query_len)
        tr_len, dv_len = [len(f.input_ids) for f in tr_feats], [len(f.input_ids) for f in dv_feats]
        collate = self.collate(tok)

        def evaluate(model, device, bs):
            def per_batch(batch, logits):
                return list(logits.float().cpu().numpy())  # (T, 2) per feature
            outs = predict(model, dv_feats, dv_len, collate, bs, device, per_batch=per_batch)
            preds = decode_squad(self.dev, dv_feats, [o[:, 0] for o in outs], [o[:, 1] for o in outs],
                                 max_answer_len=cfg.max_answer_len)
            if not self.version.startswith("2"):
                texts = answers(preds)
                per = [_score(ex, texts.get(ex.qid, ""), self.version)[1] for ex in self.dev]
                return {**self.compute_metrics(texts), records.PER_EXAMPLE: per}  # per-question F1
            return threshold_report(self.dev, preds)
        info = {"version": self.version, "train_features": len(tr_feats), "dev_features": len(dv_feats)}
        if self.version.startswith("2"):
            info["tau"] = TAU_NOTE
        return Prepared(self, SQUAD.head, 2, self.metrics[0], tr_feats, tr_len, dv_feats, dv_len, collate, evaluate, info)

    def preview(self, n: int = 10) -> list:
        """The first n training questions as table rows (the Fine-tune page's preview)."""
        return [{"question": e.question, "answer": e.answers[0][0] if e.answers else "(unanswerable)",
                 "context": e.context[:200]} for e in self.train[:n]]


# ---------------------------------------------------------------- files
def _read_json(path_or_dict) -> tuple:
    if isinstance(path_or_dict, dict):
        return path_or_dict, "<dict>"
    p = Path(path_or_dict)
    text = read_text(p, "SQuAD file")  # the task files' one reader: missing file, BOM, .gz/.bz2, not UTF-8
    try:
        return json.loads(text), str(p)
    except json.JSONDecodeError as e:
        raise EngineError(f"{p} is not valid UTF-8 JSON ({e}); give a SQuAD v1.1/v2.0 JSON file")


def load_squad(path_or_dict) -> tuple:
    """(examples, version "1.1"|"2.0") from a SQuAD JSON file or an already-parsed dict."""
    d, src = _read_json(path_or_dict)
    if not isinstance(d, dict) or not isinstance(d.get("data"), list):
        raise EngineError(f"{src} is not a SQuAD file: expected {{\"version\": ..., \"data\": [articles]}}")
    v2 = str(d.get("version", "")).lstrip("v").startswith("2")
    out = []
    for ai, art in enumerate(d["data"]):
        for pi, para in enumerate(art.get("paragraphs", [])):
            where = f"{src} article {ai} paragraph {pi}"
            if not isinstance(para.get("context"), str) or not isinstance(para.get("qas"), list):
                raise EngineError(f"{where} has no context/qas; each paragraph needs \"context\" and \"qas\"")
            ctx = para["context"]
            if len(ctx) * 4 > line_cap() and len(ctx.encode("utf-8", "surrogatepass")) > line_cap():
                raise too_long(where, len(ctx.encode("utf-8", "surrogatepass")))  # all of it is read (windows): no cut
            for qa in para["qas"]:
                try:
                    qid, question = str(qa["id"]), qa["question"]
                    impossible = bool(qa.get("is_impossible", False))
                    answers = [] if impossible else [(a["text"], int(a["answer_start"])) for a in qa.get("answers", [])]
                except (KeyError, TypeError, ValueError):
                    raise EngineError(f"{where}: a question lacks id/question/answers[].text/answer_start; fix the file")
                v2 = v2 or "is_impossible" in qa
                for text, start in answers:
                    if not 0 <= start <= len(ctx) - len(text):
                        raise EngineError(f"{where} question {qid}: answer_start {start} is outside the passage")
                out.append(SquadExample(qid, question, ctx, answers, impossible or not answers, art.get("title", "")))
    if not out:
        raise EngineError(f"{src} has no questions")
    return out, ("2.0" if v2 else "1.1")


def split_squad_articles(path_or_dict, first_n: int) -> tuple:
    """Two SQuAD dicts: the first `first_n` articles and the rest (e.g. fine-tune on the first 38 articles of
    the v1.1 dev file, evaluate on the last 10)."""
    d, src = _read_json(path_or_dict)
    arts = d.get("data") if isinstance(d, dict) else None
    if not isinstance(arts, list):
        raise EngineError(f"{src} is not a SQuAD file: expected {{\"version\": ..., \"data\": [articles]}}")
    if not 0 < first_n < len(arts):
        raise EngineError(f"cannot split {src} after {first_n} articles: it has {len(arts)}; use 1..{len(arts) - 1}")
    head = {k: v for k, v in d.items() if k != "data"}
    return {**copy.deepcopy(head), "data": arts[:first_n]}, {**copy.deepcopy(head), "data": arts[first_n:]}


def load_squad_task(train=None, dev=None, name: str = "squad") -> SquadTask:
    """A SquadTask from train and dev SQuAD files (or dicts, e.g. from split_squad_articles)."""
    if train is None and dev is None:
        raise EngineError("give a SQuAD train and/or dev JSON file")
    tr, v1 = load_squad(train) if train is not None else ([], None)
    dv, v2 = load_squad(dev) if dev is not None else ([], None)
    version = "2.0" if "2.0" in (v1, v2) else "1.1"
    info = {"train_file": str(train) if isinstance(train, (str, Path)) else None,
            "dev_file": str(dev) if isinstance(dev, (str, Path)) else None,
            "train_questions": len(tr), "dev_questions": len(dv), "dev_unanswerable": sum(e.is_impossible for e in dv)}
    return SquadTask(name, version, tr, dv, info=info)


# ---------------------------------------------------------------- features
def _windows(n: int, max_ctx: int, doc_stride: int) -> list:
    """(start, length) of the passage windows: each at most max_ctx pieces, `doc_stride` apart, the last
    one reaching the end."""
    spans, start = [], 0
    while True:
        length = min(n - start, max_ctx)
        spans.append((start, length))
        if start + length >= n:
            return spans
        start += min(length, doc_stride)


def _char_to_pieces(offsets, start: int, end: int):
    """First and last passage piece covering characters [start, end); None when no piece does."""
    ends = [o[1] for o in offsets]
    starts = [o[0] for o in offsets]
    i = bisect_right(ends, start)  # first piece ending after `start`
    j = bisect_left(starts, end) - 1  # last piece starting before `end`
    if i >= len(offsets) or j < i:
        return None
    return i, j


def make_features(tok, examples, max_seq_len: int = 384, doc_stride: int = 128, max_query_len: int = 64) -> list:
    """SquadFeatures for examples: one per passage window (see the module docstring)."""
    if doc_stride < 1:
        raise EngineError(f"doc_stride {doc_stride} must be at least 1")
    contexts = list(dict.fromkeys(e.context for e in examples))
    ctx_enc = dict(zip(contexts, tok.encode_batch(contexts, add_special_tokens=False)))
    # a question is cut to what max_query_len pieces can use (cut_text); a passage is read whole, in windows (its
    # length is bounded when the file is read: the line cap, engine.tasks.tables)
    q_enc = tok.encode_batch([cut_text(e.question, max_query_len) for e in examples], add_special_tokens=False)
    feats = []
    for ei, (ex, qe) in enumerate(zip(examples, q_enc)):
        q_ids = qe.ids[:max_query_len]
        ce = ctx_enc[ex.context]
        c_ids, c_off = ce.ids, ce.offsets
        max_ctx = max_seq_len - len(q_ids) - 3
        if max_ctx < 1:
            raise EngineError(f"max_seq_len {max_seq_len} leaves no room for the passage after a {len(q_ids)}-piece "
                              f"question; raise max_seq_len or lower max_query_len")
        answer = None
        if ex.answers and not ex.is_impossible:
            text, s = ex.answers[0]
            answer = _char_to_pieces(c_off, s, s + len(text))
        spans = _windows(len(c_ids), max_ctx, doc_stride)
        starts, ends = [a for a, _ in spans], [a + n for a, n in spans]  # both ascending
        for si, (ws, wl) in enumerate(spans):
            head = [tok.cls_id] + q_ids + [tok.sep_id]
            input_ids = head + c_ids[ws:ws + wl] + [tok.sep_id]
            type_ids = [0] * len(head) + [1] * (wl + 1)
            offsets = [None] * len(head) + [tuple(o) for o in c_off[ws:ws + wl]] + [None]
            max_context = [False] * len(input_ids)
            for k in range(wl):
                p = ws + k
                # only the windows holding piece p can score (the others score -1): those are a run of consecutive
                # windows, found by bisection, so a long passage's many windows cost linear time, not quadratic
                best = max(range(bisect_right(ends, p), bisect_right(starts, p)), key=lambda t: _context_score(spans[t], p))
                max_context[len(head) + k] = best == si
            sp = ep = 0
            if answer is not None and ws <= answer[0] and answer[1] < ws + wl:
                sp, ep = answer[0] - ws + len(head), answer[1] - ws + len(head)
            feats.append(SquadFeature(ei, input_ids, type_ids, offsets, max_context, sp, ep))
    return feats


def _context_score(span, p) -> float:
    s, l = span
    if not s <= p < s + l:
        return -1.0
    return min(p - s, s + l - 1 - p) + 0.01 * l


def collate_squad(features, pad_id: int = 0) -> dict:
    """Pad SquadFeatures to the batch's longest: input_ids, token_type_ids, attention_mask (B, T) long and
    start_positions, end_positions (B,) long. Usable as a DataLoader collate_fn (pad_id: tok.pad_id, 0 in
    BERT vocabularies)."""
    input_ids, token_type_ids, attention_mask = pad_batch([(f.input_ids, f.token_type_ids) for f in features], pad_id)  # (B, T)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "start_positions": torch.tensor([f.start_position for f in features], dtype=torch.long),
            "end_positions": torch.tensor([f.end_position for f in features], dtype=torch.long)}


# ---------------------------------------------------------------- decoding
def _np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def decode_squad(examples, features, start_logits, end_logits, n_best: int = 20, max_answer_len: int = 30) -> list:
    """One SquadPrediction per example (in order) from per-feature logits: `start_logits[f]`,
    `end_logits[f]` hold at least len(features[f].input_ids) scores ((F, T) tensor/array or a list of
    1-D arrays; positions past a feature's length are ignored)."""
    if len(start_logits) != len(features) or len(end_logits) != len(features):
        raise ValueError(f"{len(start_logits)}/{len(end_logits)} logit rows for {len(features)} features")
    by_example = collections.defaultdict(list)
    for fi, f in enumerate(features):
        by_example[f.example_index].append(fi)
    preds = []
    for ei, ex in enumerate(examples):
        cands = {}  # text -> best score
        null = float("inf")
        for fi in by_example.get(ei, []):
            f = features[fi]
            T = len(f.input_ids)
            s = _np(start_logits[fi])[:T]  # (T,)
            e = _np(end_logits[fi])[:T]  # (T,)
            null = min(null, float(s[0] + e[0]))
            in_passage = np.array([o is not None for o in f.offsets])
            s = np.where(in_passage & np.array(f.max_context), s, -np.inf)
            e = np.where(in_passage, e, -np.inf)
            L = max_answer_len
            e_pad = np.concatenate([e, np.full(L, -np.inf)])
            idx = np.arange(T)[:, None] + np.arange(L)[None, :]  # (T, L): j = i + k
            score = s[:, None] + e_pad[idx]  # (T, L)
            flat = score.reshape(-1)
            k = min(n_best, int(np.isfinite(flat).sum()))
            if k == 0:
                continue
            top = np.argpartition(-flat, k - 1)[:k]
            for t in top:
                i, j = divmod(int(t), L)
                j += i
                text = ex.context[f.offsets[i][0]:f.offsets[j][1]]
                sc = float(flat[t])
                if sc > cands.get(text, -np.inf):
                    cands[text] = sc
        nbest = sorted(cands.items(), key=lambda kv: -kv[1])[:n_best]
        text, sc = nbest[0] if nbest else ("", float("-inf"))
        preds.append(SquadPrediction(ex.qid, text, sc, null if null != float("inf") else 0.0, nbest))
    return preds


def answers(predictions, tau: float = None) -> dict:
    """{qid: text}: the best span, or (v2.0, `tau` given) "" when score <= null_score + tau."""
    return {p.qid: ("" if tau is not None and p.score <= p.null_score + tau else p.text) for p in predictions}


# ---------------------------------------------------------------- official metric
def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace (official scripts)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: str = "2.0") -> float:
    """Token-overlap F1 after normalisation. v2.0: if either side is empty, 1.0 only when both are."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version.startswith("2") and (not p or not g):
        return float(p == g)
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def _golds(ex: SquadExample, version: str) -> list:
    golds = [t for t, _ in ex.answers]
    if version.startswith("2"):
        golds = [t for t in golds if normalize_answer(t)] or [""]  # no answer: only "" is right
    return golds


def _score(ex, text: str, version: str) -> tuple:
    golds = _golds(ex, version)
    return max(exact_match(text, g) for g in golds), max(f1(text, g, version) for g in golds)


def squad_evaluate(examples, predictions: dict, version: str = "1.1") -> dict:
    """Official EM and F1 (fractions) of {qid: text}; a missing prediction counts as "". v2.0 adds
    has_ans_* and no_ans_* breakdowns."""
    if not examples:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    scores = [_score(ex, predictions.get(ex.qid, ""), version) for ex in examples]
    out = {"exact": float(np.mean([s[0] for s in scores])), "f1": float(np.mean([s[1] for s in scores])), "total": len(examples)}
    if version.startswith("2"):
        for key, want in (("has_ans", False), ("no_ans", True)):
            sub = [s for s, ex in zip(scores, examples) if ex.is_impossible == want]
            out[f"{key}_exact"] = float(np.mean([s[0] for s in sub])) if sub else 0.0
            out[f"{key}_f1"] = float(np.mean([s[1] for s in sub])) if sub else 0.0
            out[f"{key}_total"] = len(sub)
    return out


TAU_NOTE = ("tau is chosen on the dev set the scores are reported on (as the paper did, 4.3), so F1/EM at tau are "
            "optimistic; f1_tau0 / exact_tau0 are at tau = 0, chosen on nothing")


def threshold_report(examples, predictions) -> dict:
    """SQuAD v2.0 dev scores with the null threshold tau swept on these same examples (`TAU_NOTE`): F1 and EM
    and the answerable (has_ans_*) / unanswerable (no_ans_*) breakdown all at the chosen tau; the same at tau =
    0 with a _tau0 suffix; "threshold_curve" [(tau, exact, f1)]."""
    sweep = best_threshold(examples, predictions)
    at_tau = squad_evaluate(examples, answers(predictions, tau=sweep["tau"]), "2.0")
    at0 = squad_evaluate(examples, answers(predictions, tau=0.0), "2.0")
    split = lambda d: {k: v for k, v in d.items() if k.startswith(("has_", "no_"))}
    return {"f1": at_tau["f1"], "exact": at_tau["exact"], "tau": sweep["tau"], **split(at_tau),
            "f1_tau0": at0["f1"], "exact_tau0": at0["exact"], **{f"{k}_tau0": v for k, v in split(at0).items()},
            "threshold_curve": sweep["curve"]}


def best_threshold(examples, predictions) -> dict:
    """Sweep the v2.0 null threshold tau over the dev predictions (SquadPredictions, in the examples'
    order) and pick the one that maximises F1. Returns {"tau", "exact", "f1", "curve": [(tau, exact, f1)]}
    with the curve sorted by tau (for plotting). The answer is "" when score - null_score <= tau."""
    by_qid = {p.qid: p for p in predictions}
    rows = []  # (diff, em_span, f1_span, em_null, f1_null)
    for ex in examples:
        p = by_qid.get(ex.qid)
        em_null, f1_null = _score(ex, "", "2.0")
        if p is None or not np.isfinite(p.score):
            rows.append((-np.inf, em_null, f1_null, em_null, f1_null))
            continue
        em_s, f1_s = _score(ex, p.text, "2.0")
        rows.append((p.score - p.null_score, em_s, f1_s, em_null, f1_null))
    if not rows:
        return {"tau": 0.0, "exact": 0.0, "f1": 0.0, "curve": []}
    rows.sort(key=lambda r: r[0])
    n = len(rows)
    diffs = [r[0] for r in rows]
    finite = sorted({d for d in diffs if np.isfinite(d)})
    taus = ([finite[0] - 1.0] + finite) if finite else [0.0]
    # prefix sums: the first m rows (diff <= tau) answer "", the rest answer their span
    null_em = np.concatenate([[0.0], np.cumsum([r[3] for r in rows])])
    null_f1 = np.concatenate([[0.0], np.cumsum([r[4] for r in rows])])
    span_em = np.concatenate([[0.0], np.cumsum([r[1] for r in rows])])
    span_f1 = np.concatenate([[0.0], np.cumsum([r[2] for r in rows])])
    curve = []
    for tau in taus:
        m = bisect_right(diffs, tau)
        em = (null_em[m] + span_em[n] - span_em[m]) / n
        f = (null_f1[m] + span_f1[n] - span_f1[m]) / n
        curve.append((float(tau), float(em), float(f)))
    best = max(curve, key=lambda c: (c[2], c[1], -abs(c[0])))
    return {"tau": best[0], "exact": best[1], "f1": best[2], "curve": curve}
