"""The README's pictures, made from the real studio in headless Chromium.

    python examples/screenshots.py --out docs/images              # about 6 minutes on a 2-core CPU
    python examples/screenshots.py --out docs/images --trackers   # also TensorBoard and MLflow: about 6 minutes

(5 min 53 s with --trackers on a 2-core CPU; two or three times that while other work shares the cores.)

It makes a temporary runs folder with real tiny runs: a pre-training run of a tiny BERT on 150 BBC articles (150
steps, a checkpoint every 50, held-out metrics every 25; under a minute), and a finished tiny Table 5 study (the
paper's four rows, two seeds, one small fine-tune each on BBC topic; about 5 minutes). Then it starts the studio as
README.md does (`streamlit run streamlit_app.py`, on a free port of 127.0.0.1), opens the Start, Pre-train,
Attention (MiniLM, the default model) and Ablations pages in headless Chromium with every request outside
127.0.0.1 aborted, waits for each page to settle, and saves one picture per page:

    start.png       the Start page (the guided class)
    pretrain.png    the Pre-train page: the tiny run's numbers and curves
    attention.png   the Attention page: MiniLM's attention, one head as a heatmap
    ablations.png   the Ablations page: the tiny study's table and its verdicts

With --trackers the runs are written with `--report-to tensorboard,mlflow` (pip install -r
requirements-trackers.txt), and it also serves `tensorboard --logdir <runs>` and `mlflow ui --backend-store-uri
sqlite:///<runs>/mlflow.db` on 127.0.0.1 and saves

    tensorboard-scalars.png   TensorBoard's time series: every run's losses
    tensorboard-hparams.png   TensorBoard's HParams table: the study's runs side by side
    mlflow-runs.png           the MLflow UI listing the study's runs

The MLflow UI is in the full `mlflow` package (mlflow-skinny, which requirements-trackers.txt installs, has no UI),
of the same version as the client that wrote mlflow.db (a UI older than the database's schema refuses it). It may
live in a virtual environment of its own, used only to serve the UI; --mlflow-ui (or MLFLOW_UI) names its `mlflow`:

    python3 -m venv /tmp/mlui && /tmp/mlui/bin/pip install mlflow==3.17.2
    python examples/screenshots.py --out docs/images --trackers --mlflow-ui /tmp/mlui/bin/mlflow

Without an `mlflow` that serves the UI's pages (default: the one on PATH) that picture is skipped with one line. Every picture is a reduced-palette PNG under 200 KB (Pillow,
which streamlit installs). It needs Chromium at /usr/bin/chromium, and a colour emoji font for the pages' status
marks (apt-get install chromium fonts-noto-color-emoji). The numbers in the pictures are those of tiny runs trained
for seconds: they show what the pages look like, not what BERT learns (BENCHMARKS.md has the measured figures).
"""
import argparse
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
WIDTH = 1280  # the browser's width, in CSS pixels
MAX_BYTES = 200_000  # every picture stays under this (tests/repo/test_docs.py checks the committed ones)
STUDY_NAME = "table5-tiny"
PRETRAIN_NAME = "bert-tiny"


# ------------------------------------------------------------------------------------------------ the tiny runs
def write_small_corpus(path: Path, n_docs: int = 150) -> Path:
    """The first BBC articles as a plain-text corpus (blank lines between documents)."""
    import engine
    docs = engine.load_corpus("bbc")[:n_docs]
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


def pretrain_tiny_run(root: Path, corpus: Path, cache: Path, report_to: str = None) -> Path:
    """A real `python -m engine pretrain` of a tiny BERT: 150 steps, 3 checkpoints, held-out metrics every 25 steps."""
    out = root / PRETRAIN_NAME
    cmd = [sys.executable, "-m", "engine", "pretrain", "--corpus", str(corpus), "--out", str(out), "--steps", "150",
           "--batch-size", "16", "--vocab-size", "2000", "--seq-len", "32", "--phase2-seq-len", "0", "--lr", "2e-3",
           "--log-every", "5", "--eval-every", "25", "--save-every", "50", "--cache-dir", str(cache),
           "--num-threads", "2", "--quiet"]
    if report_to:
        cmd += ["--report-to", report_to]
    subprocess.run(cmd, cwd=REPO, env=studio_env(root), check=True, stdout=subprocess.DEVNULL)
    return out


def finish_tiny_study(root: Path, corpus: Path, cache: Path, report_to: str = None) -> Path:
    """A real Table 5 study run here job after job: its four rows at two seeds, each pre-training 100 steps of a
    2-layer BERT, each fine-tune 3 epochs on 600 BBC topic examples of 64 tokens."""
    from engine import ablations as A
    study = A.get_study("pretraining-tasks", scale="classroom", seeds=2, evaluations=(A.BBC,))
    base = replace(study.base, corpus=str(corpus), vocab_size=2000, layers=2, hidden=64, heads=2, max_positions=64,
                   seq_len=32, phase2_seq_len=None, batch_size=16, steps=100, save_every=50, eval_every=25,
                   log_every=5, num_threads=2, cache_dir=str(cache), report_to=report_to)
    finetune = replace(study.finetune, epochs=(3,), restarts=1, max_train=600, max_seq_len=64)
    study = replace(study, base=base, finetune=finetune, budget="steps")
    os.environ.update(studio_env(root))  # the study's jobs (and their trackers) find the runs folder here
    return A.launch(study, runs_root=root, name=STUDY_NAME, foreground=True, reuse=False, log=lambda *a: None)


# ------------------------------------------------------------------------------------------------ local servers
def studio_env(root: Path) -> dict:
    return dict(os.environ, BERT_STUDIO_RUNS=str(root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                TOKENIZERS_PARALLELISM="false")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cmd: list, root: Path, log: Path) -> subprocess.Popen:
    """A server process in a session of its own (stopped with its children by stop_server), its output in `log`."""
    with open(log, "w") as f:
        return subprocess.Popen(cmd, cwd=REPO, env=studio_env(root), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)


def start_studio(root: Path, port: int, log: Path) -> subprocess.Popen:
    """The studio as README.md starts it, on 127.0.0.1:port."""
    return start_server([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port),
                         "--server.headless", "true"], root, log)


def start_tensorboard(root: Path, port: int, log: Path) -> subprocess.Popen:
    return start_server([sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--host", "127.0.0.1",
                         "--port", str(port), "--reload_interval", "0"], root, log)


def start_mlflow_ui(mlflow: str, root: Path, port: int, log: Path) -> subprocess.Popen:
    """`mlflow ui` of the executable `mlflow` (the full package, perhaps in a virtual environment of its own)."""
    return start_server([mlflow, "ui", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
                         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], root, log)


def wait_until_answering(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"nothing answered at {url} within {timeout:.0f} s")


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


# ------------------------------------------------------------------------------------------------ the browser
def open_offline_page(browser, blocked: list, height: int):
    """A page `WIDTH` x `height` whose requests outside localhost are aborted (and listed in `blocked`)."""
    page = browser.new_page(viewport={"width": WIDTH, "height": height})

    def route(r):
        host = urlparse(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()
    page.route("**/*", route)
    page.set_default_timeout(90_000)
    return page


def wait_until_settled(page) -> None:
    """The script has run (Streamlit's running indicator gone), the charts are drawn, nothing moves any more."""
    page.locator("h1").first.wait_for()
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')")
    page.wait_for_timeout(1500)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')")


def top_of(locator) -> int:
    return int(locator.first.bounding_box()["y"])


def bottom_of(locator) -> int:
    box = locator.first.bounding_box()
    return int(box["y"] + box["height"])


def save_small(png: bytes, path: Path, box: tuple = None) -> Path:
    """The screenshot `png` cropped to `box` (left, top, right, bottom; CSS pixels), as a PNG of at most 256
    colours, made narrower until it is under MAX_BYTES."""
    from PIL import Image
    image = Image.open(io.BytesIO(png)).convert("RGB")
    if box:
        image = image.crop(box)
    for colours in (256, 128, 64):
        scaled = image
        while True:
            data = io.BytesIO()
            scaled.quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
                data, format="PNG", optimize=True)
            if data.tell() < MAX_BYTES or scaled.width < 700:
                break
            scaled = image.resize((int(scaled.width * 0.9), int(scaled.height * 0.9)), Image.Resampling.LANCZOS)
        if data.tell() < MAX_BYTES:
            path.write_bytes(data.getvalue())
            return path
    raise RuntimeError(f"{path.name} stays over {MAX_BYTES} bytes")


def main_left(page) -> int:
    """The left edge of the page's main column (right of the sidebar)."""
    return int(page.locator("[data-testid='stMain']").bounding_box()["x"])


def shoot_start_page(browser, url: str, out: Path, blocked: list) -> Path:
    """The Start page as it opens: the guided class, sidebar included."""
    page = open_offline_page(browser, blocked, height=860)
    page.goto(url)
    page.get_by_text("Your first class").first.wait_for()
    wait_until_settled(page)
    path = save_small(page.screenshot(), out / "start.png")
    page.close()
    return path


def shoot_pretrain_page(browser, url: str, out: Path, blocked: list) -> Path:
    """The Pre-train page's runs section: the tiny run's numbers and its curves."""
    page = open_offline_page(browser, blocked, height=3000)
    page.goto(f"{url}/Pretrain")
    page.locator(".js-plotly-plot").first.wait_for()
    wait_until_settled(page)
    runs = page.get_by_role("heading", name="Runs")
    top = top_of(runs) - 10
    bottom = min(top + 1150, bottom_of(page.locator(".js-plotly-plot").first) + 20)
    path = save_small(page.screenshot(), out / "pretrain.png", (main_left(page), top, WIDTH, bottom))
    page.close()
    return path


def shoot_attention_page(browser, url: str, out: Path, blocked: list) -> Path:
    """The Attention page on MiniLM (the default model): the sentences, the layers and heads, one head's heatmap."""
    page = open_offline_page(browser, blocked, height=2000)
    page.goto(f"{url}/Attention")
    page.locator(".js-plotly-plot").first.wait_for()
    wait_until_settled(page)
    top = top_of(page.locator("h1")) - 20
    bottom = bottom_of(page.locator(".js-plotly-plot").first) + 20
    path = save_small(page.screenshot(), out / "attention.png", (main_left(page), top, WIDTH, bottom))
    page.close()
    return path


def shoot_ablations_page(browser, url: str, out: Path, blocked: list) -> Path:
    """The Ablations page on the tiny study: its table beside the paper's finding and the verdicts, then Table 5 as
    we measured it at classroom scale with the verdicts of its findings (the page's charts below are left out)."""
    page = open_offline_page(browser, blocked, height=3000)
    page.goto(f"{url}/Ablations")
    page.get_by_text("Reproduced here?").first.wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    wait_until_settled(page)
    top = top_of(page.locator("h1")) - 20
    bottom = top_of(page.locator(".js-plotly-plot")) - 10
    path = save_small(page.screenshot(), out / "ablations.png", (main_left(page), top, WIDTH, bottom))
    page.close()
    return path


def shoot_tensorboard(browser, url: str, out: Path, blocked: list) -> list:
    """TensorBoard's time series of every run's losses (tags filtered to "loss"), and its HParams table: every run
    with its settings, the study's runs side by side."""
    page = open_offline_page(browser, blocked, height=900)
    page.goto(f"{url}/#timeseries")
    tags = page.locator("input[placeholder='Filter tags (regex)']")
    tags.fill("loss")
    tags.press("Escape")  # the suggestions list closed
    close = page.get_by_role("button", name="Close side pane")
    if close.count():  # the settings pane, open on a first visit
        close.first.click()
    page.get_by_text("eval/eval_mlm_loss").first.wait_for()
    page.wait_for_timeout(4000)  # the charts' lines are drawn
    scalars = save_small(page.screenshot(), out / "tensorboard-scalars.png")
    page.goto(f"{url}/#hparams")
    page.get_by_text("Trial ID").first.wait_for()
    page.wait_for_timeout(3000)
    hparams = save_small(page.screenshot(), out / "tensorboard-hparams.png")
    page.close()
    return [scalars, hparams]


def shoot_mlflow(browser, url: str, out: Path, blocked: list) -> Path:
    """The MLflow UI on the study's experiment: its runs listed with their variant, seed and metrics."""
    import json
    query = urllib.parse.urlencode({"experiment_name": STUDY_NAME})
    with urllib.request.urlopen(f"{url}/ajax-api/2.0/mlflow/experiments/get-by-name?{query}", timeout=30) as r:
        experiment = json.load(r)["experiment"]["experiment_id"]
    page = open_offline_page(browser, blocked, height=900)
    page.goto(f"{url}/#/experiments/{experiment}/runs")
    page.get_by_text("bert-mlm-nsp-s0").first.wait_for()  # the runs' names: the study's jobs
    page.wait_for_timeout(2000)
    close = page.get_by_role("button", name="Close")  # the Assistant's side pane
    if close.count():
        close.last.click()
    page.get_by_text("Columns").first.click()  # the fine-tunes' scores, in place of Dataset, Source, Models
    for column in ("Dataset", "Source", "Models", "dev_accuracy", "dev_f1_macro", "dev_mcc"):
        page.get_by_text(column, exact=True).last.click()
    page.keyboard.press("Escape")
    page.wait_for_timeout(3000)
    path = save_small(page.screenshot(), out / "mlflow-runs.png")
    page.close()
    return path


def find_mlflow_ui(given: str = None) -> str:
    """The `mlflow` executable that serves the UI: `given` (--mlflow-ui), else MLFLOW_UI, else `mlflow` on PATH;
    None when there is none."""
    name = given or os.environ.get("MLFLOW_UI") or "mlflow"
    return shutil.which(name)


def serve_mlflow_ui(mlflow: str, root: Path, work: Path, servers: list) -> str:
    """The MLflow UI on a free port of 127.0.0.1 (its process added to `servers`), its address; None, with the
    reason printed, when `mlflow` does not serve the UI's pages (mlflow-skinny, which has no UI)."""
    if mlflow is None:
        print("mlflow-runs.png skipped: no `mlflow` executable (the UI is in the full mlflow package: "
              "pip install mlflow==3.17.2, or name one with --mlflow-ui)", flush=True)
        return None
    port, log = free_port(), work / "mlflow.log"
    servers.append(start_mlflow_ui(mlflow, root, port, log))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(url + "/health", servers[-1])
        with urllib.request.urlopen(url + "/", timeout=30) as r:
            page = r.read(4096).decode("utf-8", "replace")
    except (OSError, RuntimeError) as e:  # TimeoutError is an OSError
        print(f"mlflow-runs.png skipped: {mlflow} ui did not answer ({e}); its output is in {log}", flush=True)
        return None
    if "<html" not in page.lower():
        print(f"mlflow-runs.png skipped: {mlflow} serves no UI pages (mlflow-skinny has none: pip install "
              "mlflow==3.17.2, perhaps in a virtual environment of its own, and name it with --mlflow-ui)", flush=True)
        return None
    return url


def trackers_installed() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(m) for m in ("tensorboard", "mlflow"))


# ------------------------------------------------------------------------------------------------ the command
def make_pictures(out: Path, trackers: bool, keep: Path = None, mlflow_ui: str = None) -> list:
    from playwright.sync_api import sync_playwright
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="studio-screenshots-")) if keep is None else keep
    root, cache = work / "runs", work / "cache"
    root.mkdir(parents=True, exist_ok=True)
    report_to = "tensorboard,mlflow" if trackers else None
    t0 = time.time()
    corpus = write_small_corpus(work / "corpus.txt")
    if not (root / PRETRAIN_NAME / "run.json").is_file():  # a kept folder's runs are used again
        pretrain_tiny_run(root, corpus, cache, report_to)
        print(f"pre-training run made ({time.time() - t0:.0f} s)", flush=True)
    if not (root / "studies" / STUDY_NAME).is_dir():
        finish_tiny_study(root, corpus, cache, report_to)
        print(f"study finished ({time.time() - t0:.0f} s)", flush=True)

    saved, blocked, servers = [], [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
            port = free_port()
            servers.append(start_studio(root, port, work / "streamlit.log"))
            url = f"http://127.0.0.1:{port}"
            wait_until_answering(url + "/_stcore/health", servers[-1])
            saved.append(shoot_start_page(browser, url, out, blocked))
            saved.append(shoot_pretrain_page(browser, url, out, blocked))
            saved.append(shoot_attention_page(browser, url, out, blocked))
            saved.append(shoot_ablations_page(browser, url, out, blocked))
            if trackers:
                port = free_port()
                servers.append(start_tensorboard(root, port, work / "tensorboard.log"))
                url = f"http://127.0.0.1:{port}"
                wait_until_answering(url, servers[-1])
                saved += shoot_tensorboard(browser, url, out, blocked)
                url = serve_mlflow_ui(find_mlflow_ui(mlflow_ui), root, work, servers)
                if url:
                    saved.append(shoot_mlflow(browser, url, out, blocked))
            browser.close()
    finally:
        for proc in servers:
            stop_server(proc)
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if blocked:
        print(f"requests outside localhost were blocked: {sorted(set(blocked))[:5]}", flush=True)
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="folder for the pictures (default docs/images)")
    ap.add_argument("--trackers", action="store_true", help="also TensorBoard's and MLflow's pictures (the runs are "
                    "written with --report-to tensorboard,mlflow; pip install -r requirements-trackers.txt)")
    ap.add_argument("--keep", type=Path, default=None, help="make the runs folder here and keep it, or use the "
                    "runs an earlier --keep made there (default: a temporary folder, removed at the end)")
    ap.add_argument("--mlflow-ui", default=None, metavar="PATH", help="the `mlflow` executable that serves the "
                    "MLflow UI (the full package, the version of the client that wrote mlflow.db; perhaps in a "
                    "virtual environment of its own; default: MLFLOW_UI, else `mlflow` on PATH)")
    a = ap.parse_args(argv)
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        print(f"error: Chromium is not installed at {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    if a.trackers and not trackers_installed():
        print("error: --trackers needs tensorboard and mlflow: pip install -r requirements-trackers.txt", file=sys.stderr)
        return 2
    for path in make_pictures(a.out, a.trackers, a.keep, a.mlflow_ui):
        print(f"{path}  {path.stat().st_size // 1000} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
