"""Encoders other than BERT for the look-inside features: RoBERTa, XLM-RoBERTa, DistilBERT, ALBERT, ELECTRA,
DeBERTa-v2/v3 and ModernBERT, read through transformers' Auto classes (AutoConfig, AutoTokenizer, AutoModelForMaskedLM
or AutoModel) from a local folder or a Hub id (engine.hub, the hub cache).

B = batch size, T = sequence length, H = hidden size, V = vocabulary size, L = layers, A = heads.

`engine.load` returns an `EncoderBundle` for such a checkpoint (engine.checkpoint dispatches on config.json's
model_type; BERT checkpoints keep our own model). It has the shape of a BERT Bundle, so the probes, features, layer
probes and head roles take it unchanged:
- `model` (`EncoderModel`): called as our BertForPreTraining is (input_ids, token_type_ids, attention_mask,
  output_attentions, output_hidden_states, mlm_positions), it returns a `BertOutput`: hidden_states L+1 of
  (B, T, H), attentions L of (B, A, T, T) (transformers' eager attention: SDPA returns no weights), mlm_logits (B, T, V)
  when the checkpoint has an MLM head, never an NSP head; `model.bert` is the encoder without the head (features).
- `tokenizer` (`EncoderTokenizer`): the checkpoint's own tokenizer (its mask and special tokens: RoBERTa's <s>,
  </s>, <mask>), behind engine.Tokenizer's interface, its tokens shown in BERT's notation so the analyses read them
  alike: the special tokens by role ([CLS] for <s>, [SEP] for </s>, [MASK] for <mask>, [PAD], [UNK]) and a piece that
  continues a word with "##" (the word-start marks Ġ and ▁ dropped). `[MASK]` typed in a probe is the checkpoint's
  mask token. The Model page shows each piece as the checkpoint spells it beside.
- `config` (`EncoderConfig`): the fields the look-inside code reads (num_layers, hidden_size, num_heads, ...);
  max_position_embeddings is the positions an input may use (RoBERTa's table keeps two for its padding offset).
Whether the checkpoint has an MLM head is read from its weight names (`ENCODERS`: each model type's head prefixes;
an ELECTRA discriminator or a model saved as AutoModel has none): fill-mask then says so in one line.
Fine-tuning and pre-training stay BERT-only (`require_bert`), as do the analyses that read BERT's own attention
weights (neuron view, value-weighted attention, head importance).
Security as for BERT checkpoints: model.safetensors preferred, a legacy pytorch_model.bin only with
weights_only=True, never trust_remote_code; the parameters config.json implies are checked against the size of the
weights before the model is built (a crafted config is one line, never an allocation).
"""
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from engine.tokenizer import set_truncation
from engine.errors import EngineError
from engine.model import BertOutput


@dataclass(frozen=True)
class Encoder:
    name: str  # as papers and model cards write it
    mlm_head: tuple  # the weight-name prefixes of its MLM head (transformers' *ForMaskedLM)
    no_head: str = ""  # what a checkpoint without that head usually is


ENCODERS = {  # config.json model_type -> the encoder
    "roberta": Encoder("RoBERTa", ("lm_head.",)),
    "xlm-roberta": Encoder("XLM-RoBERTa", ("lm_head.",)),
    "distilbert": Encoder("DistilBERT", ("vocab_transform.",)),
    "albert": Encoder("ALBERT", ("predictions.",)),
    "electra": Encoder("ELECTRA", ("generator_predictions.",),
                       "an ELECTRA discriminator has none (its generator, e.g. google/electra-small-generator, has one)"),
    "deberta-v2": Encoder("DeBERTa-v2/v3", ("cls.predictions.", "lm_predictions.")),
    "modernbert": Encoder("ModernBERT", ("head.",)),
}
ROLES = (("cls", "[CLS]"), ("sep", "[SEP]"), ("mask", "[MASK]"), ("pad", "[PAD]"), ("unk", "[UNK]"))
WEIGHTS, LEGACY_WEIGHTS = "model.safetensors", "pytorch_model.bin"


def names() -> str:
    """'RoBERTa, XLM-RoBERTa, ...': what the one-line errors list."""
    return ", ".join(e.name for e in ENCODERS.values())


def model_type(folder) -> str | None:
    """config.json's model_type in `folder` (None where it cannot be read: the BERT loader says why)."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return cfg.get("model_type") if isinstance(cfg, dict) else None


def is_encoder(folder) -> bool:
    return model_type(folder) in ENCODERS


def mlm_head_in(kind: str, weight_names) -> bool:
    """Whether weights of model type `kind` (their names) hold its MLM head."""
    prefixes = ENCODERS[kind].mlm_head
    return any(str(n).startswith(prefixes) for n in weight_names)


def require_bert(bundle, what: str) -> None:
    """One line when `bundle` is not one of our BERT models: `what` (fine-tuning, ...) takes BERT checkpoints only."""
    if getattr(bundle, "kind", "bert") == "auto":
        enc = ENCODERS[bundle.config.model_type].name
        raise EngineError(f"{bundle.info.get('hub_id') or bundle.path} is a {enc} model (read through transformers for the "
                          f"look-inside pages); {what} takes BERT checkpoints only: pick a run, a checkpoint, a Hugging Face "
                          f"BERT folder, 'minilm' or a BERT Hub id")


def missing_head(bundle, head: str, name: str) -> str:
    """The line for an encoder bundle without its "mlm" head, or any "nsp" head (none of these has BERT's)."""
    arch = bundle.info.get("architecture")
    why = ENCODERS[bundle.config.model_type].no_head or "saved without one"
    return {"mlm": f"{name} has no MLM head ({arch}: {why}), so it cannot predict masked words; its attention and hidden "
                   "states still work, or pick a checkpoint saved with its MLM head (*ForMaskedLM)",
            "nsp": f"{name} has no NSP head ({arch}): next-sentence prediction is BERT's; use a BERT checkpoint "
                   "pre-trained with mlm+nsp"}[head]


# ------------------------------------------------------------------ the config the look-inside code reads
@dataclass
class EncoderConfig:
    model_type: str  # config.json's, a key of ENCODERS
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    vocab_size: int  # rows of the word embeddings (may exceed the tokenizer's; the extra ones are never predicted)
    max_position_embeddings: int  # the positions an input may use
    type_vocab_size: int  # segment embeddings (0 or 1: the model takes no segment ids)
    has_mlm_head: bool
    has_nsp_head: bool = False  # none of these encoders has BERT's NSP head
    causal: bool = False

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


def encoder_config(hf_cfg, tokenizer_limit, has_mlm: bool) -> EncoderConfig:
    """Our fields from a transformers config (`tokenizer_limit`: the tokenizer's model_max_length)."""
    def get(*keys, default=0):
        return next((int(getattr(hf_cfg, k)) for k in keys if getattr(hf_cfg, k, None) is not None), default)
    positions = get("max_position_embeddings", default=512)
    if hf_cfg.model_type in ("roberta", "xlm-roberta"):  # positions start after the padding index
        positions -= get("pad_token_id", default=1) + 1
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < positions:
        positions = tokenizer_limit
    return EncoderConfig(hf_cfg.model_type, get("num_hidden_layers"), get("hidden_size"), get("num_attention_heads"),
                         get("intermediate_size", "hidden_dim"), get("vocab_size"), positions, get("type_vocab_size"),
                         has_mlm)


# ------------------------------------------------------------------ the tokenizer, in BERT's notation
def _byte_chars() -> dict:
    """GPT-2's byte-level alphabet, inverted: {printable character: the byte it stands for}."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


BYTE_CHARS = _byte_chars()
MARKS = {"bytelevel": "Ġ", "metaspace": "▁"}  # the word-start mark of each piece style


def piece_style(vocab) -> str:
    """"wordpiece" (## continues a word), "bytelevel" (Ġ starts one) or "metaspace" (▁ starts one), by count."""
    counts = {"wordpiece": 0, "bytelevel": 0, "metaspace": 0}
    for t in vocab:
        if t.startswith("##"):
            counts["wordpiece"] += 1
        elif t.startswith("Ġ"):
            counts["bytelevel"] += 1
        elif t.startswith("▁"):
            counts["metaspace"] += 1
    return max(counts, key=counts.get) if any(counts.values()) else "wordpiece"


class EncodingView:
    """What a `tokenizers.Encoding` gives (ids, type_ids, tokens, special_tokens_mask, attention_mask, word_ids,
    offsets), its tokens in BERT's notation; `pieces`: the tokens as the checkpoint spells them."""

    def __init__(self, enc, tokens, word_ids=None):
        self.ids, self.type_ids = list(enc.ids), list(enc.type_ids)
        self.special_tokens_mask, self.attention_mask = list(enc.special_tokens_mask), list(enc.attention_mask)
        self.offsets, self.pieces = list(enc.offsets), list(enc.tokens)
        self.word_ids = list(enc.word_ids) if word_ids is None else list(word_ids)
        self.tokens = list(tokens)


class EncoderTokenizer:
    """A transformers fast tokenizer behind engine.Tokenizer's interface (module docstring)."""

    def __init__(self, hf_tokenizer):
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise EngineError(f"its tokenizer ({type(hf_tokenizer).__name__}) has no tokenizer.json (a fast tokenizer); "
                              "save the checkpoint with a fast tokenizer (tokenizer.save_pretrained) and load it again")
        self.hf_tokenizer, self.hf = hf_tokenizer, backend
        self.hf.no_padding()
        ids = {role: getattr(hf_tokenizer, f"{role}_token_id", None) for role, _ in ROLES}
        self.cls_id, self.sep_id, self.mask_id, self.unk_id = ids["cls"], ids["sep"], ids["mask"], ids["unk"]
        self.pad_id = ids["pad"] if ids["pad"] is not None else 0
        self.mask_token = hf_tokenizer.mask_token
        self.special_ids = sorted(set(hf_tokenizer.all_special_ids))
        self.role_names = {i: name for role, name in ROLES if (i := ids[role]) is not None}
        self.added = set(backend.get_added_tokens_decoder())
        self.style = piece_style(backend.get_vocab(with_added_tokens=False))
        normalizer = backend.normalizer
        self.lowercase = bool(normalizer is not None and normalizer.normalize_str("A") == "a")
        self._shown, self._ids = {}, None

    # --- vocabulary, in BERT's notation ---
    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def _text(self, raw: str) -> str:
        """A piece's text without its word-start mark (byte-level pieces as the characters they spell)."""
        if self.style == "bytelevel":
            try:
                return bytes(BYTE_CHARS[c] for c in raw).decode("utf-8")
            except (KeyError, UnicodeDecodeError):
                return raw
        return raw

    def shown(self, i: int, raw: str, continues: bool) -> str:
        """Piece `i` (spelt `raw`) in BERT's notation; `continues`: it continues the word before it."""
        if i in self.role_names:
            return self.role_names[i]
        if self.style == "wordpiece" or i in self.added:
            return raw
        mark = MARKS[self.style]
        text = self._text(raw[1:] if raw.startswith(mark) else raw)
        if not text.strip():
            return raw
        return f"##{text}" if continues else text

    def id_to_token(self, i: int) -> str:
        i = int(i)
        if i not in self._shown:
            raw = self.hf.id_to_token(i)
            if raw is None:
                return "[UNK]"
            self._shown[i] = self.shown(i, raw, continues=self.style != "wordpiece" and not raw.startswith(MARKS.get(self.style, "")))
        return self._shown[i]

    def convert_ids_to_tokens(self, ids) -> list:
        return [self.id_to_token(i) for i in ids]

    def vocab(self) -> list:
        return [self.id_to_token(i) for i in range(self.vocab_size)]

    def token_to_id(self, token: str):
        """The id of a token in BERT's notation ("paris" is RoBERTa's "Ġparis"), else as the checkpoint spells it."""
        if self._ids is None:
            ids = {}
            for i in range(self.vocab_size):
                ids.setdefault(self.id_to_token(i), i)
            self._ids = ids
        found = self._ids.get(token)
        return found if found is not None else self.hf.token_to_id(token)

    # --- encoding ---
    def _view(self, enc, word_ids=None) -> EncodingView:
        words = list(enc.word_ids) if word_ids is None else word_ids
        seqs = list(enc.sequence_ids)
        tokens = []
        for t, (i, raw) in enumerate(zip(enc.ids, enc.tokens)):
            continues = (t > 0 and words[t] is not None and words[t] == words[t - 1] and seqs[t] == seqs[t - 1]
                         and not enc.special_tokens_mask[t])
            tokens.append(self.shown(i, raw, continues))
        return EncodingView(enc, tokens, word_ids)

    def _text_in(self, text: str) -> str:
        if text is None or "[MASK]" not in text or self.mask_token == "[MASK]":
            return text
        if not self.mask_token:
            raise EngineError("this checkpoint's tokenizer has no mask token, so [MASK] cannot be given to it; "
                              "remove [MASK] or pick a model with a mask token")
        return text.replace("[MASK]", self.mask_token)

    def _truncation(self, max_length):
        set_truncation(self.hf, max_length)

    def encode(self, text: str, text_pair: str = None, max_length: int = None, add_special_tokens: bool = True):
        self._truncation(max_length)
        return self._view(self.hf.encode(self._text_in(text), self._text_in(text_pair), add_special_tokens=add_special_tokens))

    def encode_batch(self, texts, max_length: int = None, add_special_tokens: bool = True) -> list:
        self._truncation(max_length)
        items = [tuple(self._text_in(x) for x in t) if isinstance(t, (list, tuple)) else self._text_in(t) for t in texts]
        return [self._view(e) for e in self.hf.encode_batch(items, add_special_tokens=add_special_tokens)]

    def encode_words(self, words, text_pair=None, max_length: int = None) -> EncodingView:
        """Words joined by spaces, as running text reads (byte-level and ▁ tokenizers mark word starts by the space
        before), each piece's word found from its character offsets; `.word_ids` maps each piece to its word."""
        words = [str(w) for w in words]
        starts, pos = [], 0
        for w in words:
            starts.append(pos)
            pos += len(w) + 1
        self._truncation(max_length)
        enc = self.hf.encode(" ".join(words), self._text_in(text_pair))
        word_ids = []
        for t, (s, e) in enumerate(enc.offsets):
            if enc.special_tokens_mask[t] or enc.sequence_ids[t] != 0 or e <= s:
                word_ids.append(None)
                continue
            w = max(k for k, start in enumerate(starts) if start <= s) if starts else None
            word_ids.append(w)
        return self._view(enc, word_ids)

    def tokenize_ids(self, texts) -> list:
        self._truncation(None)
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize(self, text: str) -> list:
        return self.encode(text, add_special_tokens=False).tokens

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


# ------------------------------------------------------------------ the model, called as ours is
class EncoderOnly:
    """`EncoderModel.bert`: the encoder without its MLM head, as BertForPreTraining.bert is (what features read)."""

    def __init__(self, parent):
        self.parent = parent

    @property
    def training(self) -> bool:
        return self.parent.training

    def eval(self):
        self.parent.eval()
        return self

    def train(self, mode: bool = True):
        self.parent.train(mode)
        return self

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                 output_hidden_states=False, **_):
        return self.parent(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states,
                           with_head=False)


class EncoderModel(nn.Module):
    """A transformers encoder (its *ForMaskedLM, or the bare model without an MLM head) giving our BertOutput."""

    def __init__(self, hf_model, config: EncoderConfig, n_tokens: int):
        super().__init__()
        self.hf = hf_model
        self.config = config
        self.n_tokens = n_tokens  # the tokenizer's size: logits beyond it are ids no text can give
        self.nsp = None

    @property
    def mlm(self):
        return self.hf if self.config.has_mlm_head else None

    @property
    def bert(self) -> EncoderOnly:
        return EncoderOnly(self)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_attentions=False,
                output_hidden_states=False, mlm_positions=None, with_head=True, **_) -> BertOutput:
        """`mlm_positions` (B, T) bool or (rows, columns): the logits at those positions only, (N, V)."""
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, output_attentions=output_attentions,
                  output_hidden_states=output_hidden_states, return_dict=True)
        if token_type_ids is not None and self.config.type_vocab_size > 1:
            kw["token_type_ids"] = token_type_ids
        base = self.hf.base_model
        if not (with_head and self.config.has_mlm_head):
            o = base(**kw)
            return BertOutput(o.last_hidden_state, hidden_states=o.hidden_states, attentions=o.attentions)
        seen = []
        hook = base.register_forward_hook(lambda m, args, out: seen.append(out[0]))
        try:
            o = self.hf(**kw)
        finally:
            hook.remove()
        logits = o.logits[..., : self.n_tokens]  # (B, T, V)
        if isinstance(mlm_positions, tuple):
            logits = logits[mlm_positions[0], mlm_positions[1]]  # (N, V)
        elif mlm_positions is not None:
            logits = logits[mlm_positions]  # (N, V)
        return BertOutput(seen[-1], mlm_logits=logits, hidden_states=o.hidden_states, attentions=o.attentions)


@dataclass
class EncoderBundle:
    model: EncoderModel
    tokenizer: EncoderTokenizer
    config: EncoderConfig
    path: str = ""
    info: dict = field(default_factory=dict)  # source, missing_heads, model_type, architecture, about
    kind: str = "auto"  # read through transformers' Auto classes (a BERT Bundle has none: "bert")


# ------------------------------------------------------------------ loading
@contextmanager
def _quiet():
    """transformers' loading notes and progress bar (weights not used, the generation config) are not the user's
    business here: a look-inside page or the CLI prints its own lines."""
    from transformers.utils import logging as hf_logging
    log = logging.getLogger("transformers")
    level, bars = log.level, hf_logging.is_progress_bar_enabled()
    log.setLevel(logging.ERROR)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        log.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()


def _one_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def weight_names(folder: Path) -> list:
    """The tensor names of the weights (the safetensors header, or a legacy .bin read with weights_only)."""
    st, legacy = folder / WEIGHTS, folder / LEGACY_WEIGHTS
    try:
        if st.is_file():
            from safetensors import safe_open
            with safe_open(str(st), framework="pt") as f:
                return list(f.keys())
        if legacy.is_file():
            sd = torch.load(str(legacy), map_location="cpu", weights_only=True, mmap=True)
            return list(sd.get("state_dict", sd)) if isinstance(sd, dict) else []
    except Exception as e:
        raise EngineError(f"{folder}: its weights could not be read safely ({_one_line(e)}); restore the file or "
                          f"convert it to {WEIGHTS}") from e
    raise EngineError(f"{folder} has neither {WEIGHTS} nor {LEGACY_WEIGHTS} (sharded weights are not supported); "
                      "it is not a checkpoint folder")


def _auto_config(folder: Path, kind: str, names: list):
    from transformers import AutoConfig
    try:
        cfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EngineError(f"{folder / 'config.json'} is not a {ENCODERS[kind].name} config transformers reads "
                          f"({_one_line(e)}); restore it or re-save the checkpoint") from e
    if kind == "deberta-v2" and any(n.startswith("lm_predictions.") for n in names):
        cfg.legacy = False  # DeBERTa-v3's own MLM head names (transformers reads them only so)
    return cfg


def _check_size(folder: Path, model_cls, cfg, check_memory, source: str) -> None:
    """The parameters config.json implies (counted on the meta device: nothing allocated) against the size of the
    weights file, then against the memory left."""
    weights = folder / WEIGHTS if (folder / WEIGHTS).is_file() else folder / LEGACY_WEIGHTS
    size = weights.stat().st_size
    try:
        with torch.device("meta"), _quiet():
            n = sum(p.numel() for p in model_cls.from_config(cfg).base_model.parameters())
    except Exception as e:
        raise EngineError(f"{folder / 'config.json'}: transformers cannot build its model ({_one_line(e)}); "
                          "restore config.json or re-save the checkpoint") from e
    if 2 * n > 1.05 * size + 2**20:  # at least 16 bits a parameter
        raise EngineError(f"{source}: config.json implies {n:,} parameters but {weights.name} holds only {size:,} bytes; "
                          "config.json does not match the weights (the files do not belong together)")
    if check_memory is not None:
        check_memory(size + 4 * n, "this model", source)


def _auto_model(folder: Path, model_cls, cfg, source: str):
    with _quiet():
        try:
            model, loading = model_cls.from_pretrained(
                str(folder), config=cfg, trust_remote_code=False, local_files_only=True, weights_only=True,
                use_safetensors=(folder / WEIGHTS).is_file(), dtype=torch.float32, attn_implementation="eager",
                output_loading_info=True)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
            raise EngineError(f"{source}: transformers could not load its weights ({_one_line(e)}); the files do not "
                              "belong together or are damaged") from e
    missing = [k for k in loading.get("missing_keys") or [] if "pooler." not in f".{k}"]  # the pooler is never read
    if missing:
        raise EngineError(f"{source}: the weights lack {len(missing)} tensor(s) {type(model).__name__} needs "
                          f"({missing[0]}, ...); the files do not belong together or are not a complete checkpoint")
    return model


def _auto_tokenizer(folder: Path, source: str) -> EncoderTokenizer:
    from transformers import AutoTokenizer
    try:
        with _quiet():
            tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as e:
        raise EngineError(f"{source}: its tokenizer could not be read ({_one_line(e)}); the folder needs the "
                          "tokenizer files saved with the model (tokenizer.json)") from e
    try:
        return EncoderTokenizer(tok)
    except EngineError as e:
        raise EngineError(f"{source}: {e}") from e


def about(kind: str, arch: str, tok: EncoderTokenizer, has_mlm: bool) -> str:
    """The line the Model page shows of such a model."""
    spelt = [f"{tok.hf_tokenizer.convert_ids_to_tokens(i)} as {name}" for i, name in tok.role_names.items()
             if tok.hf_tokenizer.convert_ids_to_tokens(i) != name and name in ("[CLS]", "[SEP]", "[MASK]")]
    head = "with its MLM head" if has_mlm else f"without an MLM head: {ENCODERS[kind].no_head or 'saved as an encoder only'}"
    name = ENCODERS[kind].name
    article = "An" if name[0] in "AEIOUX" else "A"
    return (f"{article} {name} model ({arch}, {head}), read through transformers. Its tokens are shown in BERT's notation "
            f"({'; '.join(spelt + ['a piece that continues a word starts with ##'])}).")


def load_encoder(folder, source: str, device="cpu", check_memory=None) -> EncoderBundle:
    """The checkpoint in `folder` (config.json's model_type a key of ENCODERS) as an EncoderBundle. `check_memory`
    (needed bytes, what, source): engine.checkpoint's check of the memory left."""
    from transformers import AutoModel, AutoModelForMaskedLM
    folder = Path(folder)
    kind = model_type(folder)
    if kind not in ENCODERS:
        raise EngineError(f"{folder} holds a '{kind}' model; the encoders read through transformers are {names()}")
    names_ = weight_names(folder)
    has_mlm = mlm_head_in(kind, names_)
    cfg = _auto_config(folder, kind, names_)
    model_cls = AutoModelForMaskedLM if has_mlm else AutoModel
    _check_size(folder, model_cls, cfg, check_memory, source)
    hf_model = _auto_model(folder, model_cls, cfg, source)
    tok = _auto_tokenizer(folder, source)
    config = encoder_config(cfg, getattr(tok.hf_tokenizer, "model_max_length", None), has_mlm)
    if tok.vocab_size > config.vocab_size:
        raise EngineError(f"{source}: its tokenizer has {tok.vocab_size} tokens but the model's embeddings only "
                          f"{config.vocab_size}; use the tokenizer saved with this checkpoint")
    model = EncoderModel(hf_model, config, tok.vocab_size).to(device).eval()
    arch = type(hf_model).__name__
    info = {"source": source, "missing_heads": ([] if has_mlm else ["mlm"]) + ["nsp"], "model_type": kind,
            "architecture": arch, "about": about(kind, arch, tok, has_mlm)}
    return EncoderBundle(model=model, tokenizer=tok, config=config, path=str(folder), info=info)
