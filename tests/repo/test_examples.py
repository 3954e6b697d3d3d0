"""examples/notebook_tour.py runs end to end on a tiny checkpoint (and on MiniLM) and prints what it promises."""
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # runs the example script as a program and the whole tour

REPO = Path(__file__).resolve().parents[2]

SCRIPT = REPO / "examples" / "notebook_tour.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("notebook_tour", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tour(capsys, *args):
    """Run the script's main in-process (as `python examples/notebook_tour.py ARGS` would) and return stdout."""
    assert _load_script().main(list(args)) == 0
    return capsys.readouterr().out


def test_script_runs_as_a_program(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--compare" in r.stdout


def test_tour_on_two_checkpoints(tiny_run, tmp_path, capsys, tiny_run_steps):
    import engine
    from engine import probes

    late, early = tiny_run / "checkpoints" / f"step-{tiny_run_steps[-1]}", tiny_run / "checkpoints" / f"step-{tiny_run_steps[0]}"
    out = _tour(capsys, "--model", str(tiny_run), "--compare", str(early), "--out", str(tmp_path))
    bundle = engine.load(late)
    best = probes.fill_mask(bundle, "the government said it would cut [MASK] next year .", top_k=5)[0][0]
    assert f"fill_mask [MASK] 1: {best[0]} {best[1]:.3f}" in out
    p = float(probes.next_sentence(bundle, "the man went to the store .", "he bought a gallon of milk ."))
    assert f"P(IsNext) = {p:.3f}" in out
    m = re.search(r"attention: (\d+) tokens, array shape \((\d+), (\d+), (\d+), (\d+)\)", out)
    assert m and m.group(2, 3) == ("2", "2") and m.group(1) == m.group(4) == m.group(5)
    html = (tmp_path / "head_view.html").read_text()
    assert "bertviz" in html and "[CLS]" in html  # bertviz's own page (needs internet to view)
    acc = probes.probe_set_accuracy(bundle)
    row = [l for l in out.splitlines() if l.startswith(f"tiny-run/step-{tiny_run_steps[-1]} ")][0]
    assert row.split()[-1] == f"{100 * acc['nsp_acc']:.1f}%"
    assert "heads that changed most" in out and re.search(r"L\dH\d \d\.\d{4}", out)
    # attention analysis: the printed numbers are the engine's
    sa, sb = "the cat sat on the mat .", "it was very happy ."
    roll = engine.attention_rollout(bundle, sa, sb)
    assert f"rollout: [CLS] traces back to " in out and f"{roll[0].max():.3f}" in out
    imp = engine.head_importance(bundle, [sa, "shares fell sharply on monday ."])
    assert f"(+{imp.max():.4f} over {imp.base_loss:.4f})" in out
    offline = (tmp_path / "head_view_offline.html").read_text()
    assert 'id="bs-head-view"' in offline and "http" not in offline


def test_tour_on_minilm_says_it_has_no_heads(tmp_path, capsys):
    out = _tour(capsys, "--model", "minilm", "--out", str(tmp_path))
    assert "fill_mask: MiniLM has no MLM head" in out and "next_sentence: MiniLM has no NSP head" in out
    assert "array shape (6, 12," in out and (tmp_path / "head_view.html").is_file()
    assert "head_importance: MiniLM has no MLM head" in out and "value-weighted: [CLS]/[SEP] get" in out


def test_step_profile_times_both_losses():
    """examples/step_profile.py (BENCHMARKS.md's command for the blocked vocabulary loss) runs and prints a row per
    objective and length with a time per loss path."""
    r = subprocess.run([sys.executable, str(REPO / "examples" / "step_profile.py"), "--objectives", "mlm,ltr",
                        "--lengths", "16", "--batch-size", "2", "--vocab-size", "300", "--steps", "2", "--warmup", "1",
                        "--threads", "1"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(("mlm", "ltr"))]
    assert [x[:2] for x in rows] == [["mlm", "16"], ["ltr", "16"]]
    assert all(len(x) == 4 and float(x[2]) > 0 and float(x[3]) > 0 for x in rows)


def _copy_probe_module():
    spec = importlib.util.spec_from_file_location("copy_probe", REPO / "examples" / "copy_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Copier(torch.nn.Module):
    """A stand-in model for [CLS] s s' [SEP] inputs that answers from the first half: causal, position t predicts
    the token after the one L-1 places back (induction); masked, a position of the second half gets the token L
    places back. Perfect on a repeat, wrong (but for coincidences) otherwise."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size, self.mlm = vocab_size, True

    def forward(self, ids):  # (1, T)
        T = ids.shape[1]
        L = (T - 2) // 2
        src = torch.zeros_like(ids)
        if self.causal:
            src[:, L + 1:2 * L] = ids[:, 2:L + 1]  # position L+1+j (s[j], copy two) predicts s[j+1], at j+2 in copy one
        else:
            src[:, L + 1:2 * L + 1] = ids[:, 1:L + 1]
        return types.SimpleNamespace(mlm_logits=torch.nn.functional.one_hot(src, self.vocab_size).float())


@pytest.mark.parametrize("causal", [True, False])
def test_copy_probe_scores_a_perfect_copier(bbc_tokenizer, causal):
    """examples/copy_probe.py (BENCHMARKS.md's evidence on why LTR leads the classroom span task): a model that
    copies from the first half scores 1 on the repeated half and close to 0 on the unrepeated one, for both
    objectives, so its position bookkeeping is right."""
    mod = _copy_probe_module()
    model = _Copier(bbc_tokenizer.vocab_size)
    model.causal = causal
    config = types.SimpleNamespace(causal=causal, max_position_embeddings=512)
    bundle = types.SimpleNamespace(model=model, tokenizer=bbc_tokenizer, config=config, path="copier")
    sents = ["The committee said on Tuesday that it would review the budget plans again next year.",
             "Shares in the company rose sharply after it reported higher profits for the third quarter.",
             "The minister told reporters that the new rules would come into force in the spring."]
    r = mod.copy_probe(bundle, sents, min_len=8)
    assert r["causal"] is causal and r["repeated"] == 1.0 and r["not_repeated"] < 0.3, r


def test_copy_probe_runs_on_a_checkpoint(tiny_checkpoint):
    r = subprocess.run([sys.executable, str(REPO / "examples" / "copy_probe.py"), str(tiny_checkpoint),
                        "--sentences", "20"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[-1].split()
    assert row[1] == "MLM@mask" and 0 <= float(row[2]) <= 1 and 0 <= float(row[3]) <= 1
