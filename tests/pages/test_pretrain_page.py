"""The Pre-train page (AppTest): runs table, live curves and numbers of a real tiny run, a failed run's error
line, and the launch form (validated, handed to the job launcher); a launched run shows as queued at once and is
picked once its job writes it; the training curves against steps, tokens seen or training time, with debiased EMA
smoothing."""
import json
import random
from pathlib import Path

import pytest

import engine
from engine import runs
from engine.pretraining.run import PretrainConfig, pretrain
from studio.compare import ema

pytestmark = pytest.mark.slow  # AppTest runs whole pages

PAGE = "2_Pretrain.py"


def _corpus(path: Path) -> Path:
    rng = random.Random(0)
    words = [[f"w{t}x{i}" for i in range(6)] for t in range(3)]
    docs = [" ".join(" ".join(rng.choice(words[d % 3]) for _ in range(6)).capitalize() + "." for _ in range(12)) for d in range(24)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("page")
    root = base / "runs"
    corpus = _corpus(base / "corpus.txt")
    tok = engine.train_tokenizer(engine.load_corpus(str(corpus)), vocab_size=120)
    pretrain(PretrainConfig.classroom(corpus=str(corpus), tokenizer=str(tok.save(base / "tok")), cache_dir=str(base / "cache"),
                            hidden=32, heads=2, layers=1, max_positions=64, seq_len=32, phase2_seq_len=64, phase2_fraction=0.5,
                            batch_size=4, steps=4, log_every=1, eval_every=2, save_every=2, quiet=True, num_threads=1,
                            out=str(root / "tiny-done")))
    runs.write_run_json(root / "broken", kind="pretrain", status="failed", total_steps=10, created="2000-01-01T00:00:00+00:00",
                        error="could not write checkpoints/step-5: No space left on device; free disk space and retry",
                        config={"objective": "mlm", "preset": "tiny", "corpus": "bbc", "seq_len": 128, "batch_size": 32})
    return root


def test_runs_table_curves_and_numbers(runs_root, page_app):
    at = page_app(PAGE, runs_root)
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert set(table["run"]) == {"tiny-done", "broken"}
    row = table[table["run"] == "tiny-done"].iloc[0]
    assert "finished" in row["status"] and row["step"] == "4 / 4" and row["checkpoint"] == 4
    assert "failed" in table[table["run"] == "broken"].iloc[0]["status"]
    at.selectbox(key="pretrain_run").set_value("tiny-done").run()
    assert not at.exception and not at.error
    used = "bf16" if runs.read_run_json(runs_root / "tiny-done")["bf16"] else "fp32"  # auto resolves per machine
    assert any(f"seq 32 → 64 · batch 4 · cpu · {used}" in m.value for m in at.markdown), [m.value for m in at.markdown]
    charts = at.get("plotly_chart")
    assert len(charts) == 4  # MLM loss/acc, NSP loss/acc, learning rate, throughput
    recs = runs.read_metrics(runs_root / "tiny-done")
    last_eval = [r for r in recs if r["split"] == "eval"][-1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Step"] == "4 / 4"
    assert metrics["Held-out MLM accuracy"] == f"{last_eval['eval_mlm_acc']:.3f}"
    assert metrics["Held-out NSP accuracy"] == f"{last_eval['eval_nsp_acc']:.3f}"
    nsp = next(m for m in at.metric if m.label == "Held-out NSP accuracy")  # beside the best no-model rule
    assert f"vs a no-model rule ({last_eval['eval_nsp_baseline']:.3f})" in nsp.proto.delta
    assert metrics["Held-out perplexity"] == f"{last_eval['eval_mlm_ppl']:.1f}"
    at_mask = next(m for m in at.metric if m.label == "Held-out accuracy at [MASK]")  # beside the most frequent token
    assert at_mask.value == f"{last_eval['eval_mlm_mask_acc']:.3f}"
    assert f"vs most frequent ({last_eval['eval_mlm_mask_baseline']:.3f})" in at_mask.proto.delta
    assert "Scored on 64-token held-out text" in at_mask.proto.help  # the second phase's length: the final one
    # four steps teach no context: the page says so, and how to leave that plateau
    assert last_eval["eval_mlm_mask_acc"] < last_eval["eval_mlm_mask_baseline"] + 0.01
    hint = [i.value for i in at.info if i.value.startswith("No context learned yet")]
    assert len(hint) == 1 and "the classroom run, the form's defaults" in hint[0] and "--" not in hint[0]
    fig = json.loads(charts[0].proto.spec)
    assert {"held-out acc at [MASK]", "most frequent token at [MASK]"} <= {t["name"] for t in fig["data"]}
    # where the held-out set changes length (step 4, the second phase), marked so a drop is not read as forgetting
    assert [a["text"] for a in fig["layout"]["annotations"] if "tokens" in a["text"]] == ["held-out at 64 tokens"]
    assert [sh["x0"] for sh in fig["layout"]["shapes"]] == [4, 4]
    train_loss = [t for t in fig["data"] if t["name"] == "train loss"][0]
    assert list(train_loss["x"]) == [1, 2, 3, 4] and train_loss["y"][-1] == pytest.approx(recs[-2]["mlm_loss"])
    assert not [b for b in at.button if b.label in ("Cancel", "Resume")]  # a finished run has neither


def test_failed_run_shows_its_error_line_and_offers_resume(runs_root, monkeypatch, page_app):
    from engine import jobs
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": "j2", "status": "queued"})
    at = page_app(PAGE, runs_root)
    at.selectbox(key="pretrain_run").set_value("broken").run()
    assert not at.exception
    assert any("No space left on device" in e.value for e in at.error)
    assert len(at.get("plotly_chart")) == 0
    [b for b in at.button if b.label == "Resume"][0].click().run()
    assert not at.exception and calls == [["pretrain", "--out", str(runs_root / "broken"), "--resume", "--quiet"]]


def test_launch_form_validates_and_submits_a_job(runs_root, monkeypatch, page_app):
    from engine import jobs
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append((argv, name, run_dir, root)) or {"id": "j1", "status": "queued"})
    at = page_app(PAGE, runs_root)
    # the form's defaults are the classroom run of `python -m engine pretrain` (PretrainConfig.classroom)
    C = engine.PretrainConfig.classroom()
    value = lambda kind, label: [w for w in getattr(at, kind) if w.label == label][0].value
    assert (value("number_input", "Steps"), value("number_input", "Batch size")) == (C.steps, C.batch_size) == (3000, 64)
    assert (value("selectbox", "Sequence length"), value("selectbox", "Second phase at")) == (C.seq_len, C.phase2_seq_len) == (32, 128)
    launch = lambda: [b for b in at.button if b.label == "Launch"][0]  # noqa: E731
    # an unsafe name: one line beside a disabled Launch, nothing submitted
    [t for t in at.text_input if t.label == "Run name"][0].input("../escape").run()
    assert not at.exception and any("'..'" in e.value or "separator" in e.value for e in at.error)
    assert launch().disabled and calls == []
    # bad masking ratios: caught before launching
    [t for t in at.text_input if t.label == "Run name"][0].input("my-run")
    [n for n in at.number_input if n.label == "→ random token"][0].set_value(0.3).run()
    assert any("sum to" in e.value for e in at.error) and launch().disabled and calls == []
    [n for n in at.number_input if n.label == "→ random token"][0].set_value(0.1)
    # a second phase shorter than the first: refused in one line, nothing submitted
    [b for b in at.selectbox if b.label == "Sequence length"][0].set_value(256)
    [b for b in at.selectbox if b.label == "Second phase at"][0].set_value(128).run()
    # in the page's words: its boxes, not the command's flags
    assert any("'Second phase at' 128 is not longer than 'Sequence length' 256" in e.value for e in at.error)
    assert launch().disabled and calls == []
    assert not any("--" in e.value for e in at.error)
    [n for n in at.number_input if n.label == "Steps"][0].set_value(50)
    # the short-then-long schedule: 32 tokens, then 128 for the last 30%
    [b for b in at.selectbox if b.label == "Sequence length"][0].set_value(32)
    [b for b in at.selectbox if b.label == "Second phase at"][0].set_value(128).run()
    assert not at.error and not launch().disabled, [e.value for e in at.error]  # every box right: Launch enabled
    launch().click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(calls) == 1
    argv, jname, run_dir, root = calls[0]
    assert argv[0] == "pretrain" and jname == "my-run" and Path(run_dir) == Path(runs_root).resolve() / "my-run"
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert flags["--corpus"] == "bbc" and flags["--steps"] == "50" and flags["--mask-ratios"] == "0.8,0.1,0.1"
    assert flags["--objective"] == "mlm+nsp" and flags["--out"] == run_dir and root == str(runs_root)
    assert flags["--precision"] == "auto"  # bf16 where the machine has native bf16, else fp32
    assert flags["--seq-len"] == "32" and flags["--phase2-seq-len"] == "128" and float(flags["--phase2-fraction"]) == C.phase2_fraction == 0.3
    assert any("Launched" in s.value for s in at.success)
    # the packing box: the config's default (padded rows: no flag); ticked it launches the packed step
    box = [c for c in at.checkbox if c.label == "Pack sequences"][0]
    assert box.value is C.packing is False and "--packing" not in argv
    box.check()  # inside the form: sent with the next submit
    [t for t in at.text_input if t.label == "Run name"][0].input("my-run-packed")
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.error and len(calls) == 2, (len(calls), [e.value for e in at.error], [w.value for w in at.warning])
    assert "--packing" in calls[-1][0]
    # the compile choice: the config's default (auto: on a GPU only), or a word the command takes
    pick = [b for b in at.selectbox if b.label == "Compile"][0]
    compile_flag = lambda argv: argv[argv.index("--compile") + 1]  # noqa: E731
    assert pick.value == C.compile == "auto" and compile_flag(calls[-1][0]) == "auto"
    pick.set_value("off")
    [t for t in at.text_input if t.label == "Run name"][0].input("my-run-eager")
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.error and len(calls) == 3 and compile_flag(calls[-1][0]) == "off"


def test_launch_from_a_model_continues_its_pretraining_with_the_recipe(runs_root, monkeypatch, page_app):
    from engine.pretraining.config import CONTINUED_PRETRAINING as R
    from engine import jobs
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append((argv, name, run_dir, root)) or {"id": "j1", "status": "queued"})
    at = page_app(PAGE, runs_root)
    at.selectbox(key="pretrain_init").set_value("minilm").run()
    assert not at.exception
    assert [n for n in at.number_input if n.label == "Steps"][0].value == R["steps"]
    assert [n for n in at.number_input if n.label == "Learning rate"][0].value == R["lr"]
    assert [n for n in at.number_input if n.label == "Vocabulary size"][0].disabled
    heads_first = [n for n in at.number_input if n.label == "Heads first (share)"][0]
    assert heads_first.value == R["heads_first"] and not heads_first.disabled
    assert any(f"the first {engine.PretrainConfig.for_init('minilm').heads_first_steps()} train only the new heads" in c.value
               for c in at.caption)
    [n for n in at.number_input if n.label == "Steps"][0].set_value(40)
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    argv, jname, run_dir, root = calls[0]
    from engine.cli import given
    from engine.pretraining.run import build_parser, config_from_args
    flags = given(engine.PretrainConfig, build_parser(), argv[1:])
    assert jname == "minilm-continued-mlm_nsp" and flags["init"] == "minilm" and flags["corpus"] == R["corpus"]
    assert flags["steps"] == 40 and flags["batch_size"] == R["batch_size"] and flags["lr"] == R["lr"]
    # the queued command names MiniLM's own size and vocabulary, so the job accepts it with --init
    assert (flags["vocab_size"], flags["layers"], flags["hidden"], flags["heads"]) == (30522, 6, 384, 12)
    cfg = config_from_args(flags)
    assert cfg.init == "minilm" and cfg.steps == 40 and cfg.warmup == R["warmup"] and cfg.heads_first == R["heads_first"]
    # a share that leaves no step for the whole model: one line, in the page's words, Launch disabled, nothing queued
    [n for n in at.number_input if n.label == "Steps"][0].set_value(2)
    [n for n in at.number_input if n.label == "Heads first (share)"][0].set_value(0.9).run()
    assert not at.exception and len(calls) == 1 and [b for b in at.button if b.label == "Launch"][0].disabled
    assert [e.value for e in at.error] == ["'Heads first (share)' 0.9 leaves none of the 2 steps to train the whole model; "
                                           "lower it (e.g. 0.15: the first 15% of the steps) or raise 'Steps'"]
    # from scratch the box is off and the command names no heads-first start
    at.selectbox(key="pretrain_init").set_value("random weights (pre-train from scratch)").run()
    assert [n for n in at.number_input if n.label == "Heads first (share)"][0].disabled


def test_studio_precision_choices_are_the_engines():
    from engine.device import COMPILES, PRECISIONS
    from studio.common import COMPILE_CHOICES, PRECISION_CHOICES
    assert PRECISION_CHOICES == PRECISIONS and COMPILE_CHOICES == COMPILES


def test_launched_run_shows_queued_at_once_then_is_picked(tmp_path, monkeypatch, page_app):
    from engine import jobs
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: {"id": "j9", "status": "queued"})
    monkeypatch.setattr(jobs, "get", lambda job_id, root=None: {"id": job_id, "status": "queued"})
    root = tmp_path / "runs"
    at = page_app(PAGE, root)
    assert any("No pre-training runs" in i.value for i in at.info)
    [t for t in at.text_input if t.label == "Run name"][0].input("fresh")
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and not at.error
    infos = [i.value for i in at.info]
    assert any(i.startswith("**fresh** is queued") for i in infos) and not any("No pre-training runs" in i for i in infos)
    # the job starts and writes the run: the page lists it and picks it
    runs.write_run_json(root / "fresh", kind="pretrain", status="running", total_steps=10, config={"objective": "mlm"})
    runs.write_run_json(root / "older", kind="pretrain", status="finished", total_steps=10, created="2000-01-01T00:00:00+00:00",
                        config={"objective": "mlm"})
    at.run()
    assert not at.exception
    assert at.selectbox(key="pretrain_run").value == "fresh"
    assert not any("is queued" in i.value for i in at.info)


def test_curves_against_tokens_and_time_with_smoothing(runs_root, page_app):
    at = page_app(PAGE, runs_root)
    at.selectbox(key="pretrain_run").set_value("tiny-done").run()
    recs = runs.read_metrics(runs_root / "tiny-done")
    train = [r for r in recs if r["split"] == "train"]
    evals = [r for r in recs if r["split"] == "eval"]
    at.slider(key="pretrain_smooth").set_value(0.5).run()
    at.radio(key="pretrain_x").set_value("tokens").run()
    assert not at.exception and not at.error
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    tr = {t["name"]: t for t in fig["data"] if t.get("xaxis", "x") == "x"}
    assert list(tr["train loss"]["x"]) == [r["tokens"] for r in train]
    assert tr["train loss"]["opacity"] == 0.3
    assert tr["train loss (smoothed)"]["y"] == pytest.approx(ema([r["mlm_loss"] for r in train], 0.5).tolist())
    assert fig["layout"]["xaxis"]["title"]["text"] == "tokens seen"
    # training time: held-out points sit at the training time of their step
    at.radio(key="pretrain_x").set_value("elapsed").run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    held = [t for t in fig["data"] if t["name"] == "held-out loss"][0]
    at_step = {r["step"]: r["elapsed"] for r in train}
    assert list(held["x"]) == [at_step[r["step"]] for r in evals]
    assert fig["layout"]["xaxis"]["title"]["text"] == "training time (s)"


def test_prepared_data_is_picked_with_its_statistics_and_launched_from(runs_root, tmp_path, monkeypatch, page_app):
    from engine import jobs
    from engine.pretraining.prepare import PrepareConfig, prepare, prepared_stats

    corpus = _corpus(tmp_path / "c.txt")
    tok = engine.train_tokenizer(engine.load_corpus(str(corpus)), vocab_size=120).save(tmp_path / "tok")
    data = runs_root / "prepared" / "tiny-data"
    prepare(PrepareConfig(corpus=str(corpus), out=str(data), tokenizer=str(tok), seq_len=48, block_docs=10), lambda m: None)
    stats = prepared_stats(data)
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": "j2", "status": "queued"})
    at = page_app(PAGE, runs_root)
    picker = at.selectbox(key="pretrain_data")
    assert str(data) in picker.options and "Shards" not in [m.label for m in at.metric]  # nothing shown until picked
    picker.set_value(str(data)).run()
    shown = {m.label: m.value for m in at.metric}
    assert shown["Documents"] == f"{stats['documents']:,}" and shown["Instances"] == f"{stats['instances']:,}"
    assert shown["Tokens"] == f"{stats['tokens']:,}" and shown["Shards"] == str(stats["shards"]) == "2"
    [t for t in at.text_input if t.label == "Run name"][0].input("from-data")
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    flags = dict(zip(calls[0][1::2], calls[0][2::2]))
    assert flags["--data"] == str(data.resolve()) and flags["--seq-len"] == "48"  # the data's length, not the form's 32
    assert flags["--phase2-seq-len"] == "0"  # prepared data have one length: no second phase
    # a folder that is not prepared data: one line, nothing launched
    at.selectbox(key="pretrain_data").set_value("a prepared folder at a path").run()
    [t for t in at.text_input if t.label == "Prepared data folder"][0].input(str(tmp_path)).run()
    assert any("not a prepared data folder" in e.value for e in at.error) and len(calls) == 1
    assert "Shards" not in [m.label for m in at.metric]


def _stopped(root, name, status, error, config, evals=()):
    runs.write_run_json(root / name, kind="pretrain", status=status, total_steps=240, error=error, config=config)
    ck = root / name / "checkpoints" / "step-80"
    ck.mkdir(parents=True)
    runs.mark_complete(ck, step=80)
    recs = [{"step": 80, "split": "train", "loss": 6.0}] + [dict(e, step=80, split="eval") for e in evals]
    (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_a_cancelled_run_says_the_resume_button_and_the_classroom_run_gets_no_classroom_hint(tmp_path, page_app):
    from engine.pretraining.config import CLASSROOM_RECIPE as R
    root = tmp_path / "runs"
    plateau = {"eval_mlm_acc": 0.3, "eval_mlm_mask_acc": 0.04, "eval_mlm_mask_baseline": 0.044}
    classroom = {"objective": "mlm+nsp", "preset": "tiny", "seq_len": R["seq_len"], "phase2_seq_len": R["phase2_seq_len"]}
    _stopped(root, "first-bert", "cancelled", "cancelled by SIGTERM at step 80; continue with --resume", classroom, [plateau])
    at = page_app(PAGE, root)
    assert not at.exception and not at.error
    texts = [i.value for i in at.info]
    assert any(t.startswith("Cancelled at step 80") and "the Resume button" in t and "step-80" in t for t in texts)
    assert not any("--resume" in t or "SIGTERM" in t for t in texts + [m.value for m in at.markdown])
    assert "--resume" not in " ".join(at.dataframe[0].value["error"])
    hint = [t for t in texts if t.startswith("No context learned yet")]
    assert len(hint) == 1 and "form's defaults" not in hint[0]  # it is the classroom run already: no advice to use it
    # the same plateau on 128-token sequences without a second phase: the advice applies
    _stopped(root, "long-only", "cancelled", None, dict(classroom, seq_len=128, phase2_seq_len=None), [plateau])
    at.run()
    at.selectbox(key="pretrain_run").set_value("long-only").run()
    assert any("the classroom run, the form's defaults" in i.value for i in at.info)


def test_the_form_logic_names_and_checks_the_run(tmp_path):
    from engine.errors import EngineError
    from studio import pretrain_form as F
    form = {"objective": "mlm+nsp", "size_mode": "preset", "preset": "tiny", "layers": 2, "hidden": 128, "init": None}
    assert F.default_name(form) == "bert-tiny-mlm_nsp"
    assert F.default_name(dict(form, size_mode="custom L/H/A", layers=4, hidden=256)) == "bert-L4H256-mlm_nsp"
    assert F.default_name(dict(form, init="minilm")) == "minilm-continued-mlm_nsp"
    assert F.default_name(dict(form, init="/x/runs/mine")) == "mine-continued-mlm_nsp"
    with pytest.raises(EngineError, match="give the corpus path"):
        F.corpus_of({"corpus_kind": F.PATH, "corpus_path": " "}, tmp_path)
    with pytest.raises(EngineError, match="upload a .txt"):
        F.corpus_of({"corpus_kind": F.UPLOAD, "upload_bytes": None}, tmp_path)
    assert F.corpus_of({"corpus_kind": "wiki"}, tmp_path) == "wiki"
    saved = F.corpus_of({"corpus_kind": F.UPLOAD, "upload_name": "c.txt", "upload_bytes": b"one. two.\n\nthree."}, tmp_path)
    assert Path(saved).read_bytes() == b"one. two.\n\nthree." and Path(saved).is_relative_to(tmp_path)


def _queue(monkeypatch) -> list:
    from engine import jobs
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, name=None, run_dir=None, root=None: calls.append(argv) or {"id": f"j{len(calls)}", "status": "queued"})
    monkeypatch.setattr(jobs, "get", lambda job_id, root=None: {"id": job_id, "status": "queued"})
    return calls


def test_the_form_is_no_st_form_so_enter_in_a_box_launches_nothing(tmp_path, monkeypatch, page_app):
    """Inside an st.form, Enter in any text or number box submits the form, whose submit button was Launch: the boxes
    are plain widgets (no form), Launch an explicit click only, and committing a box (what Enter does) queues nothing."""
    calls = _queue(monkeypatch)
    at = page_app(PAGE, tmp_path / "runs")
    launch = [b for b in at.button if b.label == "Launch"][0]
    assert launch.form_id == "" and not launch.disabled
    assert all(w.form_id == "" for w in list(at.text_input) + list(at.number_input) + list(at.selectbox))
    [t for t in at.text_input if t.label == "Run name"][0].input("typed-then-enter").run()
    [n for n in at.number_input if n.label == "Steps"][0].set_value(30).run()
    [n for n in at.number_input if n.label == "Learning rate"][0].set_value(2e-3).run()
    assert not at.exception and not at.error and calls == [] and not at.success


@pytest.mark.parametrize("label, value, line", [
    ("Steps", 999_999_999_999, "'Steps' 999,999,999,999 is above 10,000,000, the most this form takes; lower it"),
    ("Batch size", 0, "'Batch size' 0 is below 1, the least this form takes; raise it"),
    ("Checkpoint every (steps)", -5, "'Checkpoint every (steps)' -5 is below 0, the least this form takes; raise it")])
def test_a_value_out_of_range_is_one_line_beside_a_disabled_launch(tmp_path, monkeypatch, page_app, label, value, line):
    """The boxes take any number (a browser refuses one beyond a box's own bounds with a small red mark and sends
    nothing): the form's check says what is wrong beside Launch, which stays disabled until it is fixed."""
    calls = _queue(monkeypatch)
    at = page_app(PAGE, tmp_path / "runs")
    [n for n in at.number_input if n.label == label][0].set_value(value).run()
    assert not at.exception and [e.value for e in at.error] == [line]
    assert [b for b in at.button if b.label == "Launch"][0].disabled and calls == []
    [n for n in at.number_input if n.label == label][0].set_value(30).run()
    assert not at.error and not [b for b in at.button if b.label == "Launch"][0].disabled


def test_typing_a_corpus_path_picks_the_path_choice_and_trains_on_it(tmp_path, monkeypatch, page_app):
    """A path typed while the Corpus choice is still a built-in corpus switches the choice to the path (it was
    ignored and the run trained on BBC); a path that does not exist is one line and Launch waits."""
    from studio.pretrain_form import PATH
    calls = _queue(monkeypatch)
    corpus = _corpus(tmp_path / "mine.txt")
    at = page_app(PAGE, tmp_path / "runs")
    box = [s for s in at.selectbox if s.label == "Corpus"][0]
    assert box.value == engine.PretrainConfig.corpus == "bbc"
    [t for t in at.text_input if t.label == "Corpus path"][0].input(str(tmp_path / "missing.txt")).run()
    assert [s for s in at.selectbox if s.label == "Corpus"][0].value == PATH
    assert any("'Corpus path'" in e.value and "does not exist" in e.value for e in at.error)
    assert [b for b in at.button if b.label == "Launch"][0].disabled
    [t for t in at.text_input if t.label == "Corpus path"][0].input(str(corpus)).run()
    assert not at.error
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and len(calls) == 1
    assert calls[0][calls[0].index("--corpus") + 1] == str(corpus)


def test_launch_confirms_with_the_job_id_and_a_link_to_the_jobs_page(tmp_path, monkeypatch, routed_app):
    """Through the router (as served): Launch says which job it queued and links to the Jobs page, which follows it;
    the line stays on the page's next reruns (the run being followed reruns it)."""
    calls = _queue(monkeypatch)
    at = routed_app(PAGE, tmp_path / "runs")
    [t for t in at.text_input if t.label == "Run name"][0].input("linked").run()
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception and len(calls) == 1
    for _ in range(2):
        assert any("Launched **linked** (job j1 queued)" in s.value for s in at.success)
        links = at.get("page_link")
        assert [(l.proto.label, l.proto.page) for l in links] == [("Follow job j1 live on the Jobs page", "Jobs")]
        at.run()


def test_the_familys_masking_choices_launch_their_flags(tmp_path, monkeypatch, page_app):
    """The objective choice lists ALBERT's mlm+sop (from the objectives table), and the span and static masking boxes
    launch --span-mask and --static-masking; both schemes with whole words is one line beside a disabled Launch."""
    from engine import jobs
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, **k: calls.append(argv) or {"id": "j1", "status": "queued"})
    at = page_app(PAGE, tmp_path / "runs")
    objective = [b for b in at.selectbox if "bjective" in b.label][0]
    assert "mlm+sop" in objective.options or any("SOP" in o for o in objective.options)
    box = lambda label: [c for c in at.checkbox if c.label.startswith(label)][0]  # noqa: E731
    launch = lambda: [b for b in at.button if b.label == "Launch"][0]  # noqa: E731
    box("Span masking").check()
    box("Whole-word masking").check().run()
    assert any("two masking schemes" in e.value and "'Span masking (SpanBERT)'" in e.value for e in at.error)
    assert launch().disabled and calls == []
    box("Whole-word masking").uncheck()
    box("Static masks").check()
    [t for t in at.text_input if t.label == "Run name"][0].input("spans").run()
    assert not at.error, [e.value for e in at.error]
    launch().click().run()
    assert calls and "--span-mask" in calls[0] and "--static-masking" in calls[0]


def test_the_input_format_choice_lists_robertas_formats_and_launches_its_flag(tmp_path, monkeypatch, page_app):
    """The Input format box lists the formats of engine/pretraining/input_formats.py by RoBERTa's names; a pair format
    with an objective without a pair task (or the reverse) is one line naming the box beside a disabled Launch; a
    matching pair launches --input-format."""
    from engine import jobs
    from engine.objectives import OBJECTIVES
    from engine.pretraining.input_formats import FULL_SENTENCES, INPUT_FORMATS
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, **k: calls.append(argv) or {"id": "j1", "status": "queued"})
    at = page_app(PAGE, tmp_path / "runs")
    box = [b for b in at.selectbox if b.label.startswith("Input format")][0]
    assert len(box.options) == len(INPUT_FORMATS) and all(any(f.label in o for o in box.options) for f in INPUT_FORMATS.values())
    launch = lambda: [b for b in at.button if b.label == "Launch"][0]  # noqa: E731
    box.select_index(list(INPUT_FORMATS).index(FULL_SENTENCES.name)).run()  # the classroom's objective has NSP
    assert any("'Input format (RoBERTa)' full-sentences makes single rows" in e.value for e in at.error)
    assert launch().disabled and calls == []
    single = [n for n, o in OBJECTIVES.items() if not o.pairs and not o.causal][0]
    [b for b in at.selectbox if b.label == "Objective"][0].select_index(list(OBJECTIVES).index(single)).run()
    [t for t in at.text_input if t.label == "Run name"][0].input("full").run()
    assert not at.error, [e.value for e in at.error]
    launch().click().run()
    assert calls and calls[0][calls[0].index("--input-format") + 1] == FULL_SENTENCES.name


def test_electras_generator_size_and_spanberts_boundary_objective_are_boxes_that_launch_their_flags(tmp_path, monkeypatch,
                                                                                                    page_app):
    """The Generator size box is off until the objective is ELECTRA's, then launches --generator-size; the span boundary
    box is off until span masking is on, then launches --span-boundary."""
    from engine import jobs
    from engine.objectives import OBJECTIVES
    calls = []
    monkeypatch.setattr(jobs, "submit", lambda argv, **k: calls.append(argv) or {"id": "j1", "status": "queued"})
    at = page_app(PAGE, tmp_path / "runs")
    generator = lambda: [n for n in at.number_input if n.label.startswith("Generator size")][0]  # noqa: E731
    boundary = lambda: [c for c in at.checkbox if c.label.startswith("Span boundary")][0]  # noqa: E731
    launch = lambda: [b for b in at.button if b.label == "Launch"][0]  # noqa: E731
    assert generator().disabled and boundary().disabled
    rtd = next(n for n, o in OBJECTIVES.items() if o.rtd)
    [b for b in at.selectbox if b.label == "Objective"][0].select_index(list(OBJECTIVES).index(rtd)).run()
    assert not generator().disabled
    generator().set_value(0.5).run()
    [t for t in at.text_input if t.label == "Run name"][0].input("electra").run()
    assert not at.error, [e.value for e in at.error]
    launch().click().run()
    assert calls and calls[-1][calls[-1].index("--generator-size") + 1] == "0.5"
    at = page_app(PAGE, tmp_path / "runs2")
    single = [n for n, o in OBJECTIVES.items() if not o.pairs and not o.causal and not o.rtd][0]
    [b for b in at.selectbox if b.label == "Objective"][0].select_index(list(OBJECTIVES).index(single)).run()
    [c for c in at.checkbox if c.label.startswith("Span masking")][0].check().run()
    assert not boundary().disabled
    boundary().check().run()
    [t for t in at.text_input if t.label == "Run name"][0].input("sbo").run()
    assert not at.error, [e.value for e in at.error]
    launch().click().run()
    assert "--span-boundary" in calls[-1] and "--span-mask" in calls[-1]
