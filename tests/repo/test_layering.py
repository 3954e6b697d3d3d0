"""Layering: engine/ never imports the UI (studio, streamlit); the job queue loads without torch; the /proc
liveness helpers are defined once (engine/procs.py); `engine.<name>` resolves every public name lazily."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import engine

REPO = Path(__file__).resolve().parents[2]


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
    code = ("import sys; from engine.pretraining.run import main; from engine.finetune import main as m2; import engine; "
            "assert engine.pretrain is sys.modules['engine.pretraining.run'].pretrain and callable(engine.pretrain); "
            "assert engine.finetune is sys.modules['engine.finetune'].finetune; "
            "import engine.pretraining.prepare; assert engine.prepare is sys.modules['engine.pretraining.prepare'].prepare")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_public_name_resolves():
    assert len(engine.__all__) == len(set(engine.__all__)) > 30
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    assert set(engine.__all__) <= set(dir(engine))
    with pytest.raises(AttributeError):
        engine.no_such_name


def _module_name(path: Path, root: Path) -> str:
    """engine/ablations/cli.py -> engine.ablations.cli; engine/tasks/__init__.py -> engine.tasks."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(folders=("engine", "studio"), root: Path = REPO) -> dict:
    """module -> the modules of `folders` it imports, at module level or inside functions (an import of a package's
    name that is a module counts as that module; a package's own __init__ only when imported by name)."""
    files = {_module_name(p, root): p for folder in folders for p in sorted((root / folder).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from .x import y, resolved against the importing module's package
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def import_cycles(graph: dict) -> list:
    """The groups of modules that import each other, directly or round a loop (strongly connected components of
    more than one module, Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_in_engine_and_studio():
    graph = import_graph()
    assert len(graph) > 60 and "engine.ablations.cli" in graph and "studio.common" in graph
    cycles = import_cycles(graph)
    loops = [{m: sorted(graph[m] & set(c)) for m in c} for c in cycles]
    assert not cycles, f"import loops (module -> what it imports inside the loop): {loops}; move the shared code into a module both can import"


def test_the_cycle_check_finds_a_loop_through_a_function_level_import(tmp_path):
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    # an import inside a function is an edge (the old studio.common <-> studio.probe_ready loop was one), and so is a
    # relative import and a module imported by its package's name
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("import os\n\ndef f():\n    from pkg.b import g\n")
    (tmp_path / "pkg" / "b.py").write_text("from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg import a\n")
    graph = import_graph(("pkg",), root=tmp_path)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_studies_do_not_import_the_benchmark():
    """The planner's FLOPs and the speed check's step timing come from engine.flops, not engine.bench."""
    graph = import_graph()
    seen, todo = set(), ["engine.ablations.planner", "engine.ablations.timing"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    assert "engine.flops" in seen and "engine.bench" not in seen
