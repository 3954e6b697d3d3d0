"""engine.probes.cli: `python -m engine probe` for each probe, as text and JSON, and a missing head as a one-line error."""
import json

import pytest


@pytest.mark.slow
def test_cli(tiny_run, capsys, tiny_run_steps):
    from engine.__main__ import run
    assert run(["probe", "--model", str(tiny_run), "--fill", "the [MASK] rose [MASK] .", "--top-k", "4", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert len(obj["masks"]) == 2 and len(obj["masks"][0]) == 4 and obj["truncated"] is False
    assert run(["probe", "--model", str(tiny_run), "--nsp", "a man .", "a dog ."]) == 0
    assert "P(IsNext) = 0." in capsys.readouterr().out
    assert run(["probe", "--model", str(tiny_run), "--attention", "the cat sat .", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["shape"] == [2, 2, len(obj["tokens"]), len(obj["tokens"])]
    early = tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}"
    assert run(["probe", "--model", str(tiny_run), "--attention", "the cat sat .", "--compare", str(early)]) == 0
    assert "layer 1 head" in capsys.readouterr().out
    assert run(["probe", "--model", str(tiny_run), "--probe-set"]) == 0
    assert "next sentence" in capsys.readouterr().out
    assert run(["probe", "--model", "minilm", "--fill", "a [MASK] ."]) == 2
    assert "error: MiniLM has no MLM head" in capsys.readouterr().err
