"""The task kinds described once (engine/tasks/kinds.py): the head's output width and what it reads, the loss each
kind takes, and what the describer counts, all asked of the kind."""
import re
from pathlib import Path

import pytest
import torch

from engine.config import BertConfig
from engine.errors import EngineError
from engine.heads import TaskModel
from engine.model import BertModel
from engine.tasks.describe import counted
from engine.tasks.kinds import (CLASSIFICATION, HEAD_KINDS, KINDS, MULTIPLE_CHOICE, REGRESSION, SPAN, SQUAD, TAGGING,
                                task_kind)

REPO = Path(__file__).resolve().parents[3]


def test_each_kind_outputs_and_reads():
    assert [k.outputs(5) for k in (CLASSIFICATION, REGRESSION, TAGGING, SPAN, MULTIPLE_CHOICE)] == [5, 1, 5, 2, 1]
    assert HEAD_KINDS == ("classification", "regression", "tagging", "span", "multiple_choice")
    assert SQUAD.head == "span" and SQUAD.span and "squad" not in HEAD_KINDS
    assert [k.name for k in KINDS.values() if k.per_token] == ["tagging", "span", "squad"]
    assert (counted("tagging"), counted("classification"), counted("wnut16")) == ("tags", "labels", "labels")
    with pytest.raises(EngineError, match="unknown task kind 'poem'"):
        task_kind("poem")


@pytest.mark.parametrize("kind,shape", [("classification", (2, 3)), ("regression", (2,)), ("tagging", (2, 6, 3)),
                                        ("span", (2, 6, 2))])
def test_the_head_follows_its_kind(kind, shape):
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=30, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                                max_position_embeddings=16))
    model = TaskModel(bert, kind, num_labels=3).eval()
    ids = torch.randint(5, 30, (2, 6))
    out = model(ids, torch.zeros_like(ids), torch.ones_like(ids))
    assert tuple(out.shape) == shape
    batch = {"attention_mask": torch.ones_like(ids), "labels": torch.zeros(shape[:1] if kind != "tagging" else (2, 6),
                                                                              dtype=torch.long),
             "start_positions": torch.zeros(2, dtype=torch.long), "end_positions": torch.ones(2, dtype=torch.long)}
    assert torch.isfinite(model.loss(out, batch))


def test_no_module_compares_a_task_kind_name():
    kinds = "|".join(KINDS)
    literal = re.compile(r"""kind(\)|\])? *(==|!=) *["'](%s)["']|["'](%s)["'] *(==|!=) *\w*kind""" % (kinds, kinds))
    found = [f"{p.relative_to(REPO)}:{i}" for folder in ("engine", "studio", "pages") for p in sorted((REPO / folder).rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if literal.search(line)]
    assert not found, f"{found}: ask engine.tasks.kinds (task_kind(name).regression, .per_token, ...) instead"
