"""Configurations as flat dataclasses (nanoGPT style).

`BertConfig` is the model's shape. Presets follow the paper (BERT-BASE, BERT-LARGE) and Google's released
small models (Tiny 2/128, Mini 4/256, Small 4/512, Medium 8/512), always with feed-forward size 4H.
Field names mirror Hugging Face's `BertConfig` in `to_hf_dict` so checkpoints load in `transformers`.
"""
import math
from dataclasses import asdict, dataclass, fields, replace

from engine.errors import EngineError

# name: (layers, hidden, heads)
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    num_layers: int = 12  # L
    hidden_size: int = 768  # H
    num_heads: int = 12  # A; head size is H / A
    intermediate_size: int = 3072  # feed-forward size, 4H in the paper
    max_position_embeddings: int = 512  # learned positions; the longest sequence the model accepts
    type_vocab_size: int = 2  # segments A and B
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    causal: bool = False  # True for the LTR ablation: each position attends only to itself and the left
    has_mlm_head: bool = True  # False for encoders shipped without pre-training heads (MiniLM)
    has_nsp_head: bool = True

    def __post_init__(self):
        if self.num_layers < 1 or self.hidden_size < 1 or self.num_heads < 1:
            raise EngineError(f"layers, hidden and heads must be positive (got {self.num_layers}/{self.hidden_size}/{self.num_heads})")
        if self.hidden_size % self.num_heads:
            raise EngineError(f"hidden size {self.hidden_size} is not divisible by {self.num_heads} heads; pick heads that divide it (the paper uses H/64)")
        if self.vocab_size < 6:
            raise EngineError(f"vocabulary size {self.vocab_size} is too small; use at least a few hundred tokens")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        if name not in PRESETS:
            raise EngineError(f"unknown preset '{name}'; choose one of {', '.join(PRESETS)}")
        L, H, A = PRESETS[name]
        cfg = cls(num_layers=L, hidden_size=H, num_heads=A, intermediate_size=4 * H)
        # custom L/H/A may follow the preset; keep feed-forward at 4H unless it is given
        if "hidden_size" in overrides and "intermediate_size" not in overrides:
            overrides["intermediate_size"] = 4 * overrides["hidden_size"]
        return cfg.replace(**overrides)

    def replace(self, **overrides) -> "BertConfig":
        known = {f.name for f in fields(self)}
        for k in overrides:
            if k not in known:
                raise EngineError(f"unknown model setting '{k}'; known: {', '.join(sorted(known))}")
        return replace(self, **overrides)

    def num_parameters(self, with_heads: bool = True) -> int:
        V, H, I, P, L = self.vocab_size, self.hidden_size, self.intermediate_size, self.max_position_embeddings, self.num_layers
        emb = (V + P + self.type_vocab_size) * H + 2 * H
        layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
        n = emb + L * layer + (H * H + H)  # + pooler
        if with_heads and self.has_mlm_head:
            n += H * H + H + 2 * H + V  # transform + LayerNorm + bias (decoder weight tied)
        if with_heads and self.has_nsp_head:
            n += 2 * H + 2
        return n

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "BertConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    # --- Hugging Face config.json ---
    def to_hf_dict(self) -> dict:
        return {
            "architectures": ["BertForPreTraining"],
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "gelu",
            "hidden_dropout_prob": self.hidden_dropout,
            "attention_probs_dropout_prob": self.attention_dropout,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
            # ours, ignored by transformers: the LTR ablation keeps causal attention at fine-tuning
            "bert_studio_causal": self.causal,
        }

    @classmethod
    def from_hf_dict(cls, d: dict) -> "BertConfig":
        act = d.get("hidden_act", "gelu")
        if act not in ("gelu", "gelu_new", "gelu_python"):
            raise EngineError(f"config.json uses activation '{act}'; only BERT's gelu is supported")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise EngineError("config.json uses relative position embeddings; only BERT's absolute positions are supported")
        def num(key, default, integer, lo, hi):
            """d[key] checked for type and range before anything is built from it."""
            v = d.get(key, default) if default is not None else d[key]
            if integer and (isinstance(v, bool) or not isinstance(v, int)):
                raise EngineError(f"config.json: {key} is {v!r}; it must be a whole number between {lo} and {hi}")
            if not integer and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise EngineError(f"config.json: {key} is {v!r}; it must be a number between {lo} and {hi}")
            if not lo <= v <= hi:
                raise EngineError(f"config.json: {key} is {v!r}; it must be between {lo} and {hi}")
            return v
        pad = d.get("pad_token_id", 0)
        vocab = num("vocab_size", None, True, 6, 10_000_000)
        return cls(
            vocab_size=vocab,
            num_layers=num("num_hidden_layers", None, True, 1, 1000),
            hidden_size=num("hidden_size", None, True, 1, 1_000_000),
            num_heads=num("num_attention_heads", None, True, 1, 10_000),
            intermediate_size=num("intermediate_size", None, True, 1, 10_000_000),
            max_position_embeddings=num("max_position_embeddings", 512, True, 1, 10_000_000),
            type_vocab_size=num("type_vocab_size", 2, True, 1, 1000),
            hidden_dropout=num("hidden_dropout_prob", 0.1, False, 0.0, 0.99),
            attention_dropout=num("attention_probs_dropout_prob", 0.1, False, 0.0, 0.99),
            layer_norm_eps=num("layer_norm_eps", 1e-12, False, 1e-30, 1.0),
            initializer_range=num("initializer_range", 0.02, False, 0.0, 10.0),
            pad_token_id=0 if pad is None else num("pad_token_id", 0, True, 0, vocab - 1),
            causal=bool(d.get("bert_studio_causal", False)),
        )


MAX_SEED = 2**32 - 1  # numpy's and every generator's seed range


def steps_or_fraction(value: float, steps: int) -> int:
    """A number of optimizer steps given as steps (`value` >= 1) or as a fraction of `steps` (below 1, rounded):
    the convention of --warmup and --heads-first."""
    return int(round(value * steps)) if value < 1 else int(value)


def check_numbers(cfg, flag=lambda name: "--" + name.replace("_", "-")) -> None:
    """The checks every command's settings share: each float setting finite (NaN or inf as a learning rate,
    weight decay, clipping norm or warmup trains garbage, or silently nothing), a seed numpy and torch accept,
    and a thread count of at least 1. `flag(name)` names a field the way the user typed it."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        values = v if isinstance(v, (tuple, list)) else (v,)
        if any(isinstance(x, float) and not math.isfinite(x) for x in values):
            raise EngineError(f"{flag(f.name)} {v} is not a finite number; give a real value (see --help for the default)")
    seed = getattr(cfg, "seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise EngineError(f"{flag('seed')} {seed} must be a whole number from 0 to {MAX_SEED}")
    threads = getattr(cfg, "num_threads", None)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise EngineError(f"{flag('num_threads')} {threads} must be at least 1 (or left out: torch picks)")

