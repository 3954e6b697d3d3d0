"""engine.probes.attention_maps: every layer's attention equals the model's, and two models compared head by head."""
import numpy as np
import pytest
import torch

import engine
from engine.errors import EngineError
from engine.probes.attention_maps import attention, compare_attention, jensen_shannon
from tests.helpers import forward


@pytest.fixture(scope="session")
def early(tiny_run, tiny_run_steps):
    return engine.load(tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}")


def test_attention_shape_rows_and_equals_model(bundle):
    a, b = "the cat sat on the mat .", "it was happy ."
    tokens, att = attention(bundle, a, b)
    L, A = bundle.config.num_layers, bundle.config.num_heads
    T = len(tokens)
    assert att.shape == (L, A, T, T) and att.dtype == np.float32
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    enc, out = forward(bundle, a, b)
    assert list(tokens) == enc.tokens and tokens.type_ids == enc.type_ids
    assert tokens.special[0] == 1 and sum(tokens.special) == 3
    np.testing.assert_allclose(att, torch.stack([x[0] for x in out.attentions]).numpy(), atol=1e-6)


def test_jensen_shannon_bounds():
    p = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(jensen_shannon(p, q), [0.0, 1.0], atol=1e-9)


@pytest.mark.slow
def test_compare_attention(bundle, early, minilm):
    a = "the cat sat on the mat ."
    same = compare_attention(bundle, bundle, a)
    assert same["diff"].shape == (bundle.config.num_layers, bundle.config.num_heads)
    assert np.allclose(same["diff"], 0.0, atol=1e-6)
    r = compare_attention(early, bundle, a, "it was happy .")
    vals = [v for _, _, v in r["top"]]
    assert vals == sorted(vals, reverse=True) and vals[0] > 0
    l, h, v = r["top"][0]
    assert v == pytest.approx(float(r["diff"][l - 1, h - 1])) and v == pytest.approx(float(r["diff"].max()))
    l1 = compare_attention(early, bundle, a, metric="l1")
    expect = np.abs(l1["att1"] - l1["att2"]).mean(axis=(-2, -1))
    np.testing.assert_allclose(l1["diff"], expect, rtol=1e-5)
    with pytest.raises(EngineError, match="different vocabularies"):
        compare_attention(bundle, minilm, a)
    with pytest.raises(EngineError, match="unknown metric"):
        compare_attention(bundle, early, a, metric="cosine")
