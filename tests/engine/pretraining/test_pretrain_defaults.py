"""One source per pre-training setting: `PretrainConfig()` is what `python -m engine pretrain` trains, the Pre-train
form shows the config's values, and the page holds no setting of its own."""
import ast
from dataclasses import fields, replace
from pathlib import Path

from engine import cli
from engine.pretraining.config import CLASSROOM_RECIPE, CONTINUED_PRETRAINING, PretrainConfig
from engine.pretraining.run import build_parser, config_from_args
from studio.pretrain_form import form_defaults, length_choices, phase2_choices

REPO = Path(__file__).resolve().parents[3]


def _from_flags(*argv):
    return config_from_args(cli.given(PretrainConfig, build_parser(), ["--out", "x", *argv]))


def test_the_command_trains_the_config_defaults():
    assert _from_flags() == replace(PretrainConfig(), out="x")
    assert {k: getattr(PretrainConfig(), k) for k in CLASSROOM_RECIPE} == CLASSROOM_RECIPE  # what the studies lay over
    assert _from_flags("--mask-rate", "0.2") == replace(PretrainConfig(), out="x", mask_rate=0.2)  # a flag: only itself


def test_one_phase_is_written_as_zero_and_read_back():
    one = _from_flags("--seq-len", "128")
    assert (one.seq_len, one.phase2_seq_len) == (128, None)
    argv = cli.argv(one)
    assert argv[argv.index("--phase2-seq-len") + 1] == "0"
    assert config_from_args(cli.given(PretrainConfig, build_parser(), argv[1:])) == one
    assert _from_flags("--phase2-seq-len", "0").phase2_seq_len is None


def test_the_form_starts_from_the_config_and_its_recipe():
    assert form_defaults() == PretrainConfig()
    cont = form_defaults("minilm")
    assert {k: getattr(cont, k) for k in CONTINUED_PRETRAINING} == CONTINUED_PRETRAINING and cont.init == "minilm"
    d = PretrainConfig()
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
    one = replace(PretrainConfig(), seq_len=128, phase2_seq_len=None)
    assert training_key(asdict(replace(one, phase2_fraction=0.1))) == training_key(asdict(one))
    assert training_key(asdict(replace(PretrainConfig(), phase2_fraction=0.1))) != training_key(asdict(PretrainConfig()))
