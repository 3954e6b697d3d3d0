"""The route a pre-training run's settings take, from `python -m engine pretrain` to the first optimizer step.

    python docs/lab-notes/route_measure.py [--all]

Runs a one-step pre-training (a tiny model on a small synthetic corpus, in a temporary folder) under
`sys.setprofile` and records every call of a function in engine/ that receives the run's settings: the
PretrainConfig itself, or an object holding it (the resolved plan). The calls stop at the first optimizer step. With --all it
records every call of a function in engine/ instead (the helpers the route reaches too: tokenizer, run folder, data).
From that sequence of calls (file, function) it counts:
- stays: runs of consecutive calls in one file (the route reads one file, then another);
- files: the distinct files it passes through;
- climbs: a call from a module in a package into a module of a package above it (engine/pretraining/x.py calling
  engine/y.py): the route goes back up the layering;
- returns: stays in a file the route had already left.
It prints the route, one stay per line, and the four numbers. Written for the structure round's "route before and
after" (docs/lab-notes/structure.md); the definitions are this script's, so before and after are counted alike.
"""
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
ENGINE = str(ROOT / "engine")


def synthetic_corpus(path: Path) -> None:
    rng = random.Random(0)
    words = "the a cat dog ran sat on mat house tree river bank money market said people year new".split()
    docs = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + " ." for _ in range(6))
            for _ in range(60)]
    path.write_text("\n\n".join(docs))


def carries_settings(value) -> bool:
    from engine.pretraining.config import PretrainConfig
    if isinstance(value, PretrainConfig):
        return True
    return any(isinstance(getattr(value, a, None), PretrainConfig) for a in ("cfg", "config"))


def trace(argv: list, every: bool = False) -> list:
    calls, done = [], [False]

    def profile(frame, event, arg):
        if done[0] or event != "call":
            return
        code = frame.f_code
        if code.co_name == "step" and "torch/optim" in code.co_filename:
            done[0] = True
            return
        if not code.co_filename.startswith(ENGINE):
            return
        n = code.co_argcount + code.co_kwonlyargcount
        if every or any(carries_settings(frame.f_locals.get(v)) for v in code.co_varnames[:n]):
            calls.append((str(Path(code.co_filename).relative_to(ROOT)), code.co_name))

    from engine.__main__ import run
    sys.setprofile(profile)
    try:
        run(argv)
    finally:
        sys.setprofile(None)
    return calls


def depth(path: str) -> int:
    return path.count("/")


def count(calls: list) -> dict:
    stays, seen, climbs, returns = [], set(), 0, 0
    for path, name in calls:
        if stays and stays[-1][0] == path:
            stays[-1][1].append(name)
            continue
        if stays and depth(path) < depth(stays[-1][0]):
            climbs += 1
        if path in seen:
            returns += 1
        seen.add(path)
        stays.append((path, [name]))
    return dict(stays=stays, files=len(seen), climbs=climbs, returns=returns)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        synthetic_corpus(corpus)
        argv = ["pretrain", "--corpus", str(corpus), "--out", str(Path(tmp) / "run"), "--cache-dir", str(Path(tmp) / "cache"),
                "--layers", "1", "--hidden", "32", "--heads", "2", "--vocab-size", "200", "--steps", "1",
                "--batch-size", "4", "--seq-len", "32", "--phase2-seq-len", "0", "--eval-every", "0", "--save-every", "0"]
        result = count(trace(argv, every="--all" in sys.argv))
    for path, names in result["stays"]:
        print(f"{path}: {', '.join(names)}")
    print(f"{len(result['stays'])} stays in {result['files']} files, {result['climbs']} climbs back up, "
          f"{result['returns']} returns to a file already left")


if __name__ == "__main__":
    main()
