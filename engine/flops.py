"""What a model step costs: `model_flops` counts the matrix-multiply FLOPs of a forward (or training step) (`electra_flops`:
ELECTRA's generator and discriminator together) and
`pretrain_step_times` times real pre-training steps on the CPU. The benchmark (engine.bench) reports both sides'
throughput against these FLOPs; the studies' planner and speed check (engine.ablations.planner, .timing) use them
without loading the benchmark."""
import time

import torch
import torch.nn.functional as F

from engine.config import BertConfig
from engine.device import amp
from engine.model import BertForPreTraining


def model_flops(cfg: BertConfig, lengths, n_mlm: int = 0, n_cls: int = 0, train: bool = True, pooler: bool = True) -> float:
    """Matrix-multiply FLOPs the model needs for sequences of the given real `lengths`: per layer and token
    2*(4H^2 + 2HI), attention 4*n^2*H per sequence of n tokens and layer, the MLM head (2H^2 + 2HV) at `n_mlm`
    positions, the pooler and a classifier with `n_cls` outputs. Training counts 3x the forward."""
    H, I, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.vocab_size
    f = 0.0
    for n in lengths:
        f += L * (n * 2 * (4 * H * H + 2 * H * I) + 4 * n * n * H)
        if pooler:
            f += 2 * H * H + 2 * H * n_cls
    f += n_mlm * (2 * H * H + 2 * H * V)
    return 3 * f if train else f


def electra_flops(cfg: BertConfig, generator: BertConfig, lengths, n_mlm: int, train: bool = True) -> float:
    """Matrix-multiply FLOPs of an ELECTRA step (engine/electra.py): the discriminator of `cfg` at every token
    (`model_flops` with no MLM head and no pooler) and its replaced-token head (2H^2 + 2H a token), plus the
    `generator`: the projection from the shared embeddings (2HG a token where G != H), its layers (`model_flops` of
    its config) and its MLM head at the `n_mlm` masked positions (2GH + 2HV). Both networks count, so an
    equal-compute comparison with MLM is honest; the sampling has no matrix multiply. Training counts 3x the forward
    (the generator's backward too: its MLM loss trains it)."""
    H = cfg.hidden_size
    f = model_flops(cfg, lengths, train=False, pooler=False) + sum(lengths) * (2 * H * H + 2 * H)
    f += generator_flops(cfg, generator, lengths, n_mlm)
    return 3 * f if train else f


def generator_flops(cfg: BertConfig, generator: BertConfig, lengths, n_mlm: int) -> float:
    """Forward matrix-multiply FLOPs of ELECTRA's generator (engine/electra.py) for a model of `cfg`: the projection
    from the shared embeddings (2HG a token where G != H), its layers and its MLM head at the `n_mlm` masked
    positions (2GH + 2HV)."""
    H, G, V = cfg.hidden_size, generator.hidden_size, cfg.vocab_size
    return (model_flops(generator, lengths, train=False, pooler=False) + (sum(lengths) * 2 * H * G if G != H else 0)
            + n_mlm * (2 * G * H + 2 * H * V))


def generator_mlm_flops(cfg: BertConfig, generator: BertConfig, lengths, n_mlm: int, n_pred: int,
                        train: bool = True) -> float:
    """Matrix-multiply FLOPs of a Replace MLM or All-Tokens MLM step (engine/replace_mlm.py): the model (`model_flops`
    with its MLM head at the `n_pred` positions it predicts: the masked ones, or every token) and the generator at the
    `n_mlm` masked positions (`generator_flops`). Training counts 3x the forward, the generator's backward too."""
    f = model_flops(cfg, lengths, n_mlm=n_pred, train=False, pooler=False) + generator_flops(cfg, generator, lengths, n_mlm)
    return 3 * f if train else f


def pretrain_step_times(config: BertConfig, T: int, B: int, mask_rate: float, loss_path: str, steps: int,
                        warmup: int, precision: str, seed: int = 0) -> list:
    """Seconds of each timed pre-training step on the CPU (after `warmup` untimed ones): forward, loss, backward and
    an AdamW step of a random (B, T) batch, the MLM head at `mask_rate` of the positions or, for `config.causal`
    (the LTR objective), at every position. `loss_path`: "plain" (F.cross_entropy on the (N, V) logits) or
    "blocked" (engine.vocab_loss, what pre-training does). examples/step_profile.py prints it; the studies' speed
    check (engine.ablations.timing) uses it."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    causal = config.causal
    model = BertForPreTraining(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, config.vocab_size, (B, T), generator=g)  # (B, T)
    tt, am = torch.zeros_like(ids), torch.ones_like(ids)
    sel = torch.ones(B, T, dtype=torch.bool) if causal else torch.rand(B, T, generator=g) < mask_rate  # (B, T)
    target = torch.randint(5, config.vocab_size, (int(sel.sum()),), generator=g)  # (N,)
    out = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        with amp("cpu", precision):
            if loss_path == "plain":
                logits = model(ids, tt, am, mlm_positions=sel).mlm_logits.float()  # (N, V)
                loss = F.cross_entropy(logits, target)
            else:
                loss = model(ids, tt, am, mlm_positions=sel, mlm_targets=target).mlm_loss_sum / len(target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out
