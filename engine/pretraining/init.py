"""Continued pre-training: start a pre-training run from an existing model (`--init`), as google-research/bert's
`--init_checkpoint` and the transformers MLM example's `--model_name_or_path` do (domain adaptation).

`--init` takes a run folder (its latest complete checkpoint), a checkpoint folder, a Hugging Face BERT folder, or
"minilm" (all-MiniLM-L6-v2, shipped without MLM/NSP heads). The run takes from it:
- the architecture: its BertConfig (layers, hidden, heads, feed-forward, positions, segments, LayerNorm eps);
  only what the objective changes differs: `causal` for LTR (the causal mask is the only change, the weights
  are the same), which heads exist (MLM always, NSP for mlm+nsp), and dropout (`--dropout`);
- the vocabulary and tokenizer, casing included (its vocab.txt and tokenizer_config.json become the run's
  tokenizer/);
- every weight it has: embeddings, encoder layers, pooler, and the MLM / NSP heads when present.
Heads it lacks are initialised as the paper's (google-research/bert): the MLM transform N(0, 0.02) with
LayerNorm 1/0, the output bias 0 and the decoder tied to the word embeddings (so no decoder weight is new); the
NSP classifier N(0, 0.02), bias 0. The fresh weights come from the run's seed.

`resolve_init(cfg)` checks the flags against the init (one clear line per conflict) and fills the run's
settings from it (vocab_size, cased, max_positions, layers, hidden, heads), so run.json says what was trained
and `--resume` compares like with like. `init_model(cfg, mcfg)` builds the model for step 0.
"""
from dataclasses import replace
from pathlib import Path

import torch

from engine.commands import PRETRAIN, kind_of
from engine.config import steps_or_fraction
from engine.corpora import CORPUS_WORDS
from engine.errors import EngineError
from engine.objectives import MLM_HEAD, NSP_HEAD, OBJECTIVES
from engine.records import RUN_JSON

# the run settings an init decides, with the flag that would set them
ARCH_FIELDS = {"vocab_size": "--vocab-size", "cased": "--cased", "max_positions": "--max-positions",
               "layers": "--layers", "hidden": "--hidden", "heads": "--heads"}


def init_kind(init: str) -> str:
    """"minilm", "run", "checkpoint" or "huggingface" (a folder with config.json that no run of ours wrote)."""
    if str(init) == "minilm":
        return "minilm"
    p = Path(init).expanduser()
    if (p / RUN_JSON).is_file() or (p / "checkpoints").is_dir():
        return "run"
    if (p / "training_state.json").is_file() or (p / "COMPLETE").is_file():
        return "checkpoint"
    return "huggingface"


def check_init_source(init: str) -> None:
    """Refuse a run folder of another kind (a fine-tune or features run): it holds no pre-training checkpoint, and
    waiting for one would never help."""
    p = Path(init).expanduser()
    if str(init) == "minilm" or not (p / RUN_JSON).is_file() or (p / "config.json").is_file():
        return
    from engine.runs import read_run_json
    kind = read_run_json(p).get("kind")
    if kind and kind_of(kind) is not PRETRAIN:
        best = p / "best"
        also = f" (its fine-tuned encoder, {best}, is a Hugging Face BERT folder)" if (best / "config.json").is_file() else ""
        raise EngineError(f"--init {init} is a {kind} run, and a {kind} run cannot be a pre-training init; give a pre-training "
                          f"run, one of its checkpoint folders, a Hugging Face BERT folder{also} or minilm")


def init_dir(init: str) -> Path:
    """The folder the init's files are read from (a run: its latest complete checkpoint)."""
    from engine.checkpoint import minilm_path, resolve_checkpoint_dir
    check_init_source(init)
    try:
        return minilm_path() if str(init) == "minilm" else resolve_checkpoint_dir(init)
    except EngineError as e:
        raise EngineError(f"--init {init}: {e}") from e


def init_tokenizer_arg(init: str) -> str:
    """What `prepare --tokenizer` takes to use the init's vocabulary: minilm, or the folder holding its vocab.txt."""
    return "minilm" if str(init) == "minilm" else str(init_dir(init))


def init_tokenizer(init: str):
    """The init's tokenizer (its vocab.txt; casing from its tokenizer_config.json)."""
    from engine.tokenizer import Tokenizer
    return Tokenizer.from_file(init_dir(init))


def load_init(init: str):
    """The init's Bundle (engine.checkpoint.load: weights, tokenizer, config, missing heads), its errors one line."""
    from engine.checkpoint import load
    check_init_source(init)
    from engine.encoders import require_bert
    try:
        bundle = load(init)
        require_bert(bundle, "continued pre-training (--init)")
        return bundle
    except EngineError as e:
        raise EngineError(f"--init {init}: {e}") from e


def init_settings(bundle) -> dict:
    """The run settings (ARCH_FIELDS) a loaded init decides."""
    return _arch_settings(bundle.config, bundle.tokenizer.lowercase)


def read_init_settings(init: str) -> dict:
    """`init_settings` from the init's config.json and tokenizer files alone, its weights not read (the CLI's
    check of the flags given; the run itself loads the init once more, whole)."""
    from engine.checkpoint import read_config
    from engine.tokenizer import Tokenizer
    check_init_source(init)
    try:
        d, mc = read_config(init)
        return _arch_settings(mc, Tokenizer.from_file(d).lowercase)
    except EngineError as e:
        raise EngineError(f"--init {init}: {e}") from e


def _arch_settings(mc, lowercase: bool) -> dict:
    return {"vocab_size": mc.vocab_size, "cased": not lowercase, "max_positions": mc.max_position_embeddings,
            "layers": mc.num_layers, "hidden": mc.hidden_size, "heads": mc.num_heads}


def resolve_init(cfg, bundle=None):
    """`cfg` with the settings its init decides (see ARCH_FIELDS), after checking that none given conflicts.
    Also checks --seq-len / --phase2-seq-len against the init's positions and that --tokenizer is not given."""
    if not cfg.init:
        return cfg
    b = bundle if bundle is not None else load_init(cfg.init)
    mc = b.config
    what = f"--init {cfg.init}"
    if cfg.tokenizer:
        raise EngineError(f"{what} brings its own vocabulary and tokenizer; drop --tokenizer (or drop --init to train one)")
    if getattr(cfg, "data", None):  # prepared shards carry a vocabulary: it must be the init's
        from engine.pretraining.prepare import prepared_tokenizer_dir
        from engine.tokenizer import Tokenizer
        if Tokenizer.from_file(prepared_tokenizer_dir(cfg.data)).vocab() != b.tokenizer.vocab():
            raise EngineError(f"--data {cfg.data} was prepared with another vocabulary than {what}'s; prepare it again with "
                              f"--tokenizer {init_tokenizer_arg(cfg.init)}, or drop --data")
    if cfg.preset != "tiny":
        raise EngineError(f"{what} decides the model's size ({mc.num_layers} layers, hidden {mc.hidden_size}); drop --preset")
    own = init_settings(b)
    # a value equal to the classroom default counts as "not given" for a notebook config; the CLI refuses
    # any given flag that differs (engine.pretrain.config_from_args) before this runs
    untouched = {"vocab_size": 8000, "cased": False, "max_positions": 512, "layers": None, "hidden": None, "heads": None}
    for name in ARCH_FIELDS:
        if getattr(cfg, name) != own[name] and getattr(cfg, name) != untouched[name]:
            raise EngineError(conflict(name, getattr(cfg, name), own[name], cfg.init))
    for flag, T in (("--seq-len", cfg.seq_len), ("--phase2-seq-len", cfg.phase2_seq_len)):
        if T is not None and T > mc.max_position_embeddings:
            raise EngineError(f"{flag} {T} is above the {mc.max_position_embeddings} positions of {what}; "
                              f"use {flag} {mc.max_position_embeddings} or less")
    return replace(cfg, **own)


def conflict(name: str, given, own, init: str) -> str:
    """The one-line error for a setting that contradicts the init."""
    flag = ARCH_FIELDS[name]
    if name == "cased":
        return (f"{flag} conflicts with --init {init}, whose tokenizer is {'cased' if own else 'uncased (it lowercases)'}; "
                f"drop {flag} (the init decides it)")
    return (f"{flag} {given} conflicts with --init {init}, whose model has {name.replace('_', ' ')} {own}; "
            f"drop {flag} (the init decides it)")


def init_record(cfg, bundle, mcfg) -> dict:
    """What run.json records under "init": where the run started and which weights were new."""
    missing = set(bundle.info.get("missing_heads") or [])
    heads = (MLM_HEAD, NSP_HEAD) if mcfg.has_nsp_head else (MLM_HEAD,)  # the run's model's heads
    return {"source": str(cfg.init), "kind": init_kind(cfg.init), "path": str(bundle.path),
            "heads_from_init": [h for h in heads if h not in missing], "heads_new": [h for h in heads if h in missing]}


def init_model(cfg, mcfg, bundle=None):
    """The model a run starts from at step 0: `mcfg` (the init's config with the objective's heads and
    causality), every tensor the init has, fresh heads (from cfg.seed) where it has none. Returns (model, bundle)."""
    from engine.model import BertForPreTraining
    b = bundle if bundle is not None else load_init(cfg.init)
    torch.manual_seed(cfg.seed)
    model = BertForPreTraining(mcfg)  # fresh weights everywhere, the paper's initialisation; tied MLM decoder
    mine = model.state_dict()
    src = {k: v for k, v in b.model.state_dict().items() if k in mine}  # an NSP head the objective drops is left out
    for k, v in src.items():
        if v.shape != mine[k].shape:
            raise EngineError(f"--init {cfg.init}: tensor {k} has shape {tuple(v.shape)}, the run's model wants "
                              f"{tuple(mine[k].shape)}; the init's files do not belong together")
    missing, _ = model.load_state_dict(src, strict=False)  # nothing unexpected: src holds only the model's keys
    bad = [k for k in missing if not k.startswith(("mlm.", "nsp."))]
    if bad:
        raise EngineError(f"--init {cfg.init} lacks encoder tensors ({', '.join(bad[:3])}); it is not a complete BERT")
    return model, b


def model_config_from_init(cfg, init_config):
    """The BertConfig an init run trains: the init's shape, the objective's heads and causality, the run's dropout."""
    from engine.objectives import objective
    obj = objective(cfg.objective)
    return init_config.replace(causal=obj.causal, has_mlm_head=MLM_HEAD in obj.heads, has_nsp_head=NSP_HEAD in obj.heads,
                               hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout)


# ---------------------------------------------------------------------------------------------- what a model is


def model_card(run_info: dict, step: int = None) -> str:
    """One paragraph saying what a continued-pre-training run's model is, from its run.json (`step`: the
    checkpoint's, default the run's total); "" for a run that started from scratch (no "init")."""
    cfg = run_info.get("config") or {}
    init = cfg.get("init")
    if not init:
        return ""
    corpus = CORPUS_WORDS.get(str(cfg.get("corpus")), f"`{cfg.get('corpus')}`")
    obj = OBJECTIVES.get(cfg.get("objective"))
    objective = (obj.words or obj.label) if obj else cfg.get("objective")
    new = (run_info.get("init") or {}).get("heads_new") or []
    heads = f" Its {' and '.join(h.upper() for h in new)} head{'s' if len(new) > 1 else ''} started from the paper's initialisation here." if new else ""
    if cfg.get("heads_first") and cfg.get("steps"):
        heads += f" The first {steps_or_fraction(cfg['heads_first'], int(cfg['steps']))} steps trained only the heads, on the frozen encoder."
    done = f"{step if step is not None else cfg.get('steps')} steps"
    if init == "minilm":
        return (f"MiniLM's encoder (all-MiniLM-L6-v2: 6 layers, hidden 384, Google's uncased vocabulary), continued "
                f"pre-training with {objective} on {corpus}, {done} of {cfg.get('batch_size')} x {cfg.get('seq_len')} "
                f"tokens on this machine.{heads} Not Google's BERT: MiniLM was distilled from a larger model and tuned "
                "for sentence embeddings; this run taught it the paper's pre-training tasks, so it can fill masks and "
                "score sentence pairs.")
    return (f"The encoder of `{init}`, continued pre-training with {objective} on {corpus}, {done} of "
            f"{cfg.get('batch_size')} x {cfg.get('seq_len')} tokens.{heads}")
