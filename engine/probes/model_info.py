"""Which model a probe is asked: its short name (`model_name`) and the pre-training heads it can answer with,
loaded (`heads`, `require_head`: an EngineError naming the fix when one is missing) or read from a saved folder
without loading it (`heads_on_disk`)."""
from pathlib import Path

from engine.errors import EngineError
from engine.objectives import MLM_HEAD, MLM_NSP, NSP_HEAD, OBJECTIVES


def model_name(bundle) -> str:
    """A short human name: "MiniLM", "<run>/step-N" or the folder name."""
    if bundle.info.get("source") == "minilm":
        return "MiniLM"
    if bundle.info.get("hub_id"):
        return bundle.info["hub_id"]  # its folder in the hub cache is named by a commit hash
    p = Path(bundle.path or "model")
    if p.parent.name == "checkpoints":
        return f"{p.parent.parent.name}/{p.name}"
    return p.name or str(p)


def heads(bundle) -> tuple:
    """The pre-training heads `bundle` can use: a subset of ("mlm", "nsp"), in that order."""
    missing = bundle.info.get("missing_heads") or []
    out = []
    if MLM_HEAD not in missing and bundle.config.has_mlm_head and getattr(bundle.model, "mlm", None) is not None:
        out.append(MLM_HEAD)
    if NSP_HEAD not in missing and bundle.config.has_nsp_head and getattr(bundle.model, "nsp", None) is not None:
        out.append(NSP_HEAD)
    return tuple(out)


def heads_on_disk(path) -> tuple:
    """The heads a saved model has, from its weight names alone (the safetensors header: nothing is loaded):
    ("mlm", "nsp"), a part of it, () for MiniLM; None when that cannot be told cheaply (a legacy
    pytorch_model.bin, a Hub id, an unreadable folder). Another encoder (engine.encoders): ("mlm",) or ()."""
    if str(path) == "minilm":
        return ()
    from engine.checkpoint import resolve_checkpoint_dir
    from engine.hub import is_hub_id
    if is_hub_id(str(path)):
        return None
    from engine import encoders
    try:
        d = resolve_checkpoint_dir(path)
        st_path = d / "model.safetensors"
        if not st_path.is_file():
            return None
        from safetensors import safe_open
        with safe_open(str(st_path), framework="pt") as f:
            names = set(f.keys())
        kind = encoders.model_type(d)
    except Exception:  # a broken folder: the page says so when it is loaded
        return None
    if kind in encoders.ENCODERS:  # another encoder: its own MLM head's names, never an NSP head
        return (MLM_HEAD,) if encoders.mlm_head_in(kind, names) else ()
    found = [h for h, key in ((MLM_HEAD, "cls.predictions.transform.dense.weight"), (NSP_HEAD, "cls.seq_relationship.weight"))
             if key in names]
    return tuple(found)


def require_head(bundle, head: str) -> None:
    """EngineError naming the fix when `bundle` lacks its "mlm" or "nsp" head."""
    absent = head not in heads(bundle)
    if not absent:
        return
    name = model_name(bundle)
    if getattr(bundle, "kind", "bert") == "auto":  # another encoder (engine.encoders): its own words
        from engine.encoders import missing_head
        raise EngineError(missing_head(bundle, head, name))
    if head == MLM_HEAD:
        raise EngineError(f"{name} has no MLM head: it was saved as an encoder only, so it cannot predict masked words; "
                          "use a checkpoint pre-trained with mlm or mlm+nsp")
    raise EngineError(f"{name} has no NSP head: it cannot score whether B follows A; "
                      "use a checkpoint pre-trained with mlm+nsp (No NSP and LTR runs have none)")


def pair_objective(bundle):
    """The objective the model's pair head was trained with (engine.objectives.Objective: NSP's or SOP's question and
    answers), read from the run.json of the run the model belongs to (a run folder or one of its checkpoints);
    BERT's NSP for any other model (Google's, a Hugging Face folder, MiniLM's continued run)."""
    from engine.records import RUN_JSON, read_json_or_empty
    p = Path(str(getattr(bundle, "path", "") or "."))
    for run in (p, p.parent.parent):
        if (run / RUN_JSON).is_file():
            obj = OBJECTIVES.get(str(read_json_or_empty(run / RUN_JSON).get("objective")))
            return obj if obj is not None and obj.nsp else MLM_NSP
    return MLM_NSP
