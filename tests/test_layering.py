"""Layering: engine/ never imports the UI (studio, streamlit); the job queue loads without torch; the /proc
liveness helpers are defined once (engine/procs.py); `engine.<name>` resolves every public name lazily."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import engine

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set:
    """The top-level package of every module `path` imports (module level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_engine_never_imports_the_ui():
    files = sorted((REPO / "engine").rglob("*.py"))
    assert len(files) > 20
    offenders = {str(p.relative_to(REPO)): sorted(imported_modules(p) & {"studio", "streamlit", "pages"}) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_ast_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from studio import jobs\n    import streamlit as st\n")
    assert imported_modules(f) == {"studio", "streamlit"}


def test_liveness_helpers_are_defined_once():
    names = {"proc_stat", "_proc_stat", "pid_alive", "_pid_alive", "group_alive", "_group_alive", "proc_start_time",
             "proven_alive", "_proven"}
    where = []
    for folder in ("engine", "studio", "pages"):
        for p in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef) and node.name in names:
                    where.append((str(p.relative_to(REPO)), node.name))
    assert sorted(where) == sorted(("engine/procs.py", n) for n in ("proc_stat", "pid_alive", "proc_start_time", "proven_alive"))


@pytest.mark.slow
def test_job_queue_and_ablations_load_without_torch():
    code = ("import sys, engine, engine.jobs, engine.runs, engine.ablations; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_run_entry_points_stay_functions_when_their_modules_are_imported_first():
    code = ("import sys; from engine.pretrain import main; from engine.finetune import main as m2; import engine; "
            "assert engine.pretrain is sys.modules['engine.pretrain'].pretrain and callable(engine.pretrain); "
            "assert engine.finetune is sys.modules['engine.finetune'].finetune; "
            "import engine.prepare; assert engine.prepare is sys.modules['engine.prepare'].prepare")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_public_name_resolves():
    assert len(engine.__all__) == len(set(engine.__all__)) > 30
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    assert set(engine.__all__) <= set(dir(engine))
    with pytest.raises(AttributeError):
        engine.no_such_name
