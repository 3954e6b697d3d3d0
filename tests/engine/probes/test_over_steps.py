"""engine.probes.over_steps: the probes on each checkpoint of a run, and a [MASK]'s words followed over the steps."""
import pytest

import engine
from engine import probe_set
from engine.errors import EngineError
from engine.probes.over_steps import checkpoint_steps, mask_probs_over_steps, probe_checkpoints
from engine.probes.predictions import next_sentence


@pytest.mark.slow
def test_probe_checkpoints_over_steps(tiny_run, tiny_run_steps):
    assert [s for s, _ in checkpoint_steps(tiny_run)] == list(tiny_run_steps)
    rows = probe_checkpoints(tiny_run, text="the [MASK] rose .", pair=("a man .", "a dog ."), top_k=3, probe_set=True)
    assert [r["step"] for r in rows] == list(tiny_run_steps)
    assert all(len(r["fill"][0]) == 3 and r["probe_set"]["nsp_n"] == len(probe_set.NSP_PAIRS) for r in rows)
    first = engine.load(tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}")  # each row is that checkpoint's probe
    assert rows[0]["p_isnext"] == pytest.approx(float(next_sentence(first, "a man .", "a dog .")), abs=1e-6)
    assert len({round(r["p_isnext"], 6) for r in rows}) > 1  # training changed the model
    series = mask_probs_over_steps(rows)
    assert series and all(len(v) == len(tiny_run_steps) for v in series.values())
    best_last = rows[-1]["fill"][0][0]
    assert list(series)[0] == best_last[0] and series[best_last[0]][-1] == pytest.approx(best_last[1], rel=1e-5)
    with pytest.raises(EngineError, match="does not exist"):
        checkpoint_steps(tiny_run / "nope")
