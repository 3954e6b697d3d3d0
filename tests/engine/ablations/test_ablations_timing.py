"""The classroom studies' time estimate (engine.ablations.timing): a speed check of this machine scales each
study's reference wall time; the estimate says when the settings are not the study's defaults and when the
result is over the classroom hour."""
import json

import pytest

from engine import ablations as A
from engine import measured
from engine.ablations import timing
from engine.ablations.cli import main as ablate
from engine.errors import EngineError


def check(factor: float, precision: str = "fp32", study: str = None) -> A.SpeedCheck:
    """A machine `factor` times slower than the reference machine, or than the machine `study` was timed on."""
    ms = timing.REFERENCE_MINUTES[study].step_ms if study else timing.REFERENCE_STEP_MS
    return A.SpeedCheck(precision, 2, factor * ms)


def test_every_paper_study_has_a_reference_time_and_the_familys_borrow_table_5s_until_measured():
    measured_family = {"static-vs-dynamic", "electra-vs-mlm", "span-masking", "input-formats"}  # run from scratch (engine/measured.py)
    assert set(timing.REFERENCE_MINUTES) == set(A.GROUPS["BERT, 2018"]) | measured_family
    assert {timing.reference_study(A.get_study(n)) for n in A.GROUPS["after BERT"] if n not in measured_family} == {timing.ANALOGUE}
    est = A.estimate(A.get_study("static-vs-dynamic", scale="classroom"), check(1.0, "bf16", study="static-vs-dynamic"))
    assert est["minutes"] == pytest.approx(timing.REFERENCE_MINUTES["static-vs-dynamic"][0]) and "never measured" not in est["text"]
    est = A.estimate(A.get_study("electra-vs-mlm", scale="classroom"), check(1.0, "bf16", study="electra-vs-mlm"))
    assert est["minutes"] == pytest.approx(106.4) and est["over_hour"]  # measured over the hour: the estimate says so


@pytest.mark.parametrize("name", ["nsp-vs-sop", "masking-rate"])
def test_a_study_never_measured_is_estimated_from_its_flops_and_table_5s_evaluations(name):
    """Each pre-training from its FLOPs, each evaluation at the share of Table 5's evaluation of the same kind of task:
    on the machine Table 5 was timed on, every family study's classroom defaults fit the hour."""
    study = A.get_study(name, scale="classroom")
    est = A.estimate(study, check(1.0, "bf16", study=timing.ANALOGUE))
    assert est["defaults"] and 0 < est["minutes"] <= timing.CLASSROOM_HOUR and not est["over_hour"]
    assert "never measured" in est["text"] and timing.ANALOGUE in est["text"]
    slower = A.estimate(study, check(2.0, "bf16", study=timing.ANALOGUE))
    assert slower["minutes"] == pytest.approx(2 * est["minutes"])


def test_estimate_scales_the_reference_time():
    study = A.get_study("masking", scale="classroom")
    ref = timing.REFERENCE_MINUTES["masking"][0]
    same = A.estimate(study, check(1.0, "bf16"))
    assert same["minutes"] == pytest.approx(ref) and same["defaults"] and not same["over_hour"]
    assert "over the classroom hour" not in same["text"]
    slow = A.estimate(study, check(3.5))
    assert slow["minutes"] == pytest.approx(3.5 * ref) and slow["over_hour"]
    assert "2 h 51 min" in slow["text"] and "no bf16 units" in slow["text"]


def test_a_study_timed_on_another_machine_scales_by_that_machines_check():
    """Table 5's classroom default was timed on a Zen 5, not on REFERENCE_MACHINE: a machine whose check reads what
    the Zen 5's did is estimated at exactly its minutes, and the text names the machine."""
    ref = timing.REFERENCE_MINUTES["pretraining-tasks"]
    assert ref.step_ms != timing.REFERENCE_STEP_MS
    study = A.get_study("pretraining-tasks", scale="classroom")
    same = A.estimate(study, A.SpeedCheck("bf16", 2, ref.step_ms))
    assert same["minutes"] == pytest.approx(ref.minutes) and same["defaults"] and same["factor"] == pytest.approx(1.0)
    m = measured.study("pretraining-tasks").minutes  # the one table of measured facts
    assert (ref.minutes, ref.date, ref.machine) == (m.value, m.date, measured.MACHINES[m.machine].name)
    assert f"{m.value:g} min on {measured.MACHINES[m.machine].name} on {m.date}" in same["text"]
    xeon = A.estimate(study, A.SpeedCheck("bf16", 2, timing.REFERENCE_STEP_MS))
    assert xeon["minutes"] == pytest.approx(ref.minutes * timing.REFERENCE_STEP_MS / ref.step_ms)


def test_estimate_says_when_settings_differ_or_no_reference():
    study = A.get_study("pretraining-tasks", scale="classroom", epochs=9)
    assert not A.estimate(study, check(1.0))["defaults"]
    assert "your settings differ" in A.estimate(study, check(1.0))["text"]
    lab = A.estimate(A.get_study("pretraining-tasks", scale="lab"), check(1.0))
    assert lab["minutes"] is None and "lab scale" in lab["text"]
    gpu = A.SpeedCheck("bf16", 2, 100.0, gpu=True)
    assert A.estimate(A.get_study("masking", scale="classroom"), gpu)["minutes"] is None


def test_an_estimate_for_other_settings_is_summed_job_by_job():
    """Not the defaults: each pre-training from its FLOPs, each evaluation from its counterpart's share of the
    defaults' time, scaled by its epochs; a second seed adds a copy of every job."""
    c = check(1.5, study="pretraining-tasks")
    one = A.estimate(A.get_study("pretraining-tasks", scale="classroom"), c)
    assert one["minutes"] == pytest.approx(1.5 * timing.REFERENCE_MINUTES["pretraining-tasks"][0])
    assert one["minutes"] == pytest.approx(sum(one["jobs"].values()))
    two = A.estimate(A.get_study("pretraining-tasks", scale="classroom", seeds=2), c)
    assert two["minutes"] == pytest.approx(2 * one["minutes"]) and len(two["jobs"]) == 2 * len(one["jobs"])
    assert "summed job by job" in two["text"] and "over the classroom hour" in two["text"]
    ten = A.estimate(A.get_study("training-steps", scale="classroom", epochs=10), c)["jobs"]
    five = A.estimate(A.get_study("training-steps", scale="classroom"), c)["jobs"]
    assert set(ten) == set(five)
    for k in five:  # the classroom default is 5 epochs: an evaluation twice as long, a pre-training the same
        assert ten[k] == pytest.approx(five[k] * (1 if k.startswith("pretrain/") else 2)), k


def test_an_evaluations_work_counts_only_what_both_command_lines_say():
    """Grid points x epochs x restarts x examples; a --max-train on one side only (the other: the whole task) is
    not a factor of the ratio."""
    one = ["finetune", "--lr", "1e-3", "--epochs", "5", "--restarts", "3", "--max-train", "1500"]
    grid = ["finetune", "--lr", "1e-3,2e-3", "--epochs", "2,3", "--restarts", "3"]
    assert timing._work(grid, like=one) / timing._work(one, like=grid) == pytest.approx(2 * 5 / 5)
    assert timing._work(one) == pytest.approx(5 * 3 * 1500)


@pytest.mark.slow  # several seconds: processes, a real speed check or a full preparation
def test_speed_check_times_a_step():
    c = A.speed_check(steps=1, warmup=0)
    assert c.step_ms > 0 and c.precision in ("bf16", "fp32") and c.threads >= 1
    assert c.factor() > 0


def test_the_minilm_check_times_the_probe_ready_recipes_step(monkeypatch):
    """It times MiniLM's own shape at the recipe's batch, length, masked share and dropout (so a recipe change moves
    what it times), not the classroom model's."""
    import json

    import engine.flops as flops
    from engine.minilm import minilm_path
    from engine.pretraining.config import CONTINUED_PRETRAINING as R
    seen = {}
    monkeypatch.setattr(flops, "pretrain_step_times", lambda cfg, T, B, rate, *a, **k: seen.update(
        cfg=cfg, T=T, B=B, rate=rate) or [0.9, 1.0, 1.2])
    c = timing.timed_check("minilm")
    hf = json.loads((minilm_path() / "config.json").read_text())
    cfg = seen["cfg"]
    assert (cfg.vocab_size, cfg.num_layers, cfg.hidden_size) == (hf["vocab_size"], hf["num_hidden_layers"], hf["hidden_size"])
    assert (seen["T"], seen["B"], seen["rate"]) == (R["seq_len"], R["batch_size"], R["mask_rate"])
    assert cfg.hidden_dropout == cfg.attention_dropout == R["dropout"]
    assert c.step_ms == pytest.approx(1000.0)  # the median


def test_a_study_is_timed_by_the_fastest_of_its_rounds(monkeypatch):
    readings = iter([check(3.0), check(1.5), check(2.5)])  # a burst of other work slowed two of the three
    monkeypatch.setattr(timing, "timed_check", lambda kind: next(readings))
    assert timing.fastest_check().factor() == pytest.approx(1.5)


def test_cli_estimate(monkeypatch, capsys):
    import engine.ablations.cli as cli
    monkeypatch.setattr(cli, "fastest_check", lambda: check(2.0))
    assert ablate(["estimate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["speed_check"]["factor"] == pytest.approx(2.0)
    assert set(out["estimates"]) == set(A.STUDIES)
    assert out["estimates"]["training-steps"]["minutes"] == pytest.approx(2 * timing.REFERENCE_MINUTES["training-steps"][0])
    assert ablate(["estimate", "masking"]) == 0
    text = capsys.readouterr().out
    assert "x2.00" in text and "speed check: a classroom MLM step takes" in text and "masking: about 98 min" not in text and "masking: about 1 h 38 min" in text
    assert ablate(["estimate", "training-steps", "--seeds", "2", "--json"]) == 0
    two = json.loads(capsys.readouterr().out)["estimates"]["training-steps"]
    assert two["minutes"] == pytest.approx(4 * timing.REFERENCE_MINUTES["training-steps"][0]) and not two["defaults"]
    # four times the steps: four times each pre-training's FLOPs, the same fine-tunings (Figure 5's checkpoints move)
    assert ablate(["estimate", "training-steps", "--steps", "12000", "--json"]) == 0
    long = json.loads(capsys.readouterr().out)["estimates"]["training-steps"]
    one = 2 * timing.REFERENCE_MINUTES["training-steps"][0]
    assert one * 1.5 < long["minutes"] < 4 * one and not long["defaults"]
    # --budget: Table 5 at equal steps instead of its classroom default's equal FLOPs: LTR trains all 6,000 steps
    assert ablate(["estimate", "pretraining-tasks", "--budget", "steps", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["estimates"]["pretraining-tasks"]
    assert ablate(["estimate", "pretraining-tasks", "--json"]) == 0
    flops = json.loads(capsys.readouterr().out)["estimates"]["pretraining-tasks"]
    assert flops["defaults"] and not steps["defaults"]
    ltr = "pretrain/ltr-no-nsp/s0"
    assert steps["jobs"][ltr] > 1.8 * flops["jobs"][ltr] and steps["minutes"] > flops["minutes"]
    with pytest.raises(EngineError, match="budget steps"):  # Figure 5 compares checkpoints: steps only
        ablate(["estimate", "training-steps", "--budget", "flops"])
    with pytest.raises(EngineError, match="--steps must be"):
        ablate(["estimate", "training-steps", "--steps", "0"])
    with pytest.raises(EngineError, match="--seeds must be at least 1"):
        ablate(["estimate", "masking", "--seeds", "0"])
    with pytest.raises(EngineError, match="unknown study"):
        ablate(["estimate", "nope"])
