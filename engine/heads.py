"""Task heads on top of the pre-trained encoder (paper 3.2, 4.1-4.4, 5.1 and Figure 4).

B = batch size, T = sequence length, H = hidden size, K = number of labels, N = choices per example.

Only an output layer is new (paper 3.2); everything else is the pre-trained `BertModel` and is fine-tuned too.
- "classification": dropout 0.1 + W (K x H) on C, the pooled [CLS] vector (4.1); loss log(softmax(C W^T)).
- "regression": the same with K = 1 and a squared-error loss (STS-B).
- "tagging": dropout + W (K x H) on every final hidden vector T_i (5.3; the fine-tuning loop scores only the
  first WordPiece of each word).
- "span": the start and end vectors S and E as one Linear(H, 2) on T_i (4.2); for SQuAD v2.0 the [CLS]
  position holds the no-answer score, s_null = S.C + E.C (4.3).
- "multiple_choice": one vector V dotted with the C of each of the N `[CLS] context [SEP] ending` inputs,
  Linear(H, 1) over the (B*N) rows, then a softmax over the N choices (4.4).
- `bilstm=True`: a randomly initialised bidirectional LSTM over the encoder's final hidden states before the
  head: the "LTR & No NSP + BiLSTM" row of Table 5. With it, sequence-level heads read the BiLSTM's summary of
  the sentence (its forward state at the last real token joined with its backward state at [CLS]) instead of the
  pre-trained pooler's C: the pooler of an LTR model saw only [CLS].
A model pre-trained with `ltr` keeps `config.causal=True` (left-context-only attention) when fine-tuned: the
encoder here is the loaded one, unchanged. Under causal attention [CLS] (position 0) sees only itself, so its
vector says nothing about the input; a causal encoder's sequence vector is therefore its final hidden state at
the last real token (the closing [SEP], the one position that has seen the whole input), as OpenAI GPT
classifies from its last token. The paper does not say how its LTR model was fed to sequence-level tasks; this
is our choice, and with it the LTR row of Table 5 is a left-to-right model rather than a constant.

A head that reads only C (`TaskModel.reads_only_c`: no per-token head, no BiLSTM, not causal) asks the encoder
for `pooled_only`, so its last layer runs at [CLS] alone (engine/model.py).

Every new parameter (head, BiLSTM) is initialised from the `torch.Generator` passed in, so random restarts
differ in their head initialisation while sharing the checkpoint. Departures from the paper: the BiLSTM (one
layer, H/2 units per direction, so its output stays H wide) and its use as the sentence summary are our
choices; the paper does not give its size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from engine.model import BertModel
from engine.packing import pack_padded, unpack
from engine.tasks.kinds import HEAD_KINDS, task_kind



def init_linear(layer: nn.Linear, generator: torch.Generator = None, std: float = 0.02) -> nn.Linear:
    """BERT's initialisation (normal, std 0.02, zero bias), drawn from `generator`."""
    with torch.no_grad():
        nn.init.normal_(layer.weight, 0.0, std, generator=generator)
        if layer.bias is not None:
            layer.bias.zero_()
    return layer


class BiLSTM(nn.Module):
    """One bidirectional LSTM layer, H/2 units each way (output H), over the non-padded part of each row."""

    def __init__(self, hidden_size: int, generator: torch.Generator = None):
        super().__init__()
        self.lstm = nn.LSTM(hidden_size, hidden_size // 2, num_layers=1, batch_first=True, bidirectional=True)
        k = 1.0 / (hidden_size // 2) ** 0.5  # PyTorch's default range, but from our generator
        with torch.no_grad():
            for p in self.lstm.parameters():
                nn.init.uniform_(p, -k, k, generator=generator)

    def forward(self, x, attention_mask=None):  # (B, T, H) -> (B, T, H), summary (B, H)
        B, T, H = x.shape
        lengths = attention_mask.sum(1).clamp(min=1) if attention_mask is not None else torch.full((B,), T, device=x.device)
        packed = pack_padded_sequence(x.float(), lengths.cpu(), batch_first=True, enforce_sorted=False)
        with torch.autocast(x.device.type, enabled=False):  # the LSTM in fp32 even under bf16 autocast
            y, _ = self.lstm(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=T)  # (B, T, H)
        half = H // 2
        last = (lengths - 1).to(x.device)
        fwd_last = y[torch.arange(B, device=x.device), last, :half]  # (B, H/2): forward state at the last real token
        bwd_first = y[:, 0, half:]  # (B, H/2): backward state at [CLS], which has read the whole row
        return y, torch.cat([fwd_last, bwd_first], dim=-1)


def last_real_index(h, attention_mask=None) -> torch.Tensor:
    """(B,) the position of each row's last real token (h (B, T, ...); attention_mask (B, T) or None)."""
    if attention_mask is None:
        return torch.full((h.shape[0],), h.shape[1] - 1, dtype=torch.long, device=h.device)
    return (attention_mask.sum(1) - 1).clamp(min=0).to(device=h.device, dtype=torch.long)


def pack_inputs(batch: dict, pad_id: int = 0):
    """A fine-tuning batch's rows (input_ids (B, T) or multiple choice's (B, N, T)) packed into as few rows of T as
    they fit (engine.packing), on the batch's device: what `TaskModel.forward(..., packing=)` reads."""
    ids, types, mask = batch["input_ids"], batch.get("token_type_ids"), batch["attention_mask"]
    T = ids.shape[-1]
    flat = lambda x: None if x is None else x.reshape(-1, T).cpu()
    return pack_padded(flat(ids), flat(types), flat(mask), pad_id=pad_id).to(ids.device)


class TaskModel(nn.Module):
    """The encoder plus one task head. `forward` returns the logits of the task:
    classification (B, K), regression (B,), tagging (B, T, K), span (B, T, 2) as start/end in the last dim,
    multiple_choice (B, N) (inputs (B, N, T))."""

    def __init__(self, bert: BertModel, kind: str, num_labels: int = 2, bilstm: bool = False,
                 dropout: float = 0.1, generator: torch.Generator = None):
        super().__init__()
        if kind not in HEAD_KINDS:  # what each kind reads and outputs: engine.tasks.kinds
            raise ValueError(f"unknown head kind {kind!r}; expected one of {', '.join(HEAD_KINDS)}")
        H = bert.config.hidden_size
        self.kind = kind
        self.task_kind = task_kind(kind)
        self.num_labels = num_labels
        self.bert = bert
        self.bilstm = BiLSTM(H, generator) if bilstm else None
        self.dropout = nn.Dropout(dropout)
        self.head = init_linear(nn.Linear(H, self.task_kind.outputs(num_labels)), generator, bert.config.initializer_range)

    @property
    def config(self):
        return self.bert.config

    @property
    def reads_only_c(self) -> bool:
        """Whether the head reads nothing but C (classification, regression, multiple choice, without the BiLSTM and
        not causal, whose sequence vector is the last token's): the encoder's last layer then runs at [CLS] only."""
        return not self.task_kind.per_token and self.bilstm is None and not self.bert.config.causal

    def encode(self, input_ids, token_type_ids=None, attention_mask=None, packing=None):
        """Final hidden states (B, T, H) and the sequence vector (B, H): C, or the BiLSTM summary. `packing`
        (engine.packing.pack_padded of this batch): the encoder runs on the packed rows and the states come back
        in the padded layout, so every head reads what it reads unpacked. A head that reads only C
        (`reads_only_c`) gets h = None: the encoder computes its last layer at the [CLS] positions only."""
        pooled_only = self.reads_only_c
        if packing is not None:
            out = self.bert(packing.input_ids, packing.token_type_ids, packing=packing, pooled_only=pooled_only)
            h = None if pooled_only else unpack(out.last_hidden_state, packing, input_ids.shape[-1])
            c = out.pooled_output
        else:
            # unpad: the linear layers see only the real tokens when the batch has padding (0 at padded positions,
            # which no head reads: tagging and span losses skip them, C and the last-token vector are real tokens)
            out = self.bert(input_ids, token_type_ids, attention_mask, unpad=attention_mask is not None,
                            pooled_only=pooled_only)
            h, c = out.last_hidden_state, out.pooled_output
        if self.bilstm is not None:
            h, c = self.bilstm(h, attention_mask)
        elif self.bert.config.causal:
            c = h[torch.arange(h.shape[0], device=h.device), last_real_index(h, attention_mask)]  # (B, H)
        return h, c

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, packing=None):
        """`packing`: the batch's rows packed (`pack_inputs`), the same logits within rounding."""
        k = self.task_kind
        if k.choices:
            B, N, T = input_ids.shape
            flat = lambda x: None if x is None else x.reshape(B * N, T)
            _, c = self.encode(flat(input_ids), flat(token_type_ids), flat(attention_mask), packing)  # (B*N, H)
            return self.head(self.dropout(c)).view(B, N)  # (B, N): softmax over the choices in the loss
        h, c = self.encode(input_ids, token_type_ids, attention_mask, packing)
        x = h if k.per_token else c  # tagging and span read every T_i, the others C
        out = self.head(self.dropout(x) if k.dropout else x)  # span: no dropout on the S.T_i and E.T_i scores
        return out.squeeze(-1) if k.regression else out  # (B, K) | (B,) | (B, T, K) | span (B, T, 2)

    def loss(self, logits, batch) -> torch.Tensor:
        """The paper's objective for each kind; `batch` carries `labels` (or start/end positions for spans)."""
        k = self.task_kind
        if k.regression:
            return F.mse_loss(logits.float(), batch["labels"].float())
        if not k.per_token:  # classification, multiple choice (a softmax over the choices)
            return F.cross_entropy(logits.float(), batch["labels"])
        if not k.span:  # tagging
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)
        # span: log-likelihood of the correct start and end (4.2), averaged
        start, end = logits.float().unbind(-1)  # (B, T) each
        mask = batch["attention_mask"].bool()
        start = start.masked_fill(~mask, -1e4)
        end = end.masked_fill(~mask, -1e4)
        return 0.5 * (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"]))
