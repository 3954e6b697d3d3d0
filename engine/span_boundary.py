"""SpanBERT's span boundary objective, SBO (Joshi et al. 2020, section 3.2), the option `--span-boundary` of span
masking (`--span-mask`, engine/pretraining/masking.py).

Each token x_i of a masked span (s, e) is predicted from the encoder's outputs at the span's two boundary tokens,
x_{s-1} and x_{e+1}, and a learned embedding of its position in the span, p_{i-s+1}:
h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}], h1 = LayerNorm(GeLU(W1 h0)), y_i = LayerNorm(GeLU(W2 h1)), then the output word
embeddings (tied to the input ones, as the MLM head's) and a bias of its own. The SBO loss, the mean cross-entropy
over the masked tokens, is added to the MLM loss (the paper's L(x_i) = L_MLM + L_SBO).

N = masked positions of a batch (its prediction slots), H = hidden size, V = vocabulary.
- `span_boundaries`: per position of a (B, T) label grid, its span's left and right boundary positions and its offset
  in the span; `add_boundary_slots` puts them at a batch's prediction slots (engine/pretraining/step_inputs.py), in
  the batch thread.
- `boundary_inputs`: h0 for each slot, read from the hidden states at the boundaries only (what the tests check: a
  token inside the span never reaches it except through the encoder).
- `SpanBoundaryHead`, and `SpanBoundaryPreTraining`: BERT with it; its forward adds the SBO's summed cross-entropy
  and argmax at the slots (`sbo_loss_sum`, `sbo_predictions`) when given the slots' boundaries.
- `save_head`, `load_head`: the head's weights in `span_boundary.safetensors` beside a checkpoint's BERT files
  (engine.load and transformers ignore the file; a resume reads it back).

Where ours departs from the paper: a span is a maximal run of masked positions, so two spans drawn side by side are
read as one (the paper's spans are the sampled ones, whose boundary may then be a masked token; here a boundary is
never masked); the position embeddings count pieces, and spans longer than MAX_SPAN_PIECES share the last one; the
held-out evaluation scores MLM only (its masking is the paper's token masking, engine/pretraining/evaluation.py);
instances are not packed with it (--packing).
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import BertConfig
from engine.errors import EngineError
from engine.kernels.linear import linear
from engine.model import BertForPreTraining, BertOutput
from engine.vocab_loss import IGNORE_INDEX, vocab_cross_entropy

MAX_SPAN_PIECES = 32  # position embeddings p_1..p_32 (SpanBERT's spans: at most 10 words)
HEAD_FILE = "span_boundary.safetensors"  # the head's weights, beside a checkpoint's model.safetensors


def span_boundaries(labels: torch.Tensor) -> tuple:
    """(left, right, offset), each (B, T) long, for the labelled positions of `labels` (B, T) (IGNORE_INDEX elsewhere,
    where the three are 0): a span is a maximal run of labelled positions; left = the position before its first,
    right = the position after its last (at most T - 1), offset = the position's distance from its first (0-based)."""
    B, T = labels.shape
    sel = labels != IGNORE_INDEX
    pos = torch.arange(T).expand(B, T)
    before = torch.cat([torch.zeros(B, 1, dtype=torch.bool), sel[:, :-1]], 1)
    after = torch.cat([sel[:, 1:], torch.zeros(B, 1, dtype=torch.bool)], 1)
    start = torch.cummax(torch.where(sel & ~before, pos, torch.zeros_like(pos)), dim=1).values  # (B, T)
    last = torch.where(sel & ~after, pos, torch.full_like(pos, T))
    end = torch.flip(torch.cummin(torch.flip(last, [1]), dim=1).values, [1])  # (B, T) the run's last position
    zero = torch.zeros_like(pos)
    return (torch.where(sel, (start - 1).clamp(min=0), zero), torch.where(sel, (end + 1).clamp(max=T - 1), zero),
            torch.where(sel, pos - start, zero))


def add_boundary_slots(batch: dict) -> dict:
    """`batch` (with prediction slots, engine/pretraining/step_inputs.add_prediction_slots) plus sbo_left, sbo_right,
    sbo_offset (B * P,) long at its slots, in the slots' order (0 at unused slots). A new dict."""
    left, right, offset = span_boundaries(batch["labels"])
    rows, cols = batch["mlm_rows"], batch["mlm_cols"]
    out = dict(batch)
    out.update(sbo_left=left[rows, cols], sbo_right=right[rows, cols], sbo_offset=offset[rows, cols])
    return out


def boundary_inputs(hidden, rows, left, right, offset, positions) -> torch.Tensor:
    """h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}] (N, 3H) from the (B, T, H) `hidden` states at the boundary positions only,
    and the (MAX_SPAN_PIECES, H) `positions` table at each offset (longer spans share the last)."""
    p = F.embedding(offset.clamp(max=positions.shape[0] - 1), positions)
    return torch.cat([hidden[rows, left], hidden[rows, right], p], dim=-1)


class SpanBoundaryHead(nn.Module):
    """The SBO's two layers, (N, 3H) -> (N, H): LayerNorm(GeLU(W1 h0)), then LayerNorm(GeLU(W2 h1)); `positions`
    holds p_1..p_MAX. The vocabulary projection is the caller's (the tied word embeddings and `bias`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.positions = nn.Embedding(MAX_SPAN_PIECES, H)
        self.dense1, self.norm1 = nn.Linear(3 * H, H), nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dense2, self.norm2 = nn.Linear(H, H), nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h0):
        h = linear(h0, self.dense1.weight, self.dense1.bias, gelu=True)
        h = F.layer_norm(h, self.norm1.normalized_shape, self.norm1.weight, self.norm1.bias, self.norm1.eps)
        h = linear(h, self.dense2.weight, self.dense2.bias, gelu=True)
        return F.layer_norm(h, self.norm2.normalized_shape, self.norm2.weight, self.norm2.bias, self.norm2.eps)


@dataclass
class SpanBoundaryOutput(BertOutput):
    sbo_loss_sum: Optional[torch.Tensor] = None  # () fp32: the SBO's summed cross-entropy at the valid slots
    sbo_predictions: Optional[torch.Tensor] = None  # (N,) its argmax token ids


class SpanBoundaryPreTraining(BertForPreTraining):
    """BERT (its MLM head, NSP when the objective has it) with the span boundary head `sbo`."""

    def __init__(self, config: BertConfig):
        if not config.has_mlm_head or config.causal:
            raise EngineError("the span boundary objective predicts masked spans beside masked LM; use it with a "
                              "masked objective (mlm, mlm+nsp, mlm+sop) and --span-mask")
        super().__init__(config)
        self.sbo = SpanBoundaryHead(config)
        self.sbo.apply(self._init_weights)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, mlm_positions=None, unpad=False, mlm_targets=None, packing=None,
                span_boundaries=None) -> SpanBoundaryOutput:
        """`span_boundaries` (left (N,), right (N,), offset (N,)) at the `mlm_positions` slots (a (rows, columns)
        pair) with their `mlm_targets`: adds the SBO's summed cross-entropy and argmax there."""
        out = SpanBoundaryOutput(**vars(super().forward(input_ids, token_type_ids, attention_mask, output_attentions,
                                                        output_hidden_states, mlm_positions, unpad, mlm_targets, packing)))
        if span_boundaries is not None:
            if packing is not None or not isinstance(mlm_positions, tuple) or mlm_targets is None:
                raise EngineError("--span-boundary reads unpacked batches with their prediction slots; drop --packing")
            left, right, offset = span_boundaries
            h = self.sbo(boundary_inputs(out.last_hidden_state, mlm_positions[0], left, right, offset,
                                         self.sbo.positions.weight))
            out.sbo_loss_sum, out.sbo_predictions = vocab_cross_entropy(h, self.bert.embeddings.word.weight,
                                                                        self.sbo.bias, mlm_targets)
        return out


def save_head(model, folder) -> None:
    """The span boundary head's weights in `folder`/HEAD_FILE (a checkpoint being written)."""
    from safetensors.torch import save_file
    from engine.fileio import atomic_save_with
    model = getattr(getattr(model, "module", model), "_orig_mod", getattr(model, "module", model))  # DDP, compile
    sd = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in model.sbo.state_dict().items()}
    atomic_save_with(Path(folder) / HEAD_FILE, lambda p: save_file(sd, p, metadata={"format": "pt"}))


def load_head(model, folder) -> None:
    """The span boundary head of `model` from `folder`/HEAD_FILE (EngineError when it is missing or does not fit)."""
    from safetensors.torch import load_file
    path = Path(folder) / HEAD_FILE
    if not path.is_file():
        raise EngineError(f"{folder} has no {HEAD_FILE}, so the span boundary head cannot continue from it; resume "
                          f"from a checkpoint of a --span-boundary run")
    try:
        model.sbo.load_state_dict(load_file(str(path)))
    except Exception as e:  # a damaged file, or one of another model's size
        raise EngineError(f"{path} could not be read into the span boundary head ({str(e).splitlines()[0][:120]}); "
                          f"resume with the run's own settings or from another checkpoint") from e
