"""engine/cli.py: each command's flags, defaults and job-queue argv come from its config dataclass."""
from dataclasses import dataclass, fields, replace
from typing import ClassVar, Optional

import pytest

from engine import cli
from engine.errors import EngineError
from engine.features import FeaturesConfig
from engine.features import build_parser as features_parser
from engine.finetune import FinetuneConfig
from engine.finetune import build_parser as finetune_parser
from engine.pretraining.config import validate
from engine.pretraining.run import PretrainConfig, config_from_args
from engine.pretraining.run import build_parser as pretrain_parser

COMMANDS = [(PretrainConfig, pretrain_parser), (FinetuneConfig, finetune_parser), (FeaturesConfig, features_parser)]


def parse(cls, build, argv):
    assert argv[0] == cls.command
    return cls(**cli.given(cls, build(), argv[1:]))


@pytest.mark.parametrize("cls,build", COMMANDS)
def test_every_config_field_is_a_flag_with_help(cls, build):
    flags = {f.name: flag for f, _, flag in cli.flags(cls)}
    assert set(flags) == {f.name for f in fields(cls)}
    text = build().format_help()  # a help text with a literal % (an objective's "ELECTRA 15%") still formats
    for flag in flags.values():
        assert flag in text
    if cls is PretrainConfig:
        assert "electra-15: ELECTRA 15%" in " ".join(text.split())


def test_flag_names_the_readme_documents_are_kept():
    pre = {flag for _, _, flag in cli.flags(PretrainConfig)}
    assert {"--corpus", "--objective", "--seq-len", "--mask-rate", "--mask-ratios", "--whole-word-mask", "--phase2-seq-len",
            "--vocab-size", "--tokenizer", "--preset", "--layers", "--hidden", "--heads", "--steps", "--batch-size",
            "--grad-accum", "--lr", "--warmup", "--out", "--name", "--resume", "--stop-after", "--seed", "--device",
            "--precision", "--save-every", "--eval-every", "--keep"} <= pre
    fin = {flag for _, _, flag in cli.flags(FinetuneConfig)}
    assert {"--model", "--task", "--train", "--dev", "--lr", "--batch-size", "--epochs", "--restarts", "--bilstm",
            "--random-init", "--save-best", "--max-train", "--out"} <= fin
    feat = {flag for _, _, flag in cli.flags(FeaturesConfig)}
    assert {"--model", "--task", "--layers", "--combine", "--pooling", "--classifier", "--no-save-features", "--out"} <= feat


@pytest.mark.parametrize("cls,build", COMMANDS)
def test_flags_left_out_take_the_config_defaults(cls, build):
    required = {"model": "minilm", "task": "bbc-topic", "out": "o"} if cls is not PretrainConfig else {}
    argv = [a for k, v in required.items() for a in (f"--{k}", v)]
    assert cls(**cli.given(cls, build(), argv)) == cls(**required)


ROUND_TRIPS = [
    PretrainConfig.classroom(),
    PretrainConfig.classroom(corpus="wiki", objective="ltr", layers=4, hidden=256, heads=4, mask_ratios=(1.0, 0.0, 0.0),
                   whole_word_mask=True, phase2_seq_len=512, lr=5e-5, warmup=100, tokenizer="tok", cased=True,
                   out="runs/x", resume=True, stop_after=7, compile="on", quiet=True, num_threads=2, precision="fp32"),
    FinetuneConfig(model="runs/a", task="glue", train="t.tsv", dev="d.tsv", text_cols="a,b", task_type="regression",
                   lr=(1e-4, 5e-5), batch_size=(8,), epochs=(1, 2), max_train=50, bilstm=True, random_init=True, out="o"),
    FeaturesConfig(model="minilm", task="wnut16", layers=(-1, -2, 0), combine=("concat", "last"), classifier="bilstm",
                   save_features=False, out="o"),
]


@pytest.mark.parametrize("cfg", ROUND_TRIPS, ids=lambda c: type(c).__name__)
def test_config_to_argv_to_config_is_the_same_config(cfg):
    build = dict(COMMANDS)[type(cfg)]
    argv = cli.argv(cfg)
    assert argv[0] == cfg.command
    assert parse(type(cfg), build, argv) == cfg


def test_argv_reads_like_a_command_line():
    argv = cli.argv(FeaturesConfig(model="m", task="wnut16", layers=(-1, -2), combine=("concat", "last"), out="o"))
    assert argv[:5] == ["features", "--model", "m", "--task", "wnut16"]
    assert argv[argv.index("--layers") + 1] == "-1,-2"  # a negative list is one value, also when parsed back
    assert argv[argv.index("--combine") + 1] == "concat,last"
    assert "--no-save-features" not in argv  # a switch appears only away from its default
    pre = cli.argv(PretrainConfig.classroom(mask_ratios=(1.0, 0.0, 0.0), out="x"))
    assert pre[pre.index("--mask-ratios") + 1] == "1,0,0" and "--layers" not in pre  # None: not given
    assert "--resume" not in pre and "--resume" in cli.argv(replace(PretrainConfig.classroom(out="x"), resume=True))


def test_bad_flags_are_one_line_engine_errors_naming_the_command():
    with pytest.raises(EngineError, match=r"invalid choice: 'x'.*see python -m engine pretrain --help"):
        cli.given(PretrainConfig, pretrain_parser(), ["--objective", "x"])
    with pytest.raises(EngineError, match="exactly three numbers"):
        cli.given(PretrainConfig, pretrain_parser(), ["--mask-ratios", "1,2"])
    with pytest.raises(EngineError, match="comma-separated numbers.*finetune --help"):
        cli.given(FinetuneConfig, finetune_parser(), ["--model", "m", "--task", "glue", "--out", "o", "--lr", "fast"])
    with pytest.raises(EngineError, match="required: --out"):
        cli.given(FeaturesConfig, features_parser(), ["--task", "wnut16"])
    # a flag of choices given bare (the old `--compile` switch) names its values
    with pytest.raises(EngineError, match=r"^--compile needs a value: auto, on or off; see python -m engine pretrain --help$"):
        cli.given(PretrainConfig, pretrain_parser(), ["--compile", "--steps", "5"])


def test_resume_keeps_the_run_settings_not_given_again(tmp_path):
    from engine import runs
    run = tmp_path / "r"
    runs.start_run(run, "pretrain", config={**PretrainConfig.classroom(steps=50, lr=5e-4).__dict__, "mask_ratios": [0.8, 0.1, 0.1]})
    cfg = config_from_args(cli.given(PretrainConfig, pretrain_parser(), ["--out", str(run), "--resume", "--steps", "80"]))
    assert (cfg.steps, cfg.lr, cfg.mask_ratios, cfg.resume) == (80, 5e-4, (0.8, 0.1, 0.1), True)
    # a run saved when --compile was a switch (true / false) resumes with the word for it
    for saved, word in ((False, "off"), (True, "on")):
        old = tmp_path / f"old-{word}"
        runs.start_run(old, "pretrain", config={**PretrainConfig.classroom().__dict__, "mask_ratios": [0.8, 0.1, 0.1], "compile": saved})
        assert config_from_args(cli.given(PretrainConfig, pretrain_parser(), ["--out", str(old), "--resume"])).compile == word


def test_pretrain_from_scratch_is_the_classroom_run_for_every_flag_left_out():
    from engine.pretraining.config import CLASSROOM_RECIPE
    given = lambda *argv: config_from_args(cli.given(PretrainConfig, pretrain_parser(), ["--out", "x", *argv]))
    cfg = given()
    assert cfg == given("--classroom") == PretrainConfig.classroom(out="x")
    assert {k: getattr(cfg, k) for k in CLASSROOM_RECIPE} == CLASSROOM_RECIPE
    assert (cfg.seq_len, cfg.phase2_seq_len, cfg.batch_size) == (32, 128, 64)  # two phases: short, then long
    assert cfg.lr > PretrainConfig().lr and cfg.mask_rate > PretrainConfig().mask_rate  # the recipe over the paper's
    # a typed length is the first phase's length: it never switches the recipe's second phase off by itself
    one = given("--seq-len", "128", "--phase2-seq-len", "0")
    assert (one.seq_len, one.phase2_seq_len, one.batch_size, one.steps) == (128, None, 64, 3000)
    assert given("--seq-len", "64").phase2_seq_len == 128
    assert given("--phase2-seq-len", "512").seq_len == 32
    assert given("--phase2-fraction", "0.2").phase2_seq_len == 128  # the share alone keeps the schedule
    with pytest.raises(EngineError, match="above the model's 64 positions"):  # no room for the second phase: say so
        validate(given("--max-positions", "64"))
    assert (given("--steps", "50").steps, given("--steps", "50").seq_len) == (50, 32)  # other flags keep it
    # a queued job's command line names every setting: it rebuilds the very config, schedule and all
    for c in (cfg, one, PretrainConfig.classroom(), PretrainConfig.classroom(seq_len=64, phase2_seq_len=256)):
        c = replace(c, out="x")
        assert config_from_args(cli.given(PretrainConfig, pretrain_parser(), cli.argv(c)[1:])) == c


def test_the_classroom_studies_pretrain_as_the_command_does():
    from engine.ablations import get_study
    cfg = PretrainConfig.classroom()
    for name in ("pretraining-tasks", "model-size", "masking", "training-steps"):
        base = get_study(name, scale="classroom").base
        steps = 2 * cfg.steps if name == "pretraining-tasks" else cfg.steps  # Table 5: twice the steps (paper.py)
        assert (base.steps, base.batch_size, base.seq_len, base.phase2_seq_len, base.phase2_fraction) == \
               (steps, cfg.batch_size, cfg.seq_len, cfg.phase2_seq_len, cfg.phase2_fraction), name


def test_a_setting_the_command_line_cannot_carry_is_refused():
    @dataclass
    class Toy:
        command: ClassVar[str] = "toy"
        size: int = cli.setting(3, "a size")
        name: Optional[str] = cli.setting("a", "a name")
        hidden_knob: float = 0.5  # no flag

    assert cli.argv(Toy(size=4)) == ["toy", "--size", "4", "--name", "a"]
    with pytest.raises(EngineError, match="hidden_knob has no command-line flag"):
        cli.argv(Toy(hidden_knob=0.7))
    with pytest.raises(EngineError, match="--name cannot be given as None"):
        cli.argv(Toy(name=None))
