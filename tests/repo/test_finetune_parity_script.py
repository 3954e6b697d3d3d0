"""examples/finetune_parity.py runs both loops on tiny files and reports per seed and mean ± std.
The full comparison (MiniLM, CoLA and RTE from ../shared/data, three seeds) is a benchmark, not a test."""
import importlib.util
import json
import random
from pathlib import Path

import torch

import engine

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "finetune_parity.py"
WORDS = "the a cat dog sat ran on under house tree big small red blue".split()


def test_parity_script_runs_both_loops_on_the_same_rows(tmp_path, capsys):
    rng = random.Random(0)
    rows = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + (" good" if i % 2 else " bad"), i % 2)
            for i in range(60)]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows[:40]))
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows[40:]))
    tok = engine.train_tokenizer([s for s, _ in rows] + WORDS, vocab_size=120, lowercase=True, min_frequency=1)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=32, num_heads=2, intermediate_size=64,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    engine.save(engine.BertForPreTraining(cfg), tmp_path / "ck", tokenizer=tok)
    spec = importlib.util.spec_from_file_location("finetune_parity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "parity"
    assert mod.main(["--model", str(tmp_path / "ck"), "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
                     "--seeds", "0,1", "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--max-seq-len", "32",
                     "--out", str(out)]) == 0
    rep = json.loads((out / "parity.json").read_text())["tasks"]["own"]
    assert (rep["train"], rep["dev"], [r["seed"] for r in rep["runs"]]) == (40, 20, [0, 1])
    for side in ("engine", "plain"):
        assert all(0.0 <= r[side]["score"] <= 1.0 and r[side]["train_loss"] > 0 for r in rep["runs"])
        assert set(rep["summary"][side]) == {"mean", "std", "train_loss"}
    printed = capsys.readouterr().out
    assert "engine - plain = " in printed and "± " in printed
    assert (out / "own" / "train.tsv").read_text().splitlines()[1] == f"{rows[0][0]}\t{rows[0][1]}"  # the same rows
