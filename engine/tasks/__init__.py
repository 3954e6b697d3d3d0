"""Downstream task data: formats, encoding into batches, decoding and metrics (paper 4 and 5.3).

Task objects (each with .name, .kind, .train, .dev, .metrics (the first is the selection metric), .info,
.collate(tok, ...) -> a DataLoader collate_fn, .compute_metrics(predictions) -> {name: float}, .prepare(tok,
max_len, cfg) -> what the fine-tuning loop needs (batching.Prepared) and .preview(n) -> table rows):
- TextTask (glue.py): single sentence / pair classification or regression, Examples(text_a, text_b, label);
- TaggingTask (tagging.py): BIO tagging, TaggedSentence(words, tags), first-sub-token labels, entity F1;
- SquadTask (squad.py): SQuAD v1.1/v2.0 spans, windowed features, span decoding, the null threshold;
- MultipleChoiceTask (multiple_choice.py): SWAG-style N endings, (B, N, T) batches.
The formats and the built-in tasks are listed once, in registry.py; `load_task(name_or_kind, train, dev,
**columns)` returns the right object for any of them. Metric values are fractions in [0, 1].
`describe.describe(task)`: what the files were read as (columns, counts, labels) and sanity warnings.
Each name below is imported from its module on first use (PEP 562), so the torch-free `shared_files` (read by
engine.ablations) loads without torch.
"""
import importlib

_NAMES = {  # public name -> the module that defines it
    "Prepared": "engine.tasks.batching", "length_batches": "engine.tasks.batching",
    "predict": "engine.tasks.batching", "bbc_topic_task": "engine.tasks.builtin",
    "wnut16_task": "engine.tasks.builtin", "Example": "engine.tasks.glue", "TextTask": "engine.tasks.glue",
    "encode_classification": "engine.tasks.glue", "load_glue": "engine.tasks.glue",
    "accuracy": "engine.tasks.metrics", "f1_binary": "engine.tasks.metrics", "f1_macro": "engine.tasks.metrics",
    "matthews_corr": "engine.tasks.metrics", "pearson": "engine.tasks.metrics", "spearman": "engine.tasks.metrics",
    "ChoiceExample": "engine.tasks.multiple_choice", "MultipleChoiceTask": "engine.tasks.multiple_choice",
    "encode_multiple_choice": "engine.tasks.multiple_choice", "load_multiple_choice": "engine.tasks.multiple_choice",
    "SquadExample": "engine.tasks.squad", "SquadFeature": "engine.tasks.squad",
    "SquadPrediction": "engine.tasks.squad", "SquadTask": "engine.tasks.squad", "answers": "engine.tasks.squad",
    "best_threshold": "engine.tasks.squad", "collate_squad": "engine.tasks.squad",
    "decode_squad": "engine.tasks.squad", "load_squad": "engine.tasks.squad",
    "load_squad_task": "engine.tasks.squad", "make_features": "engine.tasks.squad",
    "split_squad_articles": "engine.tasks.squad", "squad_evaluate": "engine.tasks.squad",
    "TaggedSentence": "engine.tasks.tagging", "TaggingTask": "engine.tasks.tagging",
    "encode_tagging": "engine.tasks.tagging", "entity_scores": "engine.tasks.tagging",
    "get_entities": "engine.tasks.tagging", "load_tagging": "engine.tasks.tagging",
    "logits_to_word_tags": "engine.tasks.tagging", "read_bio": "engine.tasks.tagging",
    "BUILTINS": "engine.tasks.registry", "FORMATS": "engine.tasks.registry", "BuiltinTask": "engine.tasks.registry",
    "TaskFormat": "engine.tasks.registry", "feature_task_names": "engine.tasks.registry",
    "format_of": "engine.tasks.registry", "load_task": "engine.tasks.registry", "load_task_files": "engine.tasks.registry",
    "register_builtin": "engine.tasks.registry", "task_names": "engine.tasks.registry",
}
__all__ = list(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module 'engine.tasks' has no attribute '{name}'")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
