"""One micro-batch's loss: the objective's labels (the next tokens for a left-to-right model, `ltr_labels`), the
token loss at the prediction slots, the pair task's (NSP or SOP) loss, ELECTRA's discriminator loss and SpanBERT's
span boundary loss when the batch carries its slots (`forward_loss`), and the named sums a
metrics window adds up (`sums_vector`, `sums_of`: engine.objectives.SUMS). The training loop and the held-out
evaluation both call it, and so does the benchmark."""
import torch
import torch.nn.functional as F

from engine.device import to_device
from engine.electra import replaced_token_loss
from engine.objectives import SUMS, Objective
from engine.pretraining.masking import IGNORE_INDEX


def ltr_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Next-token targets: labels[:, t] = input_ids[:, t+1] where position t+1 is real, else -100. (B, T)"""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    nxt_real = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    labels[:, :-1] = torch.where(nxt_real, input_ids[:, 1:], torch.full_like(input_ids[:, 1:], IGNORE_INDEX))
    return labels


def forward_loss(model, batch: dict, obj: Objective, device, amp_ctx, predictions: list = None):
    """(loss, sums) of a micro-batch: the mean cross-entropy of the token predictions (+ the NSP cross-entropy
    when the objective has NSP), and its metric sums as a (len(SUMS),) float64 vector (engine.objectives.SUMS).
    The batch carries its prediction slots (engine.pretraining.step_inputs: fixed shapes, counts made on the host,
    so nothing here waits for the device) and, when packed, its `packing`.
    `predictions`, when given, gets the (N,) predicted token ids at the labelled positions (held-out evaluation)."""
    input_ids = to_device(batch["input_ids"], device)  # (B, T), or (B', T) packed rows
    token_type = to_device(batch["token_type_ids"], device)
    packing = batch.get("packing")
    # no mask where the batch has no padding (SDPA's fastest kernels), as the host knows (step_inputs: "padded")
    attn = to_device(batch["attention_mask"], device) if packing is None and batch["padded"] else None
    if packing is not None:
        packing = packing.to(device)
    rows, cols = to_device(batch["mlm_rows"], device), to_device(batch["mlm_cols"], device)  # (B * P,) each
    target = to_device(batch["mlm_targets"], device)  # (B * P,), IGNORE_INDEX at unused slots
    valid = to_device(batch["mlm_valid"], device)
    sbo = {} if "sbo_left" not in batch else {"span_boundaries": tuple(  # --span-boundary (engine/span_boundary.py)
        to_device(batch[k], device) for k in ("sbo_left", "sbo_right", "sbo_offset"))}
    with amp_ctx:  # the summed cross-entropy over the vocabulary without its (N, V) logits (engine.vocab_loss)
        out = model(input_ids, token_type, attn, mlm_positions=(rows, cols), mlm_targets=target, packing=packing, **sbo)
    token_sum, pred = out.mlm_loss_sum, out.mlm_predictions  # (), (B * P,)
    n = batch["mlm_n"]
    loss = token_sum / max(n, 1)
    if obj.all_tokens:  # All-Tokens MLM: the mean over every real token, masked or not (engine/replace_mlm.py)
        loss = (token_sum + out.other_loss_sum) / max(batch["real_tokens"], 1)
    if predictions is not None:
        predictions.append(pred[valid])
    sums = {"token_loss": token_sum.detach().double(), "token_correct": ((pred == target) & valid).sum().double(),
            "token_n": n}
    if obj.nsp:
        nsp_logits = out.nsp_logits.float()  # (B, 2): one per instance, packed or not
        nsp_target = to_device(batch["next_sentence_label"], device)
        nsp_loss = F.cross_entropy(nsp_logits, nsp_target)
        loss = loss + nsp_loss
        sums.update(nsp_loss=nsp_loss.detach().double() * len(nsp_target),
                    nsp_correct=(nsp_logits.detach().argmax(-1) == nsp_target).sum().double(), nsp_n=len(nsp_target))
    if sbo:  # SpanBERT's L_MLM + L_SBO, both means over the masked tokens
        loss = loss + out.sbo_loss_sum / max(n, 1)
        sums.update(sbo_loss=out.sbo_loss_sum.detach().double(), sbo_n=n,
                    sbo_correct=((out.sbo_predictions == target) & valid).sum().double())
    if obj.fills:  # Replace MLM, All-Tokens MLM: the generator's own MLM loss beside the model's (engine/replace_mlm.py)
        loss = loss + out.gen_loss_sum / max(n, 1)
        sums.update(gen_loss=out.gen_loss_sum.detach().double(), gen_n=n,
                    gen_correct=((out.gen_predictions == target) & valid).sum().double())
    if obj.rtd:  # ELECTRA: the discriminator's binary loss over every real token, x lambda (engine/electra.py)
        judged, count = ((masked_positions(input_ids, rows[valid], cols[valid]), n) if obj.rtd_masked  # ELECTRA 15%
                         else (to_device(batch["attention_mask"], device), batch["real_tokens"]))
        rtd_loss, rtd_sums = replaced_token_loss(out.rtd_logits, out.rtd_labels, judged, count)
        loss = loss + obj.rtd_weight * rtd_loss
        sums.update(rtd_sums)
    sums.update(loss=loss.detach().double(), tokens=batch["real_tokens"], batches=1.0)
    return loss, sums_vector(sums, device)


def masked_positions(input_ids: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(B, T) 0/1: 1 at the masked positions (rows, cols) (N,) of a (B, T) batch, the positions ELECTRA 15%'s
    discriminator is judged at."""
    return torch.zeros_like(input_ids).index_put((rows, cols), torch.ones_like(rows))


def sums_vector(sums: dict, device) -> torch.Tensor:
    """{name in SUMS: value} -> (len(SUMS),) float64 (names left out are 0)."""
    v = torch.zeros(len(SUMS), dtype=torch.float64, device=device)
    for name, x in sums.items():
        v[SUMS.index(name)] = x
    return v


def sums_of(v: torch.Tensor) -> dict:
    """The named sums of a (len(SUMS),) vector."""
    return dict(zip(SUMS, v.tolist()))
