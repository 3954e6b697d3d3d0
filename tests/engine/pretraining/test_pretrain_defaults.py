"""One source per pre-training setting: `PretrainConfig()` holds the paper's defaults, a named recipe (engine/recipes.py)
lays a few settings over them, `python -m engine pretrain` trains the classroom recipe unless told otherwise, the
Pre-train form shows the recipe's values, and the page holds no setting of its own."""
import ast
from dataclasses import fields, replace
from pathlib import Path

import pytest

from engine import cli, recipes
from engine.errors import EngineError
from engine.pretraining.config import CLASSROOM_RECIPE, CONTINUED_PRETRAINING, PretrainConfig
from engine.pretraining.run import build_parser, config_from_args
from studio.pretrain_form import form_defaults, length_choices, phase2_choices

REPO = Path(__file__).resolve().parents[3]


def _from_flags(*argv):
    return config_from_args(cli.given(PretrainConfig, build_parser(), ["--out", "x", *argv]))


def test_the_config_defaults_are_the_papers():
    """BERT-BASE as the paper pre-trains it (section 3.1, A.2)."""
    p = PretrainConfig()
    assert (p.preset, p.vocab_size, p.seq_len, p.phase2_seq_len, p.phase2_fraction) == ("base", 30000, 128, 512, 0.1)
    assert (p.mask_rate, p.mask_ratios, p.dropout, p.lr, p.warmup) == (0.15, (0.8, 0.1, 0.1), 0.1, 1e-4, 10_000)
    assert (p.steps, p.batch_size, p.adam_eps, p.weight_decay) == (1_000_000, 256, 1e-6, 0.01)


def test_the_command_trains_the_classroom_recipe_unless_told_otherwise():
    classroom = PretrainConfig.classroom()
    assert _from_flags() == replace(classroom, out="x") == _from_flags("--recipe", "classroom") == _from_flags("--classroom")
    assert classroom == replace(PretrainConfig(), **recipes.settings("classroom"))  # a recipe is an overlay, nothing else
    assert {k: getattr(classroom, k) for k in CLASSROOM_RECIPE} == CLASSROOM_RECIPE  # what the studies lay over
    assert _from_flags("--mask-rate", "0.2") == replace(classroom, out="x", mask_rate=0.2)  # a flag: only itself
    assert _from_flags("--recipe", "paper") == replace(PretrainConfig(), out="x")
    assert _from_flags("--recipe", "lab", "--steps", "7") == replace(PretrainConfig(), out="x", **{**recipes.settings("lab"), "steps": 7})


def test_a_flag_never_changes_the_meaning_of_another():
    """--seq-len is the first phase's length whatever the recipe: beside the classroom's second phase it stays a
    two-phase run, and a length that leaves no longer second phase is an error naming the fix, not a silent switch."""
    cfg = _from_flags("--seq-len", "64")
    assert (cfg.seq_len, cfg.phase2_seq_len) == (64, recipes.settings("classroom")["phase2_seq_len"])
    from engine.pretraining.config import validate
    with pytest.raises(EngineError, match="--phase2-seq-len 0"):
        validate(_from_flags("--seq-len", "128"))
    with pytest.raises(EngineError, match="continues a pre-trained model; give --init"):
        _from_flags("--recipe", "continued")
    with pytest.raises(EngineError, match="trains from scratch and --init"):
        _from_flags("--recipe", "classroom", "--init", "minilm")
    with pytest.raises(EngineError, match="--classroom is --recipe classroom"):
        _from_flags("--classroom", "--recipe", "lab")
    with pytest.raises(EngineError, match="invalid choice"):
        _from_flags("--recipe", "nope")


def test_one_phase_is_written_as_zero_and_read_back():
    one = _from_flags("--seq-len", "128", "--phase2-seq-len", "0")
    assert (one.seq_len, one.phase2_seq_len) == (128, None)
    argv = cli.argv(one)
    assert argv[argv.index("--phase2-seq-len") + 1] == "0"
    assert config_from_args(cli.given(PretrainConfig, build_parser(), argv[1:])) == one
    assert _from_flags("--phase2-seq-len", "0").phase2_seq_len is None


def test_a_queued_command_line_gives_back_its_config_under_any_recipe():
    for name in recipes.scratch():
        cfg = replace(recipes.config(PretrainConfig, name), out="x")
        assert config_from_args(cli.given(PretrainConfig, build_parser(), cli.argv(cfg)[1:])) == cfg


def test_the_form_starts_from_the_config_and_its_recipe():
    assert form_defaults() == PretrainConfig.classroom()
    cont = form_defaults("minilm")
    assert {k: getattr(cont, k) for k in CONTINUED_PRETRAINING} == CONTINUED_PRETRAINING and cont.init == "minilm"
    d = PretrainConfig.classroom()
    assert d.seq_len in length_choices(d) and d.phase2_seq_len in phase2_choices(d) and None in phase2_choices(d)
    assert max(length_choices(replace(d, max_positions=128))) == 128


def test_the_pretrain_page_holds_no_setting_of_its_own():
    """No number in a widget of the Pre-train page's launch form: defaults, choices and ranges come from the config and
    studio.pretrain_form (a literal there would be a second default the command does not follow)."""
    tree = ast.parse((REPO / "pages" / "2_Pretrain.py").read_text(encoding="utf-8"))
    widgets = {"number_input", "slider", "selectbox", "checkbox", "radio"}
    form = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.endswith(("_form", "_fields"))]
    assert {f.name for f in form} >= {"launch_form", "model_fields", "training_fields"}
    found = []
    for call in (c for f in form for c in ast.walk(f)):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in widgets:
            args = list(call.args[1:]) + [k.value for k in call.keywords if k.arg in ("value", "index", "step",
                                                                                     "min_value", "max_value")]
            for a in args:
                indexes = {id(n) for s in ast.walk(a) if isinstance(s, ast.Subscript) for n in ast.walk(s.slice)}
                for node in ast.walk(a):
                    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                            and not isinstance(node.value, bool) and id(node) not in indexes:  # N["steps"][:2] is not a setting
                        found.append((call.lineno, node.value))
    assert found == []
    settings = {f.name for f in fields(PretrainConfig)}
    assert {"mask_rate", "mask_ratios", "seq_len", "phase2_seq_len", "vocab_size"} <= settings


def test_a_study_takes_over_a_one_phase_run_whatever_share_its_absent_second_phase_had():
    """Runs made when the second phase's share defaulted to 0.1 (continued pre-training, one-phase studies) train
    what today's one-phase configs train: the share of a phase that is not there is not part of the key."""
    from dataclasses import asdict

    from engine.ablations.reuse import training_key
    one = replace(PretrainConfig.classroom(), seq_len=128, phase2_seq_len=None)
    assert training_key(asdict(replace(one, phase2_fraction=0.1))) == training_key(asdict(one))
    assert training_key(asdict(replace(PretrainConfig.classroom(), phase2_fraction=0.1))) != training_key(asdict(PretrainConfig.classroom()))


def test_the_forms_ranges_are_the_configs():
    """The Pre-train form's boxes offer the ranges declared on the config's fields (engine.cli.field_limits), and so do
    the Fine-tune and Features pages' boxes of theirs: a range changed on a field moves the box."""
    from engine.features import FeaturesConfig
    from engine.finetune import FinetuneConfig
    from studio.pretrain_form import FORM_RANGES
    assert FORM_RANGES["steps"] == cli.field_limits(PretrainConfig, "steps")
    assert FORM_RANGES["every"] == cli.field_limits(PretrainConfig, "eval_every") == cli.field_limits(PretrainConfig, "save_every")
    assert FORM_RANGES["mask_ratio"] == cli.field_limits(PretrainConfig, "mask_ratios")
    for cls, name in ((FinetuneConfig, "restarts"), (FeaturesConfig, "epochs")):
        lo, hi, step = cli.field_limits(cls, name)
        assert lo <= cli.field_setting(cls, name)[0] <= hi and step > 0
    for page, cls in (("3_Finetune.py", "FinetuneConfig"), ("4_Features.py", "FeaturesConfig")):
        assert f"cli.field_limits({cls}, n)" in (REPO / "pages" / page).read_text(encoding="utf-8")
