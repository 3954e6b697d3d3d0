"""`python -m engine bench`: every scenario runs end to end on a tiny model and reports throughput, step times, peak memory and FLOP/s for both sides."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import engine.bench.scenarios as bench
from engine.bench import cli as bench_cli, machine as bench_machine
from engine.config import BertConfig
from engine.errors import EngineError

REPO = Path(__file__).resolve().parents[3]
SIDE_KEYS = {"precision", "sequences_per_s", "tokens_per_s", "step_ms_median", "step_ms_p90", "peak_mem_mb", "model_tflops"}


def _run(capsys, *args):
    # BENCHMARKS.md's command at a tiny size, with a small vocabulary to keep the suite fast (the default is BERT's 30,522)
    rc = bench_cli.main(["--preset", "tiny", "--seq-len", "32", "--batch-size", "4", "--steps", "2", "--warmup", "1", "--json",
                     "--vocab-size", "2000", *args])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # --json: one JSON object, no table
    return rc, json.loads(out[0])


def _check_sides(block):
    for side in ("engine", "transformers"):
        assert SIDE_KEYS <= set(block[side]), side
        s = block[side]
        assert s["sequences_per_s"] > 0 and s["tokens_per_s"] >= s["sequences_per_s"]
        assert s["step_ms_p90"] >= s["step_ms_median"] > 0
        assert isinstance(s["peak_mem_mb"], float)  # its measurement is tested in test_peak_step_memory_sees_an_allocation
    assert block["ratio"] == pytest.approx(block["engine"]["sequences_per_s"] / block["transformers"]["sequences_per_s"])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["pretrain", "infer", "finetune", "varlen"])
def test_each_scenario_reports_ratio_and_same_start(capsys, scenario):
    rc, r = _run(capsys, "--scenario", scenario)
    assert rc == 0
    assert r["scenario"] == scenario and r["device"] == "cpu"
    assert r["same_start_loss"] is True and r["start"]["same"] is True
    _check_sides(r)
    assert r["ratios"]["throughput"] == r["ratio"] and "step_time" in r["ratios"]
    assert r["engine"]["timed_steps"] == r["transformers"]["timed_steps"] == 2
    assert {"torch", "transformers", "cpu", "threads", "date"} <= set(r["machine"])
    if scenario == "infer":
        assert r["latency"]["batch_size"] == 1
        _check_sides(r["latency"])
        assert r["engine"]["sequences_per_s"] == pytest.approx(4 * r["engine"]["tokens_per_s"] / (4 * 32))
    elif scenario == "varlen":
        assert 0 < r["padding_fraction"] < 1 and 2 < r["mean_length"] <= 32
        _check_sides(r["forward"])
        # real tokens only: fewer tokens than sequences x T
        assert r["engine"]["tokens_per_s"] < 32 * r["engine"]["sequences_per_s"]
    else:
        assert r["start"]["engine"] == pytest.approx(r["start"]["transformers"], abs=1e-3)
    if scenario == "pretrain":  # at init the MLM loss is about ln V and NSP about ln 2
        assert abs(r["start"]["engine"] - (torch.log(torch.tensor(2000.0)) + torch.log(torch.tensor(2.0)))) < 0.5


@pytest.mark.slow
def test_pretrain_on_a_corpus_reports_padding_packs_rows_and_mfu(capsys, tmp_path, monkeypatch):
    """--data: the batches are a corpus's real instances (short sequences leave padding); the engine side packs them
    into fewer rows with --packing (and pads them with --no-packing), starts from transformers' loss, and MFU is read against the
    peak measured here."""
    monkeypatch.setenv("BERT_STUDIO_CACHE", str(tmp_path))
    got = {}
    for flag in (("--packing",), ("--no-packing",)):
        rc, r = bench_cli.main(["--preset", "tiny", "--seq-len", "64", "--batch-size", "16", "--steps", "1", "--warmup", "0",
                            "--json", "--no-memory", "--data", "bbc", "--scenario", "pretrain", *flag]), None
        r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert rc == 0 and r["same_start_loss"] is True
        got[flag[0]] = r
    packed, padded = got["--packing"], got["--no-packing"]
    assert 0 < packed["padding_fraction"] == padded["padding_fraction"] < 0.5
    assert packed["engine_rows_per_batch"] < padded["engine_rows_per_batch"] == 16
    assert packed["start"]["engine"] == pytest.approx(packed["start"]["transformers"], abs=1e-3)
    assert 0 < packed["engine"]["mfu"] < 1 and packed["machine"]["cpu_matmul_peak_tflops"] > 0
    assert packed["engine"]["tokens_per_s"] < 64 * packed["engine"]["sequences_per_s"]  # real tokens only


@pytest.mark.slow
def test_a_different_start_is_reported_and_fails(capsys, monkeypatch):
    real_build = bench.build_models

    def perturbed(bc, mcfg, device):
        eng, hf = real_build(bc, mcfg, device)
        with torch.no_grad():
            hf.bert.embeddings.word_embeddings.weight.mul_(3.0)
        return eng, hf

    monkeypatch.setattr(bench, "build_models", perturbed)
    rc, r = _run(capsys, "--scenario", "finetune", "--steps", "1", "--warmup", "0", "--no-memory")
    assert rc == 1 and r["same_start_loss"] is False


@pytest.mark.slow
def test_table_is_printed_without_json(capsys):
    rc = bench_cli.main(["--scenario", "finetune", "--preset", "tiny", "--seq-len", "16", "--batch-size", "2", "--steps", "1",
                     "--warmup", "0", "--no-memory", "--engine-precision", "bf16", "--vocab-size", "500"])
    out = capsys.readouterr().out
    assert rc == 0 and "sequences/s" in out and "engine/tf" in out and "start loss" in out
    r = json.loads(out.strip().splitlines()[-1])
    assert r["engine"]["precision"] == "bf16" and r["transformers"]["precision"] == "fp32"
    # read against the units that do the work: a CPU that emulates bf16 is read against fp32, never above 100%
    assert 0 < r["engine"]["mfu"] < 1 and 0 < r["transformers"]["mfu"] < 1


def test_model_flops_counts():
    cfg = BertConfig.preset("tiny", vocab_size=1000)  # L=2, H=128, I=512
    H, I = 128, 512
    fwd = bench.model_flops(cfg, [10], train=False, pooler=False)
    assert fwd == 2 * (10 * 2 * (4 * H * H + 2 * H * I) + 4 * 10 * 10 * H)
    assert bench.model_flops(cfg, [10], train=True, pooler=False) == 3 * fwd
    assert bench.model_flops(cfg, [10], n_mlm=3, train=False, pooler=False) - fwd == 3 * (2 * H * H + 2 * H * 1000)


def test_peak_step_memory_sees_an_allocation():
    """On CPU the peak resident set during the call, above the resting size: a call that touches 64 MB and holds it
    for a moment needs about 64 MB; a call that allocates nothing needs (almost) none."""
    import time

    import numpy as np

    def touch_64mb():
        a = np.ones(64 * 2 ** 20, dtype=np.uint8)  # written, so resident
        time.sleep(0.05)
        return int(a[-1])
    mb = bench_machine.peak_step_memory_mb(touch_64mb, torch.device("cpu"))
    assert 48 <= mb <= 96, mb
    assert bench_machine.peak_step_memory_mb(lambda: None, torch.device("cpu")) < 16


@pytest.mark.slow
def test_bad_flags_are_one_line_errors():
    with pytest.raises(EngineError, match="seq-len"):
        bench.run_bench(bench.BenchConfig(seq_len=4))
    with pytest.raises(EngineError, match="scenario"):
        bench_cli.main(["--scenario", "train"])
    if not torch.cuda.is_available():
        with pytest.raises(EngineError, match="no CUDA"):
            bench.run_bench(bench.BenchConfig(device="cuda", preset="tiny"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-m", "engine", "bench", "--preset", "tiny", "--seq-len", "1024"],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr

