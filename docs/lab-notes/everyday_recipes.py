"""Trial recipes for the probe-ready model, one at a time, each scored the same way (docs/lab-notes/probe-ready-model.md,
"Everyday English").

Each trial is `python -m engine pretrain --recipe continued --init minilm --out ROOT/NAME --quiet` plus its flags, from
an empty data cache of its own (ROOT/cache-NAME: the minutes include tokenizing the corpus and building the instances),
under `/usr/bin/time -v`. After it, the script reads the run's last held-out record (its own split: MLM accuracy, NSP
accuracy, the no-model NSP rule), scores the final checkpoint on the built-in probe set (engine.probes, by section) and
prints the top 5 of the everyday sentences the teacher tried (EVERYDAY_TRIED) and P(IsNext) of the showcase pair.
It samples the load average and the host's steal (`/proc/stat`) every 30 s while a trial trains. One JSON per trial
in ROOT/NAME/trial.json and one line on stdout.

    python docs/lab-notes/everyday_recipes.py --root DIR NAME=FLAGS [NAME=FLAGS ...]
    e.g.  all="--corpus all"  everyday="--corpus everyday"  everyday-wwm="--corpus everyday --whole-word-mask"
    python docs/lab-notes/everyday_recipes.py --root DIR --score-only NAME [NAME ...]   (score finished runs again)
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# the sentences of the trial of the probe-ready model (a teacher's, 2026-12-07), and the page's showcase pair
EVERYDAY_TRIED = [
    ("she poured milk into her [MASK] .", ("cup", "glass", "mug", "coffee", "tea", "bowl")),
    ("the doctor told me to take the [MASK] twice a day .", ("medicine", "pills", "pill", "tablets", "medication", "drug")),
    ("i brush my [MASK] every morning .", ("teeth", "hair")),
    ("we need to buy bread and eggs at the [MASK] .", ("store", "shop", "supermarket", "market", "bakery")),
    ("paris is the capital of [MASK] .", ("france",)),
    ("she drank a cup of [MASK] .", ("tea", "coffee", "water", "milk")),
    ("we had pizza for [MASK] last night .", ("dinner", "supper", "lunch")),
    ("the man went to the [MASK] to buy milk .", ("store", "shop", "supermarket", "market")),
    ("it is raining , so take an [MASK] .", ("umbrella",)),
    ("i was so tired that i went to [MASK] early .", ("bed", "sleep")),
]
SHOWCASE = ("the man went to the store .", "he bought a gallon of milk .")


def _cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[7] if len(fields) > 7 else 0  # total, steal


class Sampler(threading.Thread):
    """Load average (1 min) and the host's steal share, every `every` seconds, until stopped."""

    def __init__(self, every=30.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self):
        total, steal = _cpu_times()
        while not self.stop.wait(self.every):
            t2, s2 = _cpu_times()
            self.samples.append({"load": os.getloadavg()[0], "steal": (s2 - steal) / max(1, t2 - total)})
            total, steal = t2, s2


def train(root: Path, name: str, flags: str) -> dict:
    out, cache = root / name, root / f"cache-{name}"
    argv = [sys.executable, "-m", "engine", "pretrain", "--recipe", "continued", "--init", "minilm", *shlex.split(flags),
            "--out", str(out), "--quiet"]
    env = dict(os.environ, BERT_STUDIO_CACHE=str(cache))
    sampler = Sampler()
    sampler.start()
    t0 = time.time()
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, capture_output=True, text=True)
    wall = time.time() - t0
    sampler.stop.set()
    rss = [ln for ln in proc.stderr.splitlines() if "Maximum resident" in ln]
    if proc.returncode:
        raise SystemExit(f"{name} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    loads = [s["load"] for s in sampler.samples] or [os.getloadavg()[0]]
    steals = [s["steal"] for s in sampler.samples] or [0.0]
    return {"argv": argv[1:], "wall_min": wall / 60, "started": time.strftime("%H:%M:%S", time.gmtime(t0)),
            "ended": time.strftime("%H:%M:%S", time.gmtime(t0 + wall)),
            "peak_rss_kb": int(rss[0].split(":")[1]) if rss else None,
            "load": [min(loads), max(loads)], "steal_median": sorted(steals)[len(steals) // 2], "steal_max": max(steals)}


def score(run_dir: Path) -> dict:
    from engine.checkpoint import load
    from engine.pretraining.run_folder import last_eval
    from engine.probes import fill_mask, next_sentence, probe_set_accuracy
    bundle = load(str(run_dir))
    ev = last_eval(run_dir)
    res = probe_set_accuracy(bundle)
    tried, hits = [], 0
    for sentence, good in EVERYDAY_TRIED:
        preds = fill_mask(bundle, sentence, top_k=5)
        words = [(w, round(p, 3)) for w, p in preds[0]]  # the first [MASK]'s top 5
        hits += words[0][0] in good
        tried.append({"sentence": sentence, "top5": words, "sensible_first": words[0][0] in good})
    return {"step": ev.get("step"), "held_out": {k: ev.get(k) for k in ev if k.startswith("eval_")},
            "probe_set": {"cloze_top1": res["cloze_top1"], "cloze_topk": res["cloze_topk"], "nsp": res["nsp_acc"],
                          "by_section": res["by_section"]},
            "tried": tried, "tried_first_sensible": hits, "showcase_p_isnext": float(next_sentence(bundle, *SHOWCASE))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--score-only", action="store_true")
    ap.add_argument("trials", nargs="+", help="NAME=FLAGS (or NAME with --score-only)")
    a = ap.parse_args()
    a.root.mkdir(parents=True, exist_ok=True)
    for spec in a.trials:
        name, _, flags = spec.partition("=")
        path = a.root / name / "trial.json"
        rec = json.loads(path.read_text()) if a.score_only and path.exists() else {"name": name, "flags": flags}
        if not a.score_only:
            rec.update(train(a.root, name, flags))
        rec.update(score(a.root / name))
        path.write_text(json.dumps(rec, indent=1))
        ps = rec["probe_set"]
        print(json.dumps({"name": name, "wall_min": round(rec.get("wall_min", 0), 2), "held_out": rec["held_out"],
                          "everyday": ps["by_section"].get("everyday facts"), "grammar": ps["by_section"].get("grammar"),
                          "news": ps["by_section"].get("news"), "nsp_pairs": ps["nsp"],
                          "tried_first_sensible": rec["tried_first_sensible"], "showcase": rec["showcase_p_isnext"]}),
              flush=True)


if __name__ == "__main__":
    main()
