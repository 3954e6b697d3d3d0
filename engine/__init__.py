"""BERT Studio engine: BERT pre-training, fine-tuning, probes and features in plain PyTorch (no UI imports).

The notebook API (see README and ../shared/design.md): BertConfig, load_corpus, train_tokenizer, Tokenizer,
load, save, mask_tokens, fill_mask, next_sentence, attention, extract_features, pretrain, finetune; the attention
analyses attention_rollout, head_statistics, head_importance, value_weighted_attention, word_level (engine/analysis.py);
probes per layer and head roles over training, layer_probes and head_role_table (engine/layers.py). `load` of a
RoBERTa, DistilBERT, ALBERT, ELECTRA, DeBERTa or ModernBERT checkpoint gives an EncoderBundle (engine/encoders.py)
that the look-inside functions take as they take a BERT.

`import engine` is cheap: each name below is imported from its module on first use (PEP 562), so the torch-free
modules (engine.jobs, engine.runs, engine.procs, engine.fileio, engine.errors) load without torch; the job
queue's runner starts in milliseconds because of it.
"""
import importlib
import sys
import types

_NAMES = {  # public name -> the module that defines it
    "EngineError": "engine.errors",
    "BertConfig": "engine.config", "PRESETS": "engine.config",
    "Tokenizer": "engine.tokenizer", "train_tokenizer": "engine.tokenizer",
    "Corpus": "engine.corpora", "load_corpus": "engine.corpora", "load_bbc_labeled": "engine.corpora",
    "BertForPreTraining": "engine.model", "BertModel": "engine.model", "BertOutput": "engine.model",
    "Bundle": "engine.checkpoint", "load": "engine.checkpoint", "save": "engine.checkpoint",
    "EncoderBundle": "engine.encoders",
    "OBJECTIVES": "engine.objectives",
    "PretrainingCache": "engine.pretraining.cache", "PretrainingData": "engine.pretraining.cache",
    "build_pretraining_data": "engine.pretraining.prepare", "open_pretraining_data": "engine.pretraining.cache",
    "fixed_eval_masking": "engine.pretraining.masking", "mask_batch": "engine.pretraining.masking",
    "mask_tokens": "engine.pretraining.masking",
    "PrepareConfig": "engine.pretraining.prepare", "prepare": "engine.pretraining.prepare",
    "open_prepared": "engine.pretraining.prepare",
    "iter_documents": "engine.corpora",
    "attention": "engine.probes", "compare_attention": "engine.probes", "fill_mask": "engine.probes",
    "next_sentence": "engine.probes", "probe_set_accuracy": "engine.probes",
    "extract_features": "engine.features",
    "layer_probes": "engine.layers", "head_role_table": "engine.layers",
    "PretrainConfig": "engine.pretraining.config", "pretrain": "engine.pretraining.run",
    "FinetuneConfig": "engine.finetune", "finetune": "engine.finetune",
    "attention_rollout": "engine.analysis", "head_importance": "engine.analysis", "head_statistics": "engine.analysis",
    "value_weighted_attention": "engine.analysis", "word_level": "engine.analysis",
}
__all__ = list(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module 'engine' has no attribute '{name}'")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Engine(types.ModuleType):
    """`engine.finetune` is an entry point (the function), though engine/finetune.py is a module of the same name.

    Importing a submodule sets it as an attribute of its package (`engine.finetune = <module>` after
    `from engine.finetune import main`), which would hide the function; for a public name defined in the submodule
    of the same name (`_NAMES`: engine.finetune's `finetune`, the one such name today) the package keeps the
    function of the module instead. The module stays importable by name (`importlib.import_module("engine.finetune")`).
    `engine.pretrain` and `engine.prepare` need no such care: their modules live in the engine/pretraining/ package
    (engine/pretraining/run.py, engine/pretraining/prepare.py), so no submodule shares their names."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and value.__name__ == _NAMES.get(name) == f"{__name__}.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Engine
