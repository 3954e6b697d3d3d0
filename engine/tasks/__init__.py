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
"""
from engine.tasks.batching import Prepared, length_batches, predict
from engine.tasks.builtin import bbc_topic_task, wnut16_task
from engine.tasks.glue import Example, TextTask, encode_classification, load_glue
from engine.tasks.metrics import accuracy, f1_binary, f1_macro, matthews_corr, pearson, spearman
from engine.tasks.multiple_choice import ChoiceExample, MultipleChoiceTask, encode_multiple_choice, load_multiple_choice
from engine.tasks.squad import (SquadExample, SquadFeature, SquadPrediction, SquadTask, answers, best_threshold,
                                collate_squad, decode_squad, load_squad, load_squad_task, make_features,
                                split_squad_articles, squad_evaluate)
from engine.tasks.tagging import (TaggedSentence, TaggingTask, encode_tagging, entity_scores, get_entities,
                                  load_tagging, logits_to_word_tags, read_bio)
from engine.tasks.registry import (BUILTINS, FORMATS, BuiltinTask, TaskFormat, feature_task_names, format_of, load_task,
                                   load_task_files, register_builtin, task_names)
