"""Probes: what a pre-trained BERT predicts and where it looks (paper section 3.1, Figure 1; Appendix A.1), one
module per job; every name below is importable from `engine.probes` (and the notebook API's from `engine`).

- predictions.py: `fill_mask(bundle, text)`, the MLM head's top-k (token, probability) at every [MASK], in order;
  `next_sentence(bundle, a, b)`, the NSP head's P(IsNext) for the pair `[CLS] a [SEP] b [SEP]`.
- attention_maps.py: `attention(bundle, a, b)`, the attention probabilities of every layer and head, numpy
  (L, A, T, T); `compare_attention(b1, b2, a, b)`, the per-head difference between two models on the same input
  (L, A), e.g. BERT vs No NSP or step 1,000 vs step 10,000, and the heads that changed most.
- scoring.py: `probe_set_accuracy(bundle)`, the fixed classroom probe set (`PROBE_SET`: cloze sentences in three
  sections, everyday facts, grammar and BBC-news-flavoured, and true/false next-sentence pairs) scored;
  `compare_probe_set(bundles)`, several models side by side (one row per model and per item).
- over_steps.py: `probe_checkpoints(paths, ...)`, the same probes over several checkpoints of one run (training
  dynamics), and `mask_probs_over_steps`.
- model_info.py: which model is asked, its short name and the heads it has (`model_name`, `heads`,
  `heads_on_disk`, `require_head`).
- inputs.py: typed text to WordPieces, truncated to the model's positions (`encode_input`), and one eval-mode
  forward pass (`forward_encoded`).
- cli.py: `python -m engine probe`.
(The probe set's sentences and pairs are engine.probe_set; what the Model page shows of a model is
engine.model_view.)

For a left-to-right model (`config.causal`, the LTR ablation, trained to predict the next token) the word at a
[MASK] is read from the output one position earlier, which has seen only the words to its left.
Not in the paper (tooling): inputs longer than the model's position table are truncated (longest side first,
as the released code truncates pairs) and every result carries `.truncated` and `.notes` saying so. A model
shipped without a head (MiniLM has neither MLM nor NSP head) raises `EngineError` instead of faking one.
Results are plain lists/floats with extra attributes, so `engine.fill_mask(...)[0][0]` is the best
(token, prob) for the first mask and `float(engine.next_sentence(...))` is the probability.
"""
from engine.probe_set import PROBE_SET  # the set probe_set_accuracy scores by default
from engine.probes.attention_maps import (AttentionTokens, attention, attention_and_output,
                                          compare_attention, jensen_shannon)
from engine.probes.cli import main  # python -m engine probe (engine.commands)
from engine.probes.inputs import encode_input, forward_encoded
from engine.probes.model_info import heads, heads_on_disk, model_name, pair_objective, require_head
from engine.probes.over_steps import checkpoint_steps, mask_probs_over_steps, probe_checkpoints
from engine.probes.predictions import MaskPredictions, NextSentenceProbability, fill_mask, next_sentence
from engine.probes.scoring import compare_probe_set, probe_set_accuracy

__all__ = ["PROBE_SET", "AttentionTokens", "attention", "attention_and_output", "compare_attention", "jensen_shannon",
           "main", "encode_input", "forward_encoded", "heads", "heads_on_disk", "model_name", "pair_objective", "require_head",
           "checkpoint_steps", "mask_probs_over_steps", "probe_checkpoints", "MaskPredictions",
           "NextSentenceProbability", "fill_mask", "next_sentence", "compare_probe_set", "probe_set_accuracy"]
