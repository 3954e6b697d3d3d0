"""Shared fixtures: offline settings, the ../shared/data folder, a tiny checkpoint with MLM+NSP heads, a tiny
pre-training run with three checkpoints (`tiny_run`, its last checkpoint `ck`), a page run through AppTest
(`page_app`), writers of fake run records for the study tests (`fake_runs`), readers of the plotly figures a page
drew (`plotly`) and the studio in a headless Chromium (`studio_browser`). At session start, a package requirements.txt
pins that is not installed stops the suite with one line (`pinned`). The repository root is on sys.path through
pytest.ini's `pythonpath = .`."""
import base64
import json
import math
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


# --------------------------------------------------------------------------- the pinned packages, checked once
# A package requirements.txt pins is part of the product (the BBC corpus, MiniLM's weights, the browser driver):
# when one is missing the install is broken, and the suite stops with one line instead of skipping what needs it.
# ../shared/data and the system Chromium are not pinned packages: tests that need them skip on a developer's machine
# (shared_data, studio_browser) and fail under CI=true, where .ci/run installs Chromium and ../shared is beside the clone.
def missing_pinned(requirements: Path) -> list:
    """The distributions `requirements` pins (one `name==version` a line, # comments) not installed here."""
    from importlib import metadata
    missing = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        name = spec.split("==")[0].split(">=")[0].split("[")[0].strip()
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def check_pinned_installed(requirements: Path) -> None:
    """Stop the whole session, with one line, when a pinned package is missing."""
    missing = missing_pinned(requirements)
    if missing:
        pytest.exit(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: run python3 -m pip "
                    f"install -r requirements.txt", returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_sessionstart(session):
    check_pinned_installed(REPO / "requirements.txt")


@pytest.fixture(scope="session")
def pinned():
    """pinned.missing(requirements_path) and pinned.check(requirements_path): the session-start check's own steps."""
    return SimpleNamespace(missing=missing_pinned, check=check_pinned_installed)


def skip_or_fail(reason: str):
    """Skip a test whose outside resource is missing on a developer's machine; under CI=true, where .ci/run provides
    it, its absence is a broken CI and fails the test instead of passing it by skipping."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: .ci/run must provide it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def missing_resource():
    """The rule shared_data and studio_browser follow when their resource is absent (skip_or_fail)."""
    return skip_or_fail


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        skip_or_fail(f"../shared/data is absent ({SHARED_DATA}); the shared benchmark files are needed for this test")
    return SHARED_DATA


@pytest.fixture(scope="session")
def bbc_docs():
    import engine
    return engine.load_corpus("bbc")


@pytest.fixture(scope="session")
def bbc_tokenizer(bbc_docs):
    import engine
    return engine.train_tokenizer(bbc_docs[::4], vocab_size=3000, lowercase=True)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, bbc_docs, bbc_tokenizer) -> Path:
    """A tiny BERT (2 layers, hidden 64) with MLM and NSP heads and its vocab, in the Hugging Face layout.
    Random weights: for tests of plumbing and shapes; tests that need a model that has learned train their own."""
    import engine
    g = torch.manual_seed(1234)
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, hidden_size=64, num_heads=2, max_position_embeddings=128)
    model = engine.BertForPreTraining(cfg)
    out = tmp_path_factory.mktemp("tiny") / "checkpoint"
    engine.save(model, out, tokenizer=bbc_tokenizer)
    return out


# --------------------------------------------------------------------------- a tiny pre-training run
# A run folder with three complete checkpoints (steps 3, 6, 12) of a tiny BERT (2 layers, hidden 64, 2 heads,
# 64 positions) trained for a few MLM+NSP steps on BBC sentences, so checkpoints differ and predictions are not
# uniform. Built once per pytest session, for the probe / page / browser / example tests.
TINY_RUN_STEPS = (3, 6, 12)
TINY_RUN_MAX_POS = 64


def _batches(docs, tok, rng: random.Random, batch_size=8, max_len=TINY_RUN_MAX_POS):
    docs = [d for d in docs if len(d) >= 2]
    while True:
        pairs, labels = [], []
        for _ in range(batch_size):
            d = rng.choice(docs)
            i = rng.randrange(len(d) - 1)
            if rng.random() < 0.5:
                pairs.append((d[i], d[i + 1]))
                labels.append(0)  # IsNext
            else:
                pairs.append((d[i], rng.choice(rng.choice(docs))))
                labels.append(1)  # NotNext
        encs = tok.encode_batch(pairs, max_length=max_len)
        T = max(len(e.ids) for e in encs)
        ids = torch.full((len(encs), T), tok.pad_id, dtype=torch.long)
        tt = torch.zeros((len(encs), T), dtype=torch.long)
        am = torch.zeros((len(encs), T), dtype=torch.long)
        special = torch.ones((len(encs), T), dtype=torch.bool)
        for r, e in enumerate(encs):
            n = len(e.ids)
            ids[r, :n] = torch.tensor(e.ids)
            tt[r, :n] = torch.tensor(e.type_ids)
            am[r, :n] = 1
            special[r, :n] = torch.tensor(e.special_tokens_mask, dtype=torch.bool)
        yield ids, tt, am, special, torch.tensor(labels)


def _make_tiny_run(root, docs, tok, name="tiny-run", steps=TINY_RUN_STEPS, seed=0) -> Path:
    import engine
    from engine.runs import list_checkpoints, mark_complete, write_run_json

    run = Path(root) / name
    if len(list_checkpoints(run)) == len(steps):
        return run
    torch.manual_seed(seed)
    cfg = engine.BertConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_heads=2,
                                   max_position_embeddings=TINY_RUN_MAX_POS)
    model = engine.BertForPreTraining(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    data = _batches(list(docs), tok, random.Random(seed))
    write_run_json(run, kind="pretrain", status="running", config={"objective": "mlm+nsp", "preset": "tiny"})
    model.train()
    for step in range(1, max(steps) + 1):
        ids, tt, am, special, nsp_labels = next(data)
        sel = (torch.rand(ids.shape, generator=g) < 0.15) & ~special & (am == 1)  # (B, T)
        sel[0, 1] = True  # at least one position
        inputs = ids.masked_fill(sel, tok.mask_id)
        out = model(inputs, token_type_ids=tt, attention_mask=am, mlm_positions=sel)
        loss = F.cross_entropy(out.mlm_logits, ids[sel]) + F.cross_entropy(out.nsp_logits, nsp_labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in steps:
            model.eval()
            ck = engine.save(model, run / "checkpoints" / f"step-{step}", tokenizer=tok)
            mark_complete(ck, step=step)
            model.train()
    write_run_json(run, status="finished")
    return run


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, bbc_docs, bbc_tokenizer) -> Path:
    return _make_tiny_run(tmp_path_factory.getbasetemp() / "probe-runs", bbc_docs, bbc_tokenizer)


@pytest.fixture(scope="session")
def tiny_run_steps() -> tuple:
    """The steps of tiny_run's checkpoints."""
    return TINY_RUN_STEPS


@pytest.fixture(scope="session")
def tiny_run_max_pos() -> int:
    """tiny_run's max_position_embeddings."""
    return TINY_RUN_MAX_POS


@pytest.fixture(scope="session")
def ck(tiny_run, tiny_run_steps) -> str:
    """tiny_run's last checkpoint folder, as the text a page's model box takes."""
    return str(tiny_run / "checkpoints" / f"step-{tiny_run_steps[-1]}")


# --------------------------------------------------------------------------- a page through AppTest
@pytest.fixture(scope="session")
def page_app():
    """page_app(page, runs_root, **state): pages/<page> (e.g. "5_Probe.py") run once through streamlit's AppTest,
    with runs_root and each `state` item in its session state."""
    from streamlit.testing.v1 import AppTest

    def run(page: str, runs_root, **state):
        at = AppTest.from_file(str(REPO / "pages" / page), default_timeout=90)
        at.session_state["runs_root"] = str(runs_root)
        for k, v in state.items():
            at.session_state[k] = v
        return at.run()
    return run


@pytest.fixture(scope="session")
def routed_app():
    """routed_app(page, runs_root, **state): pages/<page> run through the router (streamlit_app.py, its st.navigation)
    in AppTest, so a link to another page (st.page_link) resolves as in the served studio."""
    from streamlit.testing.v1 import AppTest

    def run(page: str, runs_root, **state):
        at = AppTest.from_file(str(REPO / "streamlit_app.py"), default_timeout=90)
        at.session_state["runs_root"] = str(runs_root)
        for k, v in state.items():
            at.session_state[k] = v
        at.switch_page(f"pages/{page}")
        return at.run()
    return run


# --------------------------------------------------------------------------- fake run records for study tests
# Records shaped as engine.finetune / engine.features / engine.pretrain write them, so the study tests read
# results back without training anything.
def fake_eval(out: Path, metric: str, value: float, task_kind="classification", restarts: list = None):
    """An eval.json shaped as engine.finetune writes it (`restarts`: the scores of several restarts of one grid
    point, the best of them `value`'s place)."""
    out.mkdir(parents=True, exist_ok=True)
    values = restarts or [value]
    trials = []
    for r, v in enumerate(values):
        dev = {metric: v, "accuracy" if metric != "accuracy" else "f1": 0.123}
        trials.append({"trial": r, "lr": 1e-4, "batch_size": 32, "epochs": 2, "restart": r, "seed": r, "best_epoch": 2,
                       "score": v, "dev": dev, "epochs_log": [{"epoch": 1, "score": v / 2, **dev}], "seconds": 1.0})
    trial = max(trials, key=lambda t: t["score"])
    value, dev = trial["score"], trial["dev"]
    data = {"kind": "finetune", "status": "finished", "task_kind": task_kind, "metric": metric, "score": value,
            "dev": dev, "best": {k: v for k, v in trial.items() if k != "epochs_log"}, "trials": trials, "grid": []}
    (out / "eval.json").write_text(json.dumps(data))
    (out / "run.json").write_text(json.dumps({"kind": "finetune", "status": "finished"}))


def fake_features(out: Path, metric: str, scores: dict, per_example: dict = None):
    """An eval.json shaped as engine.features writes it: one result per combination (`per_example`: combination ->
    its per-example values, as a real run keeps them)."""
    out.mkdir(parents=True, exist_ok=True)
    per_example = per_example or {}
    results = [{"combine": c, "metric": metric, "score": v,
                "dev": {metric: v, "precision": 0.5, **({"per_example": per_example[c]} if c in per_example else {})}}
               for c, v in scores.items()]
    best = max(results, key=lambda r: r["score"])
    (out / "eval.json").write_text(json.dumps({"kind": "features", "status": "finished", "metric": metric, "results": results,
                                               "combine": best["combine"], "score": best["score"], "dev": best["dev"]}))
    (out / "run.json").write_text(json.dumps({"kind": "features", "status": "finished"}))


def fake_pretrain(out: Path, final_loss: float, objective="mlm+nsp"):
    out.mkdir(parents=True, exist_ok=True)
    tok = "lm" if objective == "ltr" else "mlm"
    lines = []
    for step in (10, 20):
        lines.append({"step": step, "split": "train", "loss": final_loss + 1 + (20 - step) / 10, f"{tok}_loss": final_loss + 0.5, f"{tok}_acc": 0.1,
                      "tokens": step * 2048, "elapsed": step * (2.5 if objective == "ltr" else 1.0)})
    lines.append({"step": 20, "split": "eval", f"eval_{tok}_loss": final_loss, f"eval_{tok}_acc": 0.2,
                  f"eval_{tok}_ppl": math.exp(final_loss), "eval_instances": 512,
                  **({} if objective == "ltr" else {"eval_mlm_mask_acc": 0.05, "eval_mlm_mask_baseline": 0.045})})
    (out / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    (out / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished"}))


TABLE5 = {  # variant -> (bbc acc, wnut f1): BERT >= No NSP > LTR, BiLSTM below No NSP
    "BERT (MLM + NSP)": (0.90, 0.30), "No NSP": (0.88, 0.28), "LTR & No NSP": (0.70, 0.10), "+ BiLSTM": (0.72, 0.15)}


def fill_table5(d, jobs, table=TABLE5, noise=0.01):
    """Finished fake runs for every job of a pretraining-tasks study, scored by `table`, plus `noise` x seed."""
    from engine.ablations import BBC
    bbc = BBC.name
    for j in jobs:
        if j.kind == "pretrain":
            fake_pretrain(d / j.out, 5.0 - j.seed, "ltr" if "LTR" in j.variant else "mlm+nsp")
        else:
            on_bbc = j.evaluation == bbc
            val = table[j.variant][0 if on_bbc else 1] + noise * j.seed
            fake_eval(d / j.out, "accuracy" if on_bbc else "f1", val, "classification" if on_bbc else "tagging")


@pytest.fixture(scope="session")
def fake_runs():
    """fake_runs.eval / .features / .pretrain write one fake run; .fill_table5 fills a pretraining-tasks study."""
    return SimpleNamespace(eval=fake_eval, features=fake_features, pretrain=fake_pretrain, fill_table5=fill_table5,
                           TABLE5=TABLE5)


# --------------------------------------------------------------------------- plotly figures drawn by a page
def _plotly_array(x):
    """A plotly JSON array: a list, or a typed array {"dtype", "bdata", "shape"} (plotly 6+)."""
    if isinstance(x, dict) and "bdata" in x:
        a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"]))
        shape = x.get("shape")
        if isinstance(shape, str):
            shape = [int(s) for s in shape.split(",")]
        return a.reshape(shape) if shape else a
    return np.array(x, dtype=float)


def _plotly_charts(at) -> dict:
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def _plotly_titled(at, prefix) -> list:
    return [c for c in _plotly_charts(at).values() if c["layout"].get("title", {}).get("text", "").startswith(prefix)]


@pytest.fixture(scope="session")
def plotly():
    """plotly.charts(at): {id: figure JSON} of an AppTest run; plotly.titled(at, prefix): the figures whose title
    starts with prefix; plotly.array(x): a plotly JSON array as numpy."""
    return SimpleNamespace(charts=_plotly_charts, titled=_plotly_titled, array=_plotly_array)


@pytest.fixture(scope="session")
def engine_cli():
    """`python -m engine ARGS` in-process (the same entry point): engine_cli(args) -> (exit code, stdout, stderr)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout
    from engine.__main__ import run

    def call(args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = run([str(a) for a in args])
        return code, out.getvalue(), err.getvalue()
    return call


@pytest.fixture(scope="session")
def one_line_error():
    """one_line_error(code, err, pattern): the command exited 2 with one `error: ...` line (no traceback) that
    mentions `pattern`."""
    def check(code, err, pattern):
        assert code == 2, err
        lines = [l for l in err.strip().splitlines() if l.strip()]
        assert lines and lines[-1].startswith("error: "), err
        assert "Traceback" not in err, err
        assert pattern.lower() in lines[-1].lower(), lines[-1]
    return check


_FAKE_ENGINE_MAIN = "import sys\n_cmd, _code, *_args = sys.argv[1:]\nsys.argv = ['-c', *_args]\nexec(compile(_code, '<job>', 'exec'))\n"


@pytest.fixture
def fake_engine(tmp_path):
    """A stand-in for `python -m engine` in the job queue's tests, so they run tiny programs (sleep, print, fail,
    ignore SIGTERM) through the real queue, runners and watchers: `.repo`, a folder holding a package `engine` whose
    `__main__` runs the job's second argument as Python code; `.py(CODE, *args)`, that job's argv
    (`["bench", CODE, *args]`: an engine command first, as the queue demands; it runs like `python -c CODE *args`).
    The queue reaches it only through `Jobs(repo_root=fake_engine.repo)`, an in-process setting handed to the runners
    on their command line: nothing in the queue file can name it."""
    repo = tmp_path / "fake-engine-repo"
    (repo / "engine").mkdir(parents=True, exist_ok=True)
    (repo / "engine" / "__init__.py").write_text("")
    (repo / "engine" / "__main__.py").write_text(_FAKE_ENGINE_MAIN)
    return SimpleNamespace(repo=repo, py=lambda code, *args: ["bench", code, *map(str, args)])


# ---------------------------------------------------------------------------------------------- the studio in a browser
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


class StudioInBrowser:
    """The studio started as the README starts it, and one headless Chromium page on it with every request outside
    localhost aborted (`blocked` lists them)."""

    def __init__(self, runs_root: Path, log_path: Path):
        import socket
        import subprocess
        import sys
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.blocked = []
        env = dict(os.environ, BERT_STUDIO_RUNS=str(runs_root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port",
                                      str(port), "--server.headless", "true"], cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        import time
        import urllib.request
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with code {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"streamlit did not answer at {self.url} within {timeout:.0f}s")

    def open_page(self, browser):
        from urllib.parse import urlparse
        page = browser.new_page(viewport={"width": 1400, "height": 1000})

        def route(r):
            host = urlparse(r.request.url).hostname or ""
            if r.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
                r.continue_()
            else:
                self.blocked.append(r.request.url)
                r.abort()
        page.route("**/*", route)
        page.set_default_timeout(30_000)
        return page

    def stop(self) -> None:
        import signal
        import subprocess
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self._log.close()


@pytest.fixture
def studio_browser(tmp_path):
    """(start(runs_root) -> StudioInBrowser, a launched Chromium): skips without the system Chromium (not a pinned
    package)."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        skip_or_fail(f"Chromium is not installed at {CHROMIUM}; install it with `apt-get install -y chromium` (.ci/run does)")
    from playwright.sync_api import sync_playwright  # pinned: checked at session start
    artifacts = REPO / "test-artifacts" / "browser"
    artifacts.mkdir(parents=True, exist_ok=True)
    started = []

    def start(runs_root: Path) -> StudioInBrowser:
        s = StudioInBrowser(runs_root, artifacts / f"streamlit-{len(started)}.log")
        started.append(s)
        s.wait_healthy()
        return s

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            yield start, browser
        finally:
            browser.close()
            for s in started:
                s.stop()


# --------------------------------------------------------------------------- torchrun on a port of its own
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(stderr: str) -> bool:
    return "EADDRINUSE" in stderr or "address already in use" in stderr.lower()


class Torchrun:
    """`torchrun.command(nproc, *engine_args)`: `python -m torch.distributed.run` on one node with its rendezvous on a
    free local port picked for this call; `torchrun.run(nproc, args, **subprocess_kw)` runs it and, when another
    process took the port between the pick and the bind, tries again on a new one (three tries), so a port race
    never turns the test into a skip."""

    tries = 3

    def command(self, nproc: int, *args) -> list:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "engine", *map(str, args)]

    def run(self, nproc: int, args, **kw):
        for _ in range(self.tries):
            p = subprocess.run(self.command(nproc, *args), capture_output=True, text=True, **kw)
            if p.returncode == 0 or not _port_taken(p.stderr):
                return p
        return p

    def port_taken(self, stderr: str) -> bool:
        return _port_taken(stderr)

    def free_port(self) -> int:
        return free_port()


@pytest.fixture(scope="session")
def torchrun() -> Torchrun:
    return Torchrun()


# --------------------------------------------------------------------------- tiny encoders other than BERT, offline
# Each architecture engine.encoders reads, as a random tiny transformers model with a tokenizer trained here on a few
# sentences (no download): WordPiece, byte-level BPE (Ġ marks a word start) or Unigram with ▁, with the checkpoint's
# own special tokens (RoBERTa's <s>, </s>, <mask>), saved with save_pretrained.
ENCODER_TEXTS = ["the cat sat on the mat .", "the dog ran to the store .", "paris is the capital of france .",
                 "he bought milk and bread at the market .", "she read a big red book .", "the man went to the store .",
                 "the government said it would cut taxes .", "a prime minister spoke on monday ."]
ENCODER_SPECIALS = {"bert": dict(cls="[CLS]", sep="[SEP]", mask="[MASK]", pad="[PAD]", unk="[UNK]"),
                    "roberta": dict(cls="<s>", sep="</s>", mask="<mask>", pad="<pad>", unk="<unk>"),
                    "albert": dict(cls="[CLS]", sep="[SEP]", mask="[MASK]", pad="<pad>", unk="<unk>")}
TINY_ENCODERS = {"roberta": ("bytelevel", "roberta"), "xlm-roberta": ("metaspace", "roberta"),  # model_type -> pieces,
                 "distilbert": ("wordpiece", "bert"), "albert": ("metaspace", "albert"),  # special tokens
                 "electra": ("wordpiece", "bert"), "deberta-v2": ("metaspace", "albert"), "modernbert": ("bytelevel", "bert")}


def _encoder_tokenizer(style: str, specials: dict):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    order = [specials[k] for k in ("cls", "pad", "sep", "unk", "mask")]
    if style == "wordpiece":
        t = Tokenizer(models.WordPiece(unk_token=specials["unk"]))
        t.normalizer, t.pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
        t.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=200, special_tokens=order, show_progress=False)
    elif style == "bytelevel":
        t = Tokenizer(models.BPE())
        t.pre_tokenizer, t.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=order, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        t = Tokenizer(models.Unigram())
        t.normalizer, t.pre_tokenizer, t.decoder = normalizers.Lowercase(), pre_tokenizers.Metaspace(), decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=150, special_tokens=order, unk_token=specials["unk"], show_progress=False)
    t.train_from_iterator(ENCODER_TEXTS * 4, trainer)
    t.add_special_tokens([AddedToken(specials["mask"], lstrip=True, special=True)])  # " <mask>" takes its space
    ids = {k: t.token_to_id(v) for k, v in specials.items()}
    cls, sep = specials["cls"], specials["sep"]
    if cls == "<s>":
        t.post_processor = processors.RobertaProcessing((sep, ids["sep"]), (cls, ids["cls"]), add_prefix_space=False)
    else:
        t.post_processor = processors.TemplateProcessing(single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
                                                         special_tokens=[(cls, ids["cls"]), (sep, ids["sep"])])
    return PreTrainedTokenizerFast(tokenizer_object=t, model_max_length=64, bos_token=cls, eos_token=sep,
                                   **{f"{k}_token": v for k, v in specials.items()})


def _encoder_config(kind: str, vocab: int, tok, **extra):
    import transformers
    ids = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    size = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                max_position_embeddings=66, initializer_range=0.3, **ids, **extra)
    if kind == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=2, hidden_dim=37, initializer_range=0.3,
                                             max_position_embeddings=64, pad_token_id=tok.pad_token_id, **extra)
    cls, more = {"roberta": (transformers.RobertaConfig, dict(type_vocab_size=1)),
                 "xlm-roberta": (transformers.XLMRobertaConfig, dict(type_vocab_size=1)),
                 "albert": (transformers.AlbertConfig, dict(embedding_size=16)),
                 "electra": (transformers.ElectraConfig, dict(embedding_size=16)),
                 "deberta-v2": (transformers.DebertaV2Config, dict(relative_attention=True, position_buckets=16, type_vocab_size=0,
                                                                   pos_att_type=["p2c", "c2p"], position_biased_input=False)),
                 "modernbert": (transformers.ModernBertConfig, dict(global_attn_every_n_layers=1, local_attention=16,
                                                                   cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id))}[kind]
    return cls(**size, **more)


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """tiny_encoder(kind, head=True, model_class=None, **config) -> the folder of a tiny random `kind` (a key of
    TINY_ENCODERS: roberta, xlm-roberta, distilbert, albert, electra, deberta-v2, modernbert), saved as its
    AutoModelForMaskedLM (head=True), its AutoModel (head=False) or `model_class` (a transformers class name), with its
    tokenizer; DeBERTa and ModernBERT with three embedding rows beyond the tokenizer's (as DeBERTa-v3's and ModernBERT's
    own). Made once per session and arguments."""
    import transformers
    made = {}

    def make(kind: str, head: bool = True, model_class: str = None, **config) -> Path:
        key = (kind, head, model_class, tuple(sorted(config.items())))
        if key not in made:
            style, specials = TINY_ENCODERS[kind]
            tok = _encoder_tokenizer(style, ENCODER_SPECIALS[specials])
            extra_rows = 3 if kind in ("deberta-v2", "modernbert") else 0
            cfg = _encoder_config(kind, len(tok) + extra_rows, tok, **config)
            torch.manual_seed(0)
            cls = (getattr(transformers, model_class) if model_class else
                   transformers.AutoModelForMaskedLM if head else transformers.AutoModel)
            model = cls.from_config(cfg) if model_class is None else cls(cfg)
            out = tmp_path_factory.mktemp(f"tiny-{kind}")
            model.eval().save_pretrained(out)
            tok.save_pretrained(out)
            made[key] = out
        return made[key]
    return make


@pytest.fixture
def offline_hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache that both the environment and huggingface_hub (which reads it once) point to;
    offline."""
    import huggingface_hub.constants
    c = tmp_path / "hf-home" / "hub"
    c.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(c.parent))
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(c))
    return c
