"""A default changed in one line moves everything that shows it, checked in a scratch copy of the repository.

    python docs/lab-notes/default_moves.py

Copies the working tree (tracked and new files, not ignored ones) to a temporary folder, changes one line in each of two places there:
- the classroom recipe's learning rate (engine/recipes.py, CLASSROOM: lr 1e-3 -> 2e-3);
- Table 5's classroom steps (engine/ablations/paper.py, CLASSROOM_STUDIES["pretraining-tasks"]: 6000 -> 5000);
then asks every place that shows either value, in the copy, and prints what each says before and after. Nothing in
this repository is changed. The places: `pretrain --help`, the command's config from no flags, the Pre-train page's
form (its Learning rate box, rendered with Streamlit's AppTest), the classroom studies' base, the class preparation's
reference run, a queued study job's command line, and the lessons built on Table 5's classroom study.
"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r'''
import json, re, subprocess, sys
from engine.pretraining.config import PretrainConfig
from engine.pretraining.run import build_parser, config_from_args
from engine import cli
from studio.pretrain_form import form_defaults
import engine.ablations as A
from engine.classroom import parts, recipe_config
from streamlit.testing.v1 import AppTest

out = {}
helps = subprocess.run([sys.executable, "-m", "engine", "pretrain", "--help"], capture_output=True, text=True).stdout
out["pretrain --help, --lr"] = re.search(r"--lr LR\s+(.*?)--warmup", helps, re.S).group(1).split("without --recipe")[1].split(";")[0].strip()
out["pretrain with no flags: lr"] = config_from_args(cli.given(PretrainConfig, build_parser(), ["--out", "x"])).lr
out["Pre-train form default: lr"] = form_defaults().lr
at = AppTest.from_file("pages/2_Pretrain.py", default_timeout=60).run()
out["Pre-train page, Learning rate box"] = [n.value for n in at.number_input if n.label == "Learning rate"][0]
study = A.get_study("pretraining-tasks", scale="classroom")
out["Table 5 classroom study: base lr"] = study.base.lr
out["Table 5 classroom study: BERT's steps"] = study.base.steps
jobs = A.plan(study, "/tmp/x")
bert = next(j for j in jobs if j.argv[0] == "pretrain")
out["Table 5 queued BERT job: --lr"] = bert.argv[bert.argv.index("--lr") + 1]
out["Table 5 queued BERT job: --steps"] = bert.argv[bert.argv.index("--steps") + 1]
ref = next(p for p in parts("/tmp/x") if p.key == "reference")
out["class prepare's reference run: lr"] = recipe_config(ref.argv)["lr"]
from engine.ablations.lessons import LESSONS
out["lessons on Table 5 without their own steps"] = sorted({l.key for l in LESSONS if l.study == "pretraining-tasks" and l.steps is None})
print(json.dumps(out, default=str))
'''


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, target)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} is not there exactly once"
    path.write_text(text.replace(old, new))


def ask(tree: Path) -> dict:
    got = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if got.returncode:
        raise SystemExit(got.stderr[-3000:])
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "repo"
        copy_tree(tree)
        before = ask(tree)
        edit(tree / "engine" / "recipes.py", "dropout=0.0, steps=3000, batch_size=64, lr=1e-3, warmup=0.06",
             "dropout=0.0, steps=3000, batch_size=64, lr=2e-3, warmup=0.06")
        edit(tree / "engine" / "ablations" / "paper.py", '"pretraining-tasks": StudyAtScale(steps=6000, budget="flops")',
             '"pretraining-tasks": StudyAtScale(steps=5000, budget="flops")')
        after = ask(tree)
    width = max(map(len, before))
    print(f"{'what shows it':<{width}}  before -> after (one line changed in each of two places)")
    for k in before:
        print(f"{k:<{width}}  {before[k]} -> {after[k]}")


if __name__ == "__main__":
    main()
