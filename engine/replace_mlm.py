"""ELECTRA's two MLM ablations (Clark et al. 2020, section 3.2, Table 5): where does replaced-token detection's gain
come from? `--objective replace-mlm` and `--objective all-tokens-mlm` (engine.objectives).

- Replace MLM: masked LM, except that the masked positions hold tokens sampled from a small generator instead of
  [MASK] (so pre-training sees no [MASK] that fine-tuning never shows); the loss is the model's cross-entropy at the
  masked positions only, as BERT's.
- All-Tokens MLM: the same input, and the model predicts the identity of every real token, not only the masked ones
  (learning from all tokens, as ELECTRA's discriminator does, but by generation).

The generator is ELECTRA's (engine/electra.py `Generator`: --generator-size of the model's width, the model's
embeddings shared, trained by its own MLM loss on the [MASK] input); its samples are drawn from its softmax with no
gradient through the sampling, and a sample equal to the original token stays (as ELECTRA). The model is a BERT with
its MLM head (`GeneratorMLMPreTraining`), so checkpoints, fine-tuning, features, fill-mask probes and the attention
views load it as any BERT; the generator is saved beside it as transformers' ElectraForMaskedLM (`generator/`,
engine.electra.save_pair).

N = masked positions of a batch (its prediction slots), B x T = the batch, H = the model's hidden size.

Where ours departs from the paper: All-Tokens MLM has no copy mechanism (the paper's sigmoid copy probability D,
which it found to help): the MLM head alone predicts every token, so an unchanged token is learned by the head as
any other; its loss is the mean over the real tokens ([CLS] and [SEP] included). The token metrics (mlm_acc, the
held-out MLM accuracy) are counted at the masked positions for both, so they compare with BERT's; the generator's
appear as gen_loss and gen_acc. The paper's generator for these rows is the one ELECTRA uses; its FLOPs are counted
(engine.flops.generator_mlm_flops), so equal-compute comparisons charge for it.
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from engine.config import BertConfig
from engine.electra import Generator, generator_config, replace_tokens, sample
from engine.errors import EngineError
from engine.model import BertForPreTraining, BertOutput
from engine.vocab_loss import IGNORE_INDEX


@dataclass
class GeneratorMLMOutput(BertOutput):
    """BertOutput of the model on the generator's samples, plus the generator's MLM at the masked positions and, for
    All-Tokens MLM, the model's loss at the other real tokens."""

    gen_loss_sum: Optional[torch.Tensor] = None  # () the generator's summed cross-entropy at the masked positions
    gen_predictions: Optional[torch.Tensor] = None  # (N,) its argmax there
    other_loss_sum: Optional[torch.Tensor] = None  # () All-Tokens MLM: the model's summed cross-entropy at every
    # real token that was not masked
    corrupted_ids: Optional[torch.Tensor] = None  # (B, T): the model's input


def unmasked_targets(input_ids, attention_mask, rows, cols, valid):
    """(B, T) targets of All-Tokens MLM beyond the masked slots: the input token at every real position that is not
    one of the valid slots (rows, cols), IGNORE_INDEX at the slots and at padding. The input there is the original
    text (only the slots were masked)."""
    at_slot = torch.zeros_like(input_ids, dtype=torch.bool).index_put((rows, cols), valid)  # (B, T)
    real = torch.ones_like(at_slot) if attention_mask is None else attention_mask.bool()
    return torch.where(real & ~at_slot, input_ids, torch.full_like(input_ids, IGNORE_INDEX))


class GeneratorMLMPreTraining(BertForPreTraining):
    """BERT with its MLM head (no NSP) and ELECTRA's `generator`, which shares its embeddings. `all_tokens`: the
    model's loss covers every real token (All-Tokens MLM), else the masked positions (Replace MLM)."""

    def __init__(self, config: BertConfig, generator_size: float, all_tokens: bool):
        if not config.has_mlm_head or config.has_nsp_head or config.causal:
            raise EngineError("Replace MLM and All-Tokens MLM train a BERT with its MLM head and no NSP head that reads "
                              "both ways; build it from their objective's model config")
        super().__init__(config)
        self.all_tokens = bool(all_tokens)
        self.generator = Generator(generator_config(config, generator_size), self.bert.embeddings)
        self.generator.apply(self._init_weights)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, mlm_positions=None, unpad=False, mlm_targets=None,
                packing=None) -> BertOutput:
        """With `mlm_positions` (rows (N,), columns (N,)) and `mlm_targets` (N,) (IGNORE_INDEX at unused slots): one
        step on the masked `input_ids`: the generator's MLM there, its samples put in, the model's MLM on that input
        (mlm_loss_sum and mlm_predictions at the masked slots; other_loss_sum at the rest for All-Tokens MLM).
        Without them: the model on the ids as given (probes, fine-tuning's encoder)."""
        if packing is not None:
            raise EngineError("Replace MLM and All-Tokens MLM do not pack instances; drop --packing")
        if not isinstance(mlm_positions, tuple) or mlm_targets is None:
            return super().forward(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states,
                                   mlm_positions, unpad, mlm_targets)
        rows, cols = mlm_positions
        logits = self.generator(input_ids, token_type_ids, attention_mask, rows, cols).float()  # (N, V)
        gen_sum = F.cross_entropy(logits, mlm_targets, ignore_index=IGNORE_INDEX, reduction="sum")
        with torch.no_grad():  # no gradient through the sampling (ELECTRA section 2)
            samples = sample(logits.detach())
        valid = mlm_targets != IGNORE_INDEX  # (N,)
        corrupted, _ = replace_tokens(input_ids, rows, cols, valid, samples, mlm_targets)  # (B, T)
        out = GeneratorMLMOutput(**vars(self.bert(corrupted, token_type_ids, attention_mask, output_attentions,
                                                  output_hidden_states)))
        h = out.last_hidden_state  # (B, T, H)
        out.mlm_loss_sum, out.mlm_predictions = self.mlm.loss(h[rows, cols], mlm_targets)  # at the masked slots
        if self.all_tokens:
            others = unmasked_targets(input_ids, attention_mask, rows, cols, valid)  # (B, T)
            out.other_loss_sum, _ = self.mlm.loss(h.reshape(-1, h.shape[-1]), others.reshape(-1))
        out.gen_loss_sum, out.gen_predictions = gen_sum, logits.detach().argmax(-1)
        out.corrupted_ids = corrupted
        return out
