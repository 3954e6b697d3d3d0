"""The command table (engine/commands.py): every command `python -m engine` lists dispatches to a module's
`main(argv)`, and the help and the job queue read the same names."""
import importlib

from engine import jobs
from engine.commands import COMMANDS, help_text


def test_every_command_has_a_main_and_a_help_line():
    for name, (module, what) in COMMANDS.items():
        assert callable(importlib.import_module(module).main), name
        assert f"  {name:<11} {what}" in help_text()
    assert jobs.ENGINE_COMMANDS == tuple(COMMANDS)


def test_an_unknown_command_is_one_line_naming_the_commands(capsys):
    from engine.__main__ import run
    assert run(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(name in err for name in COMMANDS)


def test_each_run_kind_is_described_once():
    from engine.commands import FEATURES, FINETUNE, LAYERS, PRETRAIN, RUN_KINDS, kind_of, written_by
    assert list(RUN_KINDS) == ["pretrain", "finetune", "features", "layers"]  # run.json's "kind" on disk
    assert all(k.command in COMMANDS and written_by(k.command) is k for k in RUN_KINDS.values())
    assert [k.name for k in RUN_KINDS.values() if k.checkpoints] == ["pretrain"] == [k.name for k in RUN_KINDS.values() if k.reusable]
    assert [k for k in RUN_KINDS.values() if k.resumes] == [PRETRAIN, FINETUNE, FEATURES]
    assert (PRETRAIN.page, FINETUNE.page, FEATURES.page, LAYERS.page) == (
        "pages/2_Pretrain.py", "pages/3_Finetune.py", "pages/4_Features.py", "pages/10_Layers.py")
    assert kind_of("finetune") is FINETUNE and written_by("probe") is None
    for odd in (None, "probe", ["pretrain"]):  # absent, unknown, a damaged file's: a kind that is none of them
        k = kind_of(odd)
        assert k not in RUN_KINDS.values() and not (k.checkpoints or k.reusable or k.resumes or k.page)
