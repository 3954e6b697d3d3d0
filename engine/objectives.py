"""The pre-training objectives (paper 3.1, and Table 5's ablation of them), each described once.

| name    | instances (engine.pretraining.cache)             | labels                           | attention | heads     |
|---------|-------------------------------------------------|----------------------------------|-----------|-----------|
| mlm+nsp | segment pairs A/B, B the next segment half the  | masked tokens (15%, 80/10/10)    | both ways | MLM + NSP |
|         | time (IsNext) and from another document else    | + IsNext/NotNext                 |           |           |
| mlm+sop | segment pairs A/B of one document, consecutive, | masked tokens                    | both ways | MLM + SOP |
|         | swapped for half of them (ALBERT 4.6)           | + in order/swapped               |           |           |
| mlm     | one stretch of a document per instance          | masked tokens                    | both ways | MLM       |
| ltr     | one stretch of a document per instance          | the next token at every position | causal    | MLM (LM)  |
| electra | one stretch of a document per instance          | masked tokens (all [MASK]) for   | both ways | RTD (the  |
|         |                                                 | the generator; replaced or not   |           | generator |
|         |                                                 | at every real token              |           | MLM apart)|
| electra-15 | the same                                     | the same, the discriminator's    | both ways | the same  |
|         |                                                 | loss at the masked positions only|           |           |
| replace-mlm | one stretch of a document per instance      | masked tokens, their input the   | both ways | MLM (the  |
|         |                                                 | generator's samples              |           | generator |
| all-tokens-mlm | the same                                 | every real token, the same input | both ways | apart)    |

The loss is the mean cross-entropy of the token predictions, plus the pair task's cross-entropy when the objective
has one (NSP or SOP: the same 2-way head on C, `cls.seq_relationship` in a checkpoint), plus, for ELECTRA, 50 x the
discriminator's mean binary cross-entropy over every real token (`rtd_weight`; engine/electra.py), or over the masked
positions only for ELECTRA 15% (`rtd_masked`). Every caller asks the objective (`objective(name)`) instead of comparing names: the loop (labels, loss,
metrics), the data (pairs or single stretches), the model config (causal attention, NSP head), the pages
(labels, curves). A new objective made of these parts is one more `Objective(...)` in OBJECTIVES.

Metrics: a training window (and a held-out pass) sums the named quantities in SUMS; `record` turns them into the
metrics.jsonl keys: loss, <token>_loss, <token>_acc (token = mlm, or lm for a left-to-right objective), and
<pair>_loss, <pair>_acc with a pair task (pair = nsp or sop), disc_loss, disc_acc and disc_replaced (the share of the
judged tokens the generator's samples changed: every real token, or the masked ones for electra-15) with replaced-token detection, sbo_loss and sbo_acc when the window
has span boundary predictions (--span-boundary, training only); held-out records prefix them with eval_ and add eval_<token>_ppl, eval_loss,
eval_instances.
"""
import math
from dataclasses import dataclass

from engine.errors import EngineError

# what a metrics window sums over its micro-batches (a tensor in this order, so ranks all-reduce it at once and
# checkpoints save it as training_state.pt's metrics_window)
SUMS = ("loss",  # the micro-batch losses (each a mean)
        "token_loss", "token_correct", "token_n",  # summed cross-entropy, correct predictions, predicted positions
        "nsp_loss", "nsp_correct", "nsp_n",  # the same for the pair task, NSP or SOP (0 without one)
        "tokens",  # real (non-padding) tokens seen
        "batches",  # micro-batches
        "disc_loss", "disc_correct", "disc_n", "disc_replaced",  # ELECTRA's discriminator: summed binary
        # cross-entropy, correct replaced/original calls, real tokens judged, tokens the samples changed (0 without it)
        "sbo_loss", "sbo_correct", "sbo_n",  # SpanBERT's span boundary objective (--span-boundary; 0 without it)
        "gen_loss", "gen_correct", "gen_n")  # the generator of Replace MLM and All-Tokens MLM (0 without one)
# new sums go last, so a checkpoint saved before they existed resumes with its window's first entries
# (engine/pretraining/loop.py)

# the pre-training heads, named once: Objective.heads, a checkpoint's missing heads (engine.checkpoint), the heads a
# model can use (engine.probes.heads); "mlm" names the masked-LM head, which an LTR model uses to predict the next token
MLM_HEAD = "mlm"
NSP_HEAD = "nsp"  # the 2-way pair head on C: NSP's, or SOP's under mlm+sop
RTD_HEAD = "rtd"  # ELECTRA's discriminator head: replaced or original at every token (engine/electra.py)


@dataclass(frozen=True)
class Objective:
    name: str  # the --objective value, run.json's "objective"
    label: str  # how pages and study tables name it
    nsp: bool  # instances are segment pairs A/B with a 2-way label, and the model has the pair head (NSP's, on C)
    causal: bool  # left-to-right: causal attention, labels are the next tokens (no masking)
    words: str = ""  # what it is in a sentence ("... continued pre-training with <words> on ..."); default: label
    pair: str = "nsp"  # with `nsp`: the pair task, "nsp" (B next or from another document) or "sop" (A, B swapped)
    pair_label: str = "P(IsNext)"  # what the pair head's first probability means, for probes and pages
    pair_title: str = "Next sentence"  # the pair task's name on the Probe page
    pair_answers: tuple = ("IsNext", "NotNext")  # the head's two answers, its first probability's first
    pair_meaning: str = "probability that B is the sentence that follows A"  # the first probability, in words
    rtd_weight: float = 0.0  # > 0: replaced-token detection (ELECTRA): a generator MLM and a discriminator on every
    # token, whose loss counts this many times (the paper's lambda, 50); the discriminator is the run's model
    rtd_masked: bool = False  # with `rtd_weight`: the discriminator's loss (and its metrics) at the masked positions
    # only, not every real token (ELECTRA's "ELECTRA 15%" ablation); it still reads the whole input
    mask_ratios: tuple = ()  # MASK,RANDOM,SAME shares the objective fixes (ELECTRA: all [MASK]); () = --mask-ratios
    fills: bool = False  # the masked positions hold a small generator's samples when the model reads them, the
    # generator trained beside it by its own MLM loss (ELECTRA's Replace MLM and All-Tokens MLM: engine/replace_mlm.py)
    all_tokens: bool = False  # with `fills`: the model predicts every real token, not only the masked ones

    @property
    def generator(self) -> bool:
        """The run trains a small MLM generator beside its model (ELECTRA, and its two MLM ablations)."""
        return self.rtd or self.fills

    @property
    def rtd(self) -> bool:
        """Replaced-token detection: the run trains a generator and a discriminator (engine/electra.py)."""
        return self.rtd_weight > 0

    @property
    def token(self) -> str:
        """The prefix of its token-prediction metrics: lm (next token) or mlm (masked token)."""
        return "lm" if self.causal else "mlm"

    @property
    def token_label(self) -> str:
        return "next-token" if self.causal else "MLM"

    @property
    def heads(self) -> tuple:
        """The pre-training heads its model carries (the LM head is the MLM head predicting the next token)."""
        if self.rtd:  # the generator's MLM head is the generator's, not the discriminator's
            return (RTD_HEAD,)
        return (MLM_HEAD, NSP_HEAD) if self.nsp else (MLM_HEAD,)

    @property
    def pairs(self) -> str:
        """The pair task its instances carry: "nsp", "sop", or "" (single stretches)."""
        return self.pair if self.nsp else ""

    @property
    def min_documents(self) -> int:
        return 2 if self.pairs == "nsp" else 1  # NotNext takes B from another document

    @property
    def metrics(self) -> tuple:
        """The metric keys of its training records (besides step, tokens, lr, ...)."""
        return (("loss", f"{self.token}_loss", f"{self.token}_acc") + ((f"{self.pair}_loss", f"{self.pair}_acc") if self.nsp else ())
                + (("disc_loss", "disc_acc", "disc_replaced") if self.rtd else ()) + (("gen_loss", "gen_acc") if self.fills else ()))

    @property
    def held_out_metrics(self) -> tuple:
        """The held-out metrics a study table shows (without their eval_ prefix); an MLM's accuracy where the input
        is [MASK] and the most frequent token's share there (engine.pretraining.evaluation.mask_position_accuracy)."""
        return ((f"{self.token}_acc", f"{self.token}_ppl") + (() if self.causal else ("mlm_mask_acc", "mlm_mask_baseline"))
                + ((f"{self.pair}_acc",) if self.nsp else ()) + (("disc_acc",) if self.rtd else ()))

    def record(self, sums: dict) -> dict:
        """Means of a window's `sums` (SUMS names) under the metrics.jsonl keys."""
        rec = {"loss": sums["loss"] / max(sums["batches"], 1),
               f"{self.token}_loss": sums["token_loss"] / max(sums["token_n"], 1),
               f"{self.token}_acc": sums["token_correct"] / max(sums["token_n"], 1)}
        if self.nsp:
            rec[f"{self.pair}_loss"] = sums["nsp_loss"] / max(sums["nsp_n"], 1)
            rec[f"{self.pair}_acc"] = sums["nsp_correct"] / max(sums["nsp_n"], 1)
        if self.rtd:
            n = max(sums["disc_n"], 1)
            rec.update(disc_loss=sums["disc_loss"] / n, disc_acc=sums["disc_correct"] / n, disc_replaced=sums["disc_replaced"] / n)
        if self.fills:  # the generator's own MLM at the masked positions (the token metrics are the model's)
            n = max(sums["gen_n"], 1)
            rec.update(gen_loss=sums["gen_loss"] / n, gen_acc=sums["gen_correct"] / n)
        if sums.get("sbo_n"):  # --span-boundary (a setting of span masking, not an objective: engine/span_boundary.py)
            rec.update(sbo_loss=sums["sbo_loss"] / sums["sbo_n"], sbo_acc=sums["sbo_correct"] / sums["sbo_n"])
        return rec

    def eval_record(self, sums: dict, instances: int) -> dict:
        """A held-out record: `record` with eval_ keys, plus perplexity, total loss and the instance count."""
        rec = {f"eval_{k}": v for k, v in self.record(sums).items()}
        rec[f"eval_{self.token}_ppl"] = math.exp(min(rec[f"eval_{self.token}_loss"], 50.0))
        rec["eval_loss"] = (rec[f"eval_{self.token}_loss"] + rec.get(f"eval_{self.pair}_loss", 0.0)
                            + self.rtd_weight * rec.get("eval_disc_loss", 0.0))
        rec["eval_instances"] = instances
        return rec


MLM_NSP = Objective("mlm+nsp", "MLM + NSP (BERT)", nsp=True, causal=False,
                    words="the paper's objectives, masked LM + next sentence prediction")
MLM = Objective("mlm", "MLM only (No NSP)", nsp=False, causal=False, words="masked LM only")
LTR = Objective("ltr", "Left-to-right LM (LTR & No NSP)", nsp=False, causal=True, words="a left-to-right LM")
# ALBERT (Lan et al. 2020, section 4.6): sentence-order prediction instead of NSP. A and B are consecutive segments of
# one document (engine.pretraining.instances), swapped for half the pairs; the pair head on C learns their order. Our
# version departs from ALBERT's in its model (BERT's, not ALBERT's factorised, shared-layer one) and keeps BERT's
# chunking and masking, so it differs from `mlm+nsp` in the pair task alone (what a study of NSP against SOP needs).
MLM_SOP = Objective("mlm+sop", "MLM + SOP (ALBERT)", nsp=True, causal=False, pair="sop", pair_label="P(in order)",
                    pair_title="Sentence order", pair_answers=("in order", "swapped"),
                    pair_meaning="probability that A and B are in their document's order (not swapped)",
                    words="masked LM + sentence-order prediction")
# ELECTRA (Clark et al. 2020, sections 2 and 3.1-3.2): replaced-token detection. A small MLM generator (its width
# --generator-size of the discriminator's) fills the masked positions (all [MASK] in its input) with samples from its
# softmax; the discriminator judges every real token, replaced or original, and its binary loss counts 50 times
# (lambda). A sample that equals the original token is "original". The generator shares the discriminator's
# embeddings. The discriminator is the run's model (engine/electra.py, where ours departs from the paper).
ELECTRA = Objective("electra", "ELECTRA (replaced-token detection)", nsp=False, causal=False, rtd_weight=50.0,
                    mask_ratios=(1.0, 0.0, 0.0), words="ELECTRA's replaced-token detection")
# ELECTRA's two MLM ablations (section 3.2, Table 5), which tell where its gain comes from: Replace MLM, masked LM
# whose masked positions hold the generator's samples instead of [MASK] (no [MASK] mismatch between pre-training and
# fine-tuning, still learning from the 15% only); All-Tokens MLM, the same input with every token predicted (learning
# from all tokens without a discriminator). Both train the generator beside the model; the model is a BERT with its
# MLM head (fill-mask probes it). Where ours departs (no copy mechanism for All-Tokens MLM): engine/replace_mlm.py.
REPLACE_MLM = Objective("replace-mlm", "Replace MLM (ELECTRA's ablation)", nsp=False, causal=False, fills=True,
                        mask_ratios=(1.0, 0.0, 0.0), words="masked LM on a generator's samples instead of [MASK]")
ALL_TOKENS_MLM = Objective("all-tokens-mlm", "All-Tokens MLM (ELECTRA's ablation)", nsp=False, causal=False, fills=True,
                           all_tokens=True, mask_ratios=(1.0, 0.0, 0.0),
                           words="masked LM on a generator's samples, every token predicted")
# ELECTRA's third ablation (section 3.2, Table 5: GLUE 82.4 against ELECTRA's 85.0): ELECTRA with the discriminator's
# loss taken only at the 15% of positions that were masked in the generator's input, so it learns from as few tokens
# as BERT's MLM. Ours departs from the paper where `electra` does (engine/electra.py); the discriminator's metrics
# (disc_acc, disc_replaced) are then over the masked positions too.
ELECTRA_15 = Objective("electra-15", "ELECTRA 15% (ELECTRA's ablation)", nsp=False, causal=False, rtd_weight=50.0,
                       rtd_masked=True, mask_ratios=(1.0, 0.0, 0.0),
                       words="ELECTRA's replaced-token detection judged at the masked positions only")
OBJECTIVES = {o.name: o for o in (MLM_NSP, MLM, LTR, MLM_SOP, ELECTRA, ELECTRA_15, REPLACE_MLM, ALL_TOKENS_MLM)}


# what a pre-training record's own metric keys begin with: each objective's token prediction and pair task
# (mlm, nsp, lm, sop), ELECTRA's discriminator (disc) and the span boundary objective (sbo); a held-out record's begin with eval_
METRIC_PREFIXES = tuple(dict.fromkeys([p for o in OBJECTIVES.values()
                                        for p in (o.token, o.pairs, "disc" if o.rtd else "", "gen" if o.fills else "") if p]
                                      + ["sbo"]))  # and --span-boundary's (a setting of the masked objectives)


def every(metrics: str) -> tuple:
    """The `metrics` ("metrics" or "held_out_metrics") of every objective, in order, without repeats: the keys a
    reader of any pre-training run looks for."""
    return tuple(dict.fromkeys(m for o in OBJECTIVES.values() for m in getattr(o, metrics)))


def objective(name: str) -> Objective:
    """The Objective called `name` (EngineError naming the choices when there is none)."""
    if name not in OBJECTIVES:
        raise EngineError(f"unknown objective '{name}'; choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]
