"""ELECTRA's pre-training pair (Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
Generators", sections 2 and 3.1-3.2): a small MLM generator fills the masked positions with samples, and the
discriminator, the model the run is for, learns to tell at every real token whether it was replaced.

N = masked positions of a batch (its prediction slots), V = vocabulary, H = the discriminator's hidden size,
G = the generator's (`generator_config`: --generator-size x H).

- `Generator`: the discriminator's embeddings (shared: one module, so the token, position and segment tables and the
  embedding LayerNorm are one set of tensors), a projection H -> G (transformers' `embeddings_project`), L post-LN
  layers of width G, and an MLM head (dense G -> H, GELU, LayerNorm) whose output layer is the shared word
  embeddings plus a bias (transformers' ElectraForMaskedLM, whose shape it has).
- `ElectraPreTraining`: the discriminator (a `BertForPreTraining` without MLM or NSP head, so checkpoints, fine-tuning,
  features, probes and attention views load it as any BERT encoder), its replaced-token head `DiscriminatorHead`
  (dense H -> H, GELU, dense H -> 1: transformers' `discriminator_predictions`) and the generator. Its forward with
  masked positions and their targets is one ELECTRA step: the generator's summed cross-entropy at the masked
  positions; a sample from its softmax there (temperature 1, Gumbel-max, no gradient through the sampling, as the
  paper); the discriminator on the input with the samples in place; its logits and labels at every position.
- `replace_tokens`: the defining rule. The discriminator's label is 1 exactly where the sampled input differs from the
  original text: a sample equal to the original token is labelled "original" (paper section 2).
- `replaced_token_loss`: the mean binary cross-entropy over the real tokens ([CLS] and [SEP] included, as the
  released code's input mask); engine/pretraining/loss.py adds it x 50 (lambda, engine.objectives.ELECTRA) to the
  generator's MLM loss.
- Checkpoints (`save_pair`, `load_pair`): the run's checkpoint folder holds the discriminator as a BERT encoder
  (config.json, model.safetensors: what engine.load and fine-tuning read, unchanged) and, beside it,
  `discriminator/` (transformers' ElectraForPreTraining: the encoder and its replaced-token head) and `generator/`
  (transformers' ElectraForMaskedLM: the generator with its copy of the shared embeddings). Both load in
  transformers with no missing or unexpected weights; engine.load ignores the sub-folders.

Where ours departs from the paper: the generator's width is a fraction of the discriminator's hidden size
(--generator-size; the paper's 1/4-1/2 by its Figure 3, 1/4 for ELECTRA-Small), its layer count is the
discriminator's and its heads are G/64 (at least 1), its feed-forward 4G; only the embeddings are shared (the paper's
choice for a smaller generator), the embedding LayerNorm with them; no separate embedding size (ELECTRA-Small's 128)
and no weight tying of the hidden layers; the masking is the studio's (--mask-rate of the real tokens, whole words or
spans as set; the paper: 15%, 25% for Large), all [MASK] in the generator's input; samples may be any token, the
original included (as the paper; no disallowed set); the loss is summed per batch as the paper's code does it,
and the discriminator's pooler is left untrained (ELECTRA has none; fine-tuning trains it).
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
from engine.model import BertEmbeddings, BertForPreTraining, BertLayer, BertOutput, attention_mask_4d
from engine.vocab_loss import IGNORE_INDEX

DISCRIMINATOR_DIR = "discriminator"  # transformers' ElectraForPreTraining, inside a run's checkpoint folder
GENERATOR_DIR = "generator"  # transformers' ElectraForMaskedLM, beside it


def generator_config(config: BertConfig, size: float) -> BertConfig:
    """The generator's BertConfig for a discriminator of `config`: hidden size `size` x H (heads G/64, at least 1,
    G a multiple of them; feed-forward 4G), the same layers, vocabulary and positions, no heads of its own."""
    if not 0.0 < float(size) <= 1.0:
        raise EngineError(f"--generator-size {size} must be in (0, 1]: the generator's share of the discriminator's "
                          f"hidden size (the paper: 0.25 to 0.5)")
    g = max(1, int(round(float(size) * config.hidden_size)))
    heads = max(1, g // 64)
    g = max(heads, g - g % heads)
    return config.replace(hidden_size=g, num_heads=heads, intermediate_size=4 * g, has_mlm_head=True,
                          has_nsp_head=False, causal=False)


class Generator(nn.Module):
    """The small MLM: shared embeddings (width H), projection to G, L layers of width G, MLM head back to H and the
    shared word embeddings. `forward` gives the (N, V) logits at the given positions."""

    def __init__(self, config: BertConfig, embeddings: BertEmbeddings):
        super().__init__()
        self.config = config
        self.shared = [embeddings]  # a list: the discriminator registers the embeddings, once
        E, G = embeddings.word.weight.shape[1], config.hidden_size
        self.project = nn.Linear(E, G) if G != E else None
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_layers)])
        self.dense = nn.Linear(G, E)
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    @property
    def embeddings(self) -> BertEmbeddings:
        return self.shared[0]

    def forward(self, input_ids, token_type_ids, attention_mask, rows, cols):  # (B, T) ... -> (N, V)
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, E)
        if self.project is not None:
            x = linear(x, self.project.weight, self.project.bias)  # (B, T, G)
        mask = attention_mask_4d(attention_mask, input_ids.shape[1], False, input_ids.device)
        for layer in self.layers:
            x, _ = layer(x, mask)
        h = linear(x[rows, cols], self.dense.weight, self.dense.bias, gelu=True)  # (N, E)
        h = F.layer_norm(h, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
        return linear(h, self.embeddings.word.weight, self.bias)  # (N, V)


class DiscriminatorHead(nn.Module):
    """Replaced or original at each position: dense H -> H, GELU, dense H -> 1; (..., H) -> (...,) logits, > 0 means
    replaced (transformers' ElectraDiscriminatorPredictions)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dense_prediction = nn.Linear(hidden_size, 1)

    def forward(self, h):
        return linear(linear(h, self.dense.weight, self.dense.bias, gelu=True), self.dense_prediction.weight,
                      self.dense_prediction.bias).squeeze(-1)


@dataclass
class ElectraOutput(BertOutput):
    """BertOutput of the discriminator plus its replaced-token logits and, in a training step, their labels."""

    rtd_logits: Optional[torch.Tensor] = None  # (B, T): > 0 means "replaced"
    rtd_labels: Optional[torch.Tensor] = None  # (B, T) bool: the sampled input differs from the original there
    corrupted_ids: Optional[torch.Tensor] = None  # (B, T): the discriminator's input


def sample(logits, generator: Optional[torch.Generator] = None):
    """One token per row from softmax(logits) (temperature 1) by the Gumbel-max trick: (N, V) -> (N,)."""
    u = torch.rand(logits.shape, device=logits.device, generator=generator)
    return (logits.float() - torch.log(-torch.log(u))).argmax(-1)


def replace_tokens(input_ids, rows, cols, valid, samples, targets):
    """(the discriminator's input (B, T), its labels (B, T) bool): the masked `input_ids` with `samples` (N,) put at
    the valid slots (rows, cols) (N,), and True exactly where that input differs from the original text (the
    `targets` (N,) at the slots, `input_ids` elsewhere). A sample equal to its target is labelled False."""
    here = input_ids[rows, cols]  # (N,)
    corrupted = input_ids.index_put((rows, cols), torch.where(valid, samples, here))
    original = input_ids.index_put((rows, cols), torch.where(valid, targets, here))
    return corrupted, corrupted != original


def replaced_token_loss(logits, labels, real, n_real: int):
    """(mean binary cross-entropy over the real tokens, the metric sums engine.objectives.SUMS names) of the
    discriminator's (B, T) logits against its (B, T) labels; `real` (B, T) the attention mask, `n_real` its count
    (a host number, so nothing waits for the device)."""
    w = real.to(torch.float32)
    y = labels.to(torch.float32)
    bce = F.binary_cross_entropy_with_logits(logits.float(), y, reduction="none")  # (B, T)
    total = (bce * w).sum()
    right = (((logits.detach() > 0) == labels) & real.bool()).sum()
    sums = {"disc_loss": total.detach().double(), "disc_correct": right.double(), "disc_n": n_real,
            "disc_replaced": (labels & real.bool()).sum().double()}
    return total / max(n_real, 1), sums


class ElectraPreTraining(BertForPreTraining):
    """The discriminator (this BertForPreTraining, without MLM or NSP head), its `rtd` head and the `generator`,
    which shares its embeddings. `config` is the discriminator's (engine.pretraining.config.model_config)."""

    def __init__(self, config: BertConfig, generator_size: float):
        if config.has_mlm_head or config.has_nsp_head or config.causal:
            raise EngineError("ELECTRA's discriminator has no MLM or NSP head and reads both ways; build it from "
                              "--objective electra's model config")
        super().__init__(config)
        self.rtd = DiscriminatorHead(config.hidden_size)
        self.generator = Generator(generator_config(config, generator_size), self.bert.embeddings)
        self.rtd.apply(self._init_weights)
        self.generator.apply(self._init_weights)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, mlm_positions=None, unpad=False, mlm_targets=None,
                packing=None) -> ElectraOutput:
        """With `mlm_positions` (rows (N,), columns (N,)) and `mlm_targets` (N,) (IGNORE_INDEX at unused slots): one
        ELECTRA step on the masked `input_ids` (mlm_loss_sum and mlm_predictions are the generator's; rtd_logits
        and rtd_labels the discriminator's at every position). Without them: the discriminator on the ids as given."""
        if packing is not None:
            raise EngineError("--objective electra does not pack instances; drop --packing")
        if mlm_positions is None or mlm_targets is None:
            out = self.bert(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states, unpad)
            res = ElectraOutput(**vars(out))
            res.rtd_logits = self.rtd(out.last_hidden_state)
            return res
        rows, cols = mlm_positions
        logits = self.generator(input_ids, token_type_ids, attention_mask, rows, cols).float()  # (N, V)
        loss_sum = F.cross_entropy(logits, mlm_targets, ignore_index=IGNORE_INDEX, reduction="sum")
        with torch.no_grad():  # no gradient through the sampling (paper section 2)
            samples = sample(logits.detach())
        corrupted, labels = replace_tokens(input_ids, rows, cols, mlm_targets != IGNORE_INDEX, samples, mlm_targets)
        res = ElectraOutput(**vars(self.bert(corrupted, token_type_ids, attention_mask, output_attentions, output_hidden_states)))
        res.mlm_loss_sum, res.mlm_predictions = loss_sum, logits.detach().argmax(-1)
        res.rtd_logits, res.rtd_labels, res.corrupted_ids = self.rtd(res.last_hidden_state), labels, corrupted
        return res


# ------------------------------------------------------------------ checkpoints: transformers' ELECTRA layout
EMBEDDING_NAMES = (("word", "word_embeddings"), ("position", "position_embeddings"), ("segment", "token_type_embeddings"),
                   ("norm", "LayerNorm"))
LAYER_NAMES = (("attention.out", "attention.output.dense"), ("attn_norm", "attention.output.LayerNorm"),
               ("ffn_in", "intermediate.dense"), ("ffn_out", "output.dense"), ("ffn_norm", "output.LayerNorm"))
QKV = ("query", "key", "value")


def encoder_tensors(embeddings, layers) -> dict:
    """{transformers' ElectraModel name: tensor} of our embeddings (None: left out) and layers (query/key/value split)."""
    out = {}
    for ours, theirs in (EMBEDDING_NAMES if embeddings is not None else ()):
        for k, v in getattr(embeddings, ours).state_dict().items():
            out[f"embeddings.{theirs}.{k}"] = v
    for i, layer in enumerate(layers):
        sd, h = layer.state_dict(), f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            for name, t in zip(QKV, sd[f"attention.qkv.{kind}"].chunk(3)):
                out[f"{h}attention.self.{name}.{kind}"] = t
            for ours, theirs in LAYER_NAMES:
                out[f"{h}{theirs}.{kind}"] = sd[f"{ours}.{kind}"]
    return out


def generator_tensors(g: Generator) -> dict:
    """{name: tensor} of transformers' ElectraForMaskedLM for a `Generator` (the tied LM weight is the word
    embeddings, not stored, as transformers does)."""
    gen = {"electra." + k: v for k, v in encoder_tensors(g.embeddings, g.layers).items()}
    if g.project is not None:
        gen.update({f"electra.embeddings_project.{k}": v for k, v in g.project.state_dict().items()})
    gen.update({f"generator_predictions.dense.{k}": v for k, v in g.dense.state_dict().items()})
    gen.update({f"generator_predictions.LayerNorm.{k}": v for k, v in g.norm.state_dict().items()})
    gen["generator_lm_head.bias"] = g.bias
    return gen


def pair_tensors(model: ElectraPreTraining) -> tuple:
    """({name: tensor} of transformers' ElectraForPreTraining, the same of its ElectraForMaskedLM) for `model`'s
    discriminator and generator."""
    disc = {"electra." + k: v for k, v in encoder_tensors(model.bert.embeddings, model.bert.layers).items()}
    disc.update({f"discriminator_predictions.{k}": v for k, v in model.rtd.state_dict().items()})
    return disc, generator_tensors(model.generator)


def electra_config(config: BertConfig, embedding_size: int, architecture: str) -> dict:
    """config.json of transformers' ELECTRA for one of the pair (ElectraConfig's own dict)."""
    from transformers import ElectraConfig
    return ElectraConfig(vocab_size=config.vocab_size, embedding_size=embedding_size, hidden_size=config.hidden_size,
                         num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
                         intermediate_size=config.intermediate_size, hidden_act="gelu",
                         hidden_dropout_prob=config.hidden_dropout, attention_probs_dropout_prob=config.attention_dropout,
                         max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
                         initializer_range=config.initializer_range, layer_norm_eps=config.layer_norm_eps,
                         pad_token_id=config.pad_token_id, architectures=[architecture]).to_dict()


def save_pair(model, folder, tokenizer) -> None:
    """Write `discriminator/` (ElectraForPreTraining) and `generator/` (ElectraForMaskedLM) into a checkpoint folder
    being written (engine.pretraining.run_folder.save_checkpoint; its root holds the discriminator as BERT). A model
    with a generator and no discriminator (engine/replace_mlm.py: its root is a BERT with its MLM head): the
    generator only."""
    from safetensors.torch import save_file
    from engine.fileio import atomic_save_with, atomic_write_json
    model = getattr(getattr(model, "module", model), "_orig_mod", getattr(model, "module", model))  # DDP, compile
    E = model.config.hidden_size
    subs = [(GENERATOR_DIR, generator_tensors(model.generator), model.generator.config, "ElectraForMaskedLM")]
    if isinstance(model, ElectraPreTraining):
        subs.insert(0, (DISCRIMINATOR_DIR, pair_tensors(model)[0], model.config, "ElectraForPreTraining"))
    for sub, tensors, config, arch in subs:
        d = Path(folder) / sub
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_json(d / "config.json", electra_config(config, E, arch))
        sd = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in tensors.items()}
        atomic_save_with(d / "model.safetensors", lambda p, sd=sd: save_file(sd, p, metadata={"format": "pt"}))
        tokenizer.save(d)


def read_tensors(folder: Path) -> dict:
    """The tensors of `folder`/model.safetensors (EngineError when it is missing or unreadable)."""
    from safetensors.torch import load_file
    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        raise EngineError(f"{folder} has no model.safetensors; this checkpoint was not saved by an --objective electra "
                          f"run (its {DISCRIMINATOR_DIR}/ and {GENERATOR_DIR}/ folders): pick one that was")
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors' own error types, an OSError, a truncated header
        raise EngineError(f"{path} is corrupt or truncated ({str(e).splitlines()[0][:120] if str(e) else type(e).__name__}); "
                          f"restore it or load an earlier checkpoint") from e


def load_module(module: nn.Module, sd: dict, names: dict, source) -> None:
    """Load `module` from `sd`, its parameter k read under names[k] (EngineError naming what is missing or misfits)."""
    try:
        module.load_state_dict({k: sd[names[k]] for k in module.state_dict()})
    except KeyError as e:
        raise EngineError(f"{source} has no tensor {e.args[0]!r}; it is not this run's ELECTRA pair (resume from "
                          f"another checkpoint)") from e
    except RuntimeError as e:
        raise EngineError(f"{source}: the weights do not fit the run's model ({str(e).splitlines()[-1].strip()[:160]}); "
                          f"resume with the run's own settings") from e


def load_encoder(embeddings, layers, sd: dict, prefix: str, source) -> None:
    """Our embeddings (None: skipped) and layers from transformers' ELECTRA names under `prefix`."""
    for ours, theirs in (EMBEDDING_NAMES if embeddings is not None else ()):
        m = getattr(embeddings, ours)
        load_module(m, sd, {k: f"{prefix}embeddings.{theirs}.{k}" for k in m.state_dict()}, source)
    for i, layer in enumerate(layers):
        h = f"{prefix}encoder.layer.{i}."
        state = {}
        for kind in ("weight", "bias"):
            parts = [sd.get(f"{h}attention.self.{n}.{kind}") for n in QKV]
            if any(p is None for p in parts):
                raise EngineError(f"{source} has no tensor '{h}attention.self.query.{kind}'; it is not this run's ELECTRA "
                                  f"pair (resume from another checkpoint)")
            state[f"attention.qkv.{kind}"] = torch.cat(parts, dim=0)
            state.update({f"{ours}.{kind}": sd[f"{h}{theirs}.{kind}"] for ours, theirs in LAYER_NAMES
                          if f"{h}{theirs}.{kind}" in sd})
        load_module(layer, state, {k: k for k in layer.state_dict()}, source)


def load_pair(model, folder) -> None:
    """The discriminator (encoder and head) and the generator of `model` from a checkpoint's `discriminator/` and
    `generator/` (what `save_pair` wrote); the shared embeddings are read from the discriminator's. A model without
    a discriminator (engine/replace_mlm.py): the generator only (its embeddings are the model's, loaded with it)."""
    if isinstance(model, ElectraPreTraining):
        d = Path(folder) / DISCRIMINATOR_DIR
        disc = read_tensors(d)
        load_encoder(model.bert.embeddings, model.bert.layers, disc, "electra.", d)
        load_module(model.rtd, disc, {k: f"discriminator_predictions.{k}" for k in model.rtd.state_dict()}, d)
    g = Path(folder) / GENERATOR_DIR
    gen = read_tensors(g)
    G = model.generator
    load_encoder(None, G.layers, gen, "electra.", g)
    if G.project is not None:
        load_module(G.project, gen, {k: f"electra.embeddings_project.{k}" for k in G.project.state_dict()}, g)
    load_module(G.dense, gen, {k: f"generator_predictions.dense.{k}" for k in G.dense.state_dict()}, g)
    load_module(G.norm, gen, {k: f"generator_predictions.LayerNorm.{k}" for k in G.norm.state_dict()}, g)
    with torch.no_grad():
        if "generator_lm_head.bias" not in gen:
            raise EngineError(f"{g} has no tensor 'generator_lm_head.bias'; it is not this run's ELECTRA pair")
        G.bias.copy_(gen["generator_lm_head.bias"])


def check_settings(cfg) -> None:
    """One line for a PretrainConfig of an objective with a generator (electra, electra-15, replace-mlm, all-tokens-mlm) that
    cannot train: the generator's size, a start from another model (the generator would have no weights), packing,
    masking shares other than all [MASK]."""
    name = f"--objective {cfg.objective}"
    if not 0.0 < float(cfg.generator_size) <= 1.0:
        raise EngineError(f"--generator-size {cfg.generator_size} must be in (0, 1]: the generator's share of the "
                          f"model's hidden size (the paper: 0.25 to 0.5)")
    if cfg.init:
        raise EngineError(f"{name} trains a generator and its model from scratch; drop --init (or continue a BERT "
                          f"with --objective mlm)")
    if cfg.packing:
        raise EngineError(f"{name} does not pack instances; drop --packing")
    if tuple(float(r) for r in cfg.mask_ratios) not in ((0.8, 0.1, 0.1), (1.0, 0.0, 0.0)):
        raise EngineError(f"{name} puts [MASK] at every selected position of the generator's input (the paper), so "
                          f"--mask-ratios {','.join(f'{r:g}' for r in cfg.mask_ratios)} does not apply; drop it")
