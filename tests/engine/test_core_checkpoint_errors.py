"""Bad checkpoints give one clear line naming the problem and the fix."""
import json
import shutil

import pytest

import engine


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_and_not_a_checkpoint(tmp_path):
    with pytest.raises(engine.EngineError, match="does not exist"):
        engine.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(engine.EngineError, match="no config.json"):
        engine.load(tmp_path / "empty")


def test_check_model_raises_what_load_would_and_passes_what_loads(tmp_path, tiny_checkpoint, monkeypatch):
    """engine.checkpoint.check_model: the loader's one-line error, from config.json alone, before a job is queued."""
    from engine.checkpoint import check_model
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "f.txt").write_text("x")
    for bad, says in ((tmp_path / "nope", "does not exist"), (tmp_path / "empty", "no config.json"),
                      (tmp_path / "f.txt", "is a file"), ("no-org/no-bert", "not \\(completely\\) in")):
        with pytest.raises(engine.EngineError, match=says):
            check_model(bad)
    check_model(tiny_checkpoint)
    check_model("minilm")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    check_model("no-org/no-bert")  # online: the job downloads it; the page does not wait for the network
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(engine.EngineError, match="'runs/typo' does not exist"):  # online too: a mistyped run, not a Hub id
        check_model("runs/typo")


def test_folder_without_weights(tmp_path, tiny_checkpoint):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    (d / "model.safetensors").unlink()
    with pytest.raises(engine.EngineError, match="no model.safetensors"):
        engine.load(d)


def test_truncated_safetensors(tmp_path, tiny_checkpoint):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(engine.EngineError, match="corrupt or truncated"):
        engine.load(d)


def test_vocabulary_that_does_not_match_the_embeddings(tmp_path, tiny_checkpoint):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    lines = (d / "vocab.txt").read_text().splitlines()
    (d / "vocab.txt").write_text("\n".join(lines[:-10]) + "\n")
    with pytest.raises(engine.EngineError, match=r"vocab.txt has \d+ tokens but the model's embeddings have \d+"):
        engine.load(d)
    d2 = _copy(tiny_checkpoint, tmp_path / "c2")
    cfg = json.loads((d2 / "config.json").read_text())
    cfg["vocab_size"] += 5
    (d2 / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(engine.EngineError, match="do not belong together"):
        engine.load(d2)


def test_config_that_does_not_fit_the_weights(tmp_path, tiny_checkpoint):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(engine.EngineError, match="not a complete BERT checkpoint"):
        engine.load(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(engine.EngineError, match="not valid JSON"):
        engine.load(d)
    (d / "config.json").write_text("[768, 12]")
    with pytest.raises(engine.EngineError, match="config.json is not a JSON object"):
        engine.load(d)


def test_save_is_atomic_and_never_leaves_half_a_checkpoint(tmp_path, tiny_checkpoint, monkeypatch):
    b = engine.load(tiny_checkpoint)
    out = engine.save(b, tmp_path / "ck")
    before = (out / "model.safetensors").read_bytes()

    import safetensors.torch as st

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(st, "save_file", boom)
    with pytest.raises(engine.EngineError, match="No space left on device"):
        engine.save(b, out)
    assert (out / "model.safetensors").read_bytes() == before  # the old checkpoint is intact
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ck")]  # no temporary folder left behind
