"""Head roles (engine/head_roles.py): a head that always attends to the next token is labelled so, a uniform head is
broad, attention inside a word is the same-word share, a role settles at the first step it keeps to the end, and
`python -m engine layers --heads` reads every checkpoint of a run with Clark et al.'s findings beside ours."""
import json

import numpy as np
import pandas as pd
import pytest

from engine.head_roles import ROLE_LABELS, findings, settled, table_from_attention

TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
SPECIAL = [1, 0, 0, 0, 0, 0, 0, 0, 1]


def next_token(T: int) -> np.ndarray:
    a = np.zeros((T, T))
    a[np.arange(T - 1), np.arange(1, T)] = 1.0
    a[T - 1, T - 1] = 1.0  # the last token has no next one
    return a


def test_a_head_that_always_attends_to_the_next_token_is_labelled_so():
    T = len(TOKENS)
    att = np.stack([np.stack([next_token(T), np.full((T, T), 1.0 / T)])])  # (L=1, A=2, T, T)
    table = table_from_attention([(TOKENS, att, SPECIAL)])
    nxt, uniform = table.iloc[0], table.iloc[1]
    assert nxt["next"] == pytest.approx(1.0) and nxt["role"] == "next" and ROLE_LABELS[nxt["role"]] == "next token"
    assert uniform["role"] == "broad" and uniform["breadth"] == pytest.approx(1.0)
    previous = next_token(T)[::-1, ::-1].copy()  # token i looks at i - 1 (the first at itself)
    prev = table_from_attention([(TOKENS, previous[None, None], SPECIAL)]).iloc[0]
    assert prev["prev"] == pytest.approx(1.0) and prev["next"] == pytest.approx(0.0) and prev["role"] == "prev"


def test_attention_inside_a_word_is_the_same_word_share():
    tokens = ["[CLS]", "un", "##believ", "##able", "news", "[SEP]"]
    T = len(tokens)
    att = np.zeros((1, 1, T, T))
    att[0, 0, :, T - 1] = 1.0  # everything to [SEP] ...
    for i, others in ((1, (2, 3)), (2, (1, 3)), (3, (1, 2))):  # ... but a word's pieces look at each other
        att[0, 0, i] = 0.0
        att[0, 0, i, list(others)] = 0.5
    row = table_from_attention([(tokens, att, [1, 0, 0, 0, 0, 1])]).iloc[0]
    assert row["word"] == pytest.approx(1.0)
    assert row["sep"] == pytest.approx(3 / 6) and row["role"] == "word"


def test_a_role_settles_at_the_first_step_it_keeps_to_the_end():
    rows = [{"step": s, "layer": 1, "head": 1, "role": r} for s, r in ((10, "sep"), (20, "next"), (30, "sep"), (40, "sep"))]
    rows += [{"step": s, "layer": 1, "head": 2, "role": "broad"} for s in (10, 20, 30, 40)]
    assert settled(pd.DataFrame(rows)) == [{"layer": 1, "head": 1, "role": "sep", "settled_step": 30},
                                           {"layer": 1, "head": 2, "role": "broad", "settled_step": 10}]


def test_clark_findings_sit_beside_ours_at_the_same_relative_depth():
    T = len(TOKENS)
    sep = np.zeros((T, T))
    sep[:, T - 1] = 1.0
    att = np.stack([np.stack([next_token(T)] * 2)] + [np.stack([sep] * 2)] * 11)  # 12 layers: next-token heads, then [SEP]
    rows = findings(table_from_attention([(TOKENS, att, SPECIAL)], step=5))
    by = {r["finding"]: r for r in rows}
    assert "layers 6-10" in by["[SEP] in the middle layers"]["bert_base"]
    assert by["[SEP] in the middle layers"]["ours"].startswith("100% to [SEP] in layers 6-10 (of 12)")
    assert "2 next-token heads (layers 1, 1)" in by["previous / next token heads"]["ours"]


def test_the_command_reads_head_roles_at_every_checkpoint(tiny_run, tiny_run_steps, engine_cli):
    code, out, err = engine_cli(["layers", "--heads", "--model", tiny_run, "--checkpoints", "all", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["analysis"] == "heads" and result["checkpoints"] == list(tiny_run_steps)
    assert len(result["heads"]) == len(tiny_run_steps) * 2 * 2  # steps x layers x heads
    assert {h["role"] for h in result["heads"]} <= set(ROLE_LABELS)
    assert len(result["settled"]) == 4 and all(s["settled_step"] in tiny_run_steps for s in result["settled"])
    assert len(result["findings"]) == 6
    code, out, err = engine_cli(["layers", "--heads", "--model", tiny_run])
    assert code == 0 and "layer 2 head 2:" in out and "Clark et al. 2019" in out
