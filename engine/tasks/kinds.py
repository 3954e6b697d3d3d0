"""The kinds of downstream task (paper 4, 5.3), each described once.

| name            | the head reads              | outputs (K labels) | loss                               | label set   |
|-----------------|-----------------------------|--------------------|------------------------------------|-------------|
| classification  | C, the pooled [CLS] vector  | K                  | cross-entropy over the K classes   | labels      |
| regression      | C                           | 1                  | squared error (STS-B)              | none        |
| tagging         | every final hidden T_i      | K                  | cross-entropy per tagged token     | tags        |
| span            | every T_i, no dropout       | 2 (start, end)     | log-likelihood of start and end    | none        |
| multiple_choice | C of each of N inputs       | 1                  | cross-entropy over the N choices   | endings     |
| squad           | (a task whose head is span) |                    |                                    | none        |

A task object's `kind` (and eval.json's "type") is one of these names; the head (engine.heads.TaskModel), the
batching (engine.tasks.batching.Prepared.kind), the describers (engine.tasks.describe), the feature-based command
and the pages ask the kind (`task_kind(name)`) instead of comparing names. Standard library only.
"""
from dataclasses import dataclass

from engine.errors import EngineError


@dataclass(frozen=True)
class TaskKind:
    name: str  # task.kind, Prepared.kind, eval.json "type", `TaskModel(kind=...)`
    head: str  # the head kind it trains (its own name, but "span" for squad)
    per_token: bool  # the head scores every final hidden vector T_i, not C
    dropout: bool  # dropout before the head (not on span's start/end scores)
    regression: bool  # one number per example, a squared-error loss
    choices: bool  # N inputs per example, a softmax over them
    span: bool  # start and end positions in the input
    counted: str = None  # what `describe` counts in train ("labels", "tags"); None: no label set
    unseen: str = "labels"  # what a dev set can hold that train never has, in words
    label_column: bool = False  # its labels are a file column (one might be an id or text column by mistake)

    def outputs(self, num_labels: int) -> int:
        """The head's output width for a task of `num_labels` labels."""
        return 2 if self.span else 1 if (self.regression or self.choices) else num_labels


CLASSIFICATION = TaskKind("classification", "classification", per_token=False, dropout=True, regression=False,
                          choices=False, span=False, counted="labels", label_column=True)
REGRESSION = TaskKind("regression", "regression", per_token=False, dropout=True, regression=True, choices=False,
                      span=False)
TAGGING = TaskKind("tagging", "tagging", per_token=True, dropout=True, regression=False, choices=False, span=False,
                   counted="tags", unseen="entity types")
SPAN = TaskKind("span", "span", per_token=True, dropout=False, regression=False, choices=False, span=True)
MULTIPLE_CHOICE = TaskKind("multiple_choice", "multiple_choice", per_token=False, dropout=True, regression=False,
                           choices=True, span=False, counted="labels")
SQUAD = TaskKind("squad", "span", per_token=True, dropout=False, regression=False, choices=False, span=True)

KINDS = {k.name: k for k in (CLASSIFICATION, REGRESSION, TAGGING, SPAN, MULTIPLE_CHOICE, SQUAD)}
HEAD_KINDS = tuple(k.name for k in KINDS.values() if k.head == k.name)  # what TaskModel builds
GLUE_TYPES = (CLASSIFICATION.name, REGRESSION.name)  # --task-type: what a glue task predicts


def task_kind(name: str) -> TaskKind:
    if name not in KINDS:
        raise EngineError(f"unknown task kind {name!r}; expected one of {', '.join(KINDS)}")
    return KINDS[name]
