"""Reliability round 4, loading a model: a crafted config.json is checked against the weights' header (every tensor
it implies, with its shape) and the memory the model needs is checked against what the process may allocate, both
before the model is built (item 3); an unreachable Hub fails at once, a raw pickle `.bin` is one line with no torch
warning, and the studio refuses a foreign Host on HTTP as on its websocket (item 11).

Nothing here allocates more than a few tens of megabytes: the crafted configs would need terabytes, so the model's
constructor is replaced by a tripwire that fails the test if it is ever reached."""
import base64
import hashlib
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import engine
import engine.checkpoint as C
from engine.errors import EngineError
from tests.helpers import one_line

REPO = Path(__file__).resolve().parents[2]
# a subprocess's own address space now (Linux), for setting `ulimit -v` relative to it
VM_SIZE = "int(next(l for l in open('/proc/self/status') if l.startswith('VmSize:')).split()[1]) * 1024"


@pytest.fixture
def never_built(monkeypatch):
    """The model's constructor as a tripwire: a test that reaches it has allocated before refusing."""
    def tripwire(config):
        raise AssertionError(f"the model was built ({config.num_layers} layers, feed-forward {config.intermediate_size}) "
                             f"before the checkpoint was checked")
    monkeypatch.setattr(C, "BertForPreTraining", tripwire)


def _edit(src: Path, dst: Path, drop=lambda k: False, replace: dict = None, config: dict = None) -> Path:
    """A copy of checkpoint `src` with tensors dropped or replaced and config.json fields changed."""
    shutil.copytree(src, dst)
    sd = {k: v for k, v in load_file(str(dst / "model.safetensors")).items() if not drop(k)}
    sd.update(replace or {})
    save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(config or {})
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


HUGE = {"num_hidden_layers": 1000, "intermediate_size": 10_000_000}  # about 5 TB of fp32 parameters at hidden 64


def _put_in_hub_cache(cache: Path, repo_id: str, folder: Path) -> None:
    """`folder`'s files as huggingface_hub caches a download (blobs by content, snapshot symlinks)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for f in folder.iterdir():
        if f.is_file():
            data = f.read_bytes()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))


@pytest.fixture
def hub_cache(offline_hub_cache):
    return offline_hub_cache


# ------------------------------------------------------------------ 3. a crafted config cannot allocate without bound
@pytest.mark.parametrize("as_hub_id", [False, True], ids=["folder", "cached-hub-id"])
def test_config_promising_layers_the_weights_lack_is_refused_before_building(tmp_path, tiny_checkpoint, never_built,
                                                                            hub_cache, as_hub_id):
    d = _edit(tiny_checkpoint, tmp_path / "crafted", drop=lambda k: ".encoder.layer." in k, config=HUGE)
    if as_hub_id:
        _put_in_hub_cache(hub_cache, "org/crafted", d)
    with pytest.raises(EngineError) as e:
        engine.load("org/crafted" if as_hub_id else d)
    msg = one_line(e)
    assert "1000 layers" in msg and "weights have 0" in msg and "do not belong together" in msg


def test_every_tensor_the_config_implies_is_checked_not_only_layer_0(tmp_path, tiny_checkpoint, never_built):
    missing = _edit(tiny_checkpoint, tmp_path / "missing", drop=lambda k: k == "bert.encoder.layer.1.output.dense.weight")
    with pytest.raises(EngineError) as e:
        engine.load(missing)
    assert "bert.encoder.layer.1.output.dense.weight" in one_line(e) and "not a complete BERT checkpoint" in one_line(e)
    cfg = json.loads((tiny_checkpoint / "config.json").read_text())
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    shape = _edit(tiny_checkpoint, tmp_path / "shape",
                  replace={"bert.encoder.layer.1.intermediate.dense.weight": torch.zeros(I // 2, H),
                           "bert.encoder.layer.1.intermediate.dense.bias": torch.zeros(I // 2)})
    with pytest.raises(EngineError) as e:
        engine.load(shape)
    msg = one_line(e)
    assert "bert.encoder.layer.1.intermediate.dense" in msg and f"({I}, {H})" in msg and "do not belong together" in msg
    half_head = _edit(tiny_checkpoint, tmp_path / "half-head", drop=lambda k: k == "cls.predictions.transform.LayerNorm.bias")
    with pytest.raises(EngineError) as e:
        engine.load(half_head)
    assert "cls.predictions.transform.LayerNorm.bias" in one_line(e)


def test_legacy_bin_with_a_crafted_config_is_refused_before_building(tmp_path, tiny_checkpoint, never_built):
    d = _edit(tiny_checkpoint, tmp_path / "legacy", config=HUGE)
    sd = {k: v for k, v in load_file(str(d / "model.safetensors")).items() if ".encoder.layer." not in k}
    (d / "model.safetensors").unlink()
    torch.save(sd, d / "pytorch_model.bin")
    with pytest.raises(EngineError) as e:
        engine.load(d)
    assert "1000 layers" in one_line(e) and "weights have 0" in one_line(e)


def test_checkpoints_without_heads_or_with_their_own_names_still_load(tmp_path, tiny_checkpoint):
    b = engine.load("minilm")  # BertModel weights: no heads, no `bert.` prefix, an int64 position_ids buffer
    assert b.info["missing_heads"] == ["mlm", "nsp"] and b.config.num_layers == 6
    no_nsp = _edit(tiny_checkpoint, tmp_path / "no-nsp", drop=lambda k: k.startswith("cls.seq_relationship."))
    assert engine.load(no_nsp).info["missing_heads"] == ["nsp"]
    body_only = _edit(tiny_checkpoint, tmp_path / "body-only", drop=lambda k: k.startswith("cls."))
    sd = load_file(str(body_only / "model.safetensors"))
    save_file({k[len("bert."):]: v for k, v in sd.items()}, str(body_only / "model.safetensors"))  # no prefix
    assert engine.load(body_only).info["missing_heads"] == ["mlm", "nsp"]


def test_a_model_too_large_for_memory_is_refused_before_building(tiny_checkpoint, never_built, monkeypatch):
    monkeypatch.setattr(C, "memory_headroom", lambda: (1_000_000, "MemAvailable"))
    with pytest.raises(EngineError) as e:
        engine.load(tiny_checkpoint)
    msg = one_line(e)
    assert "memory" in msg and "MemAvailable" in msg and "GiB" in msg


@pytest.mark.slow  # a subprocess
def test_memory_headroom_reads_the_address_space_cap(tmp_path):
    """Under `ulimit -v`, the headroom is the cap less the address space in use: a process capped 400 MiB above its
    current size sees at most that."""
    code = ("import resource, engine.checkpoint as C\n"
            f"size = {VM_SIZE}\n"
            "resource.setrlimit(resource.RLIMIT_AS, (size + 400 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
            "n, what = C.memory_headroom()\n"
            "print(n // 2**20, what)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    mib, what = r.stdout.split(maxsplit=1)
    assert 300 <= int(mib) <= 400 and "RLIMIT_AS" in what


@pytest.mark.slow  # a subprocess
def test_a_model_larger_than_the_address_space_cap_is_one_line(tmp_path, bbc_tokenizer):
    """The fault as reported: under a cap (ulimit -v), a model that does not fit gave 'lower --batch-size' or a
    traceback; now one line naming the memory it needs and the cap. The checkpoint holds about 7M parameters
    (29 MB); the cap leaves 44 MiB, less than the model, its weights as read and the fused attention copies (about 64 MB)."""
    torch.manual_seed(0)
    cfg = engine.BertConfig.preset("tiny", vocab_size=bbc_tokenizer.vocab_size, num_layers=8, hidden_size=256,
                                   num_heads=4, max_position_embeddings=128)
    ck = engine.save(engine.BertForPreTraining(cfg), tmp_path / "ck", tokenizer=bbc_tokenizer)
    code = ("import resource, sys, engine, engine.checkpoint as C\n"
            f"resource.setrlimit(resource.RLIMIT_AS, ({VM_SIZE} + 44 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
            "try:\n"
            "    engine.load(sys.argv[1])\n"
            "    print('loaded')\n"
            "except engine.EngineError as e:\n"
            "    print('error:', e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(ck)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("error: "), (r.stdout, r.stderr[-2000:])
    assert len(r.stdout.strip().splitlines()) == 1 and "memory" in r.stdout and "RLIMIT_AS" in r.stdout


# ------------------------------------------------------------------ 11. an unreachable Hub fails at once
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: a connection to it is refused


def _load_online(model: str, hf_home: Path) -> subprocess.CompletedProcess:
    """`engine.load(model)` in a fresh process with HF_HUB_OFFLINE unset and the Hub at a closed local port."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                                                            "HUGGINGFACE_HUB_CACHE")}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    code = ("import sys, engine\n"
            "try:\n"
            "    b = engine.load(sys.argv[1])\n"
            "    print('loaded', b.config.num_layers)\n"
            "except engine.EngineError as e:\n"
            "    print('error:', e)\n")
    return subprocess.run([sys.executable, "-c", code, model], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess
def test_unreachable_hub_is_one_line_with_no_retries(tmp_path):
    r = _load_online("org/not-cached", tmp_path / "hf-home")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("error: ") and len(r.stdout.strip().splitlines()) == 1, r.stdout
    assert "could not be reached" in r.stdout and "'minilm'" in r.stdout
    assert [l for l in r.stderr.splitlines() if "Retrying" in l] == [], r.stderr
    assert "thrown while requesting" not in r.stderr, r.stderr


@pytest.mark.slow  # a subprocess
def test_unreachable_hub_still_loads_a_cached_id(tmp_path, tiny_checkpoint):
    _put_in_hub_cache(tmp_path / "hf-home" / "hub", "org/cached", tiny_checkpoint)
    r = _load_online("org/cached", tmp_path / "hf-home")
    assert r.returncode == 0 and r.stdout.strip() == "loaded 2", (r.stdout, r.stderr[-2000:])
    assert "Retrying" not in r.stderr, r.stderr


# ------------------------------------------------------------------ 11. a raw pickle .bin: one line, no torch warning
class _Payload:
    def __reduce__(self):
        return (print, ("the pickle ran",))


@pytest.mark.slow  # a subprocess
def test_raw_pickle_bin_is_one_line_with_no_torch_warning(tmp_path, tiny_checkpoint):
    d = tmp_path / "pickled"
    shutil.copytree(tiny_checkpoint, d)
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"bert.embeddings.word_embeddings.weight": _Payload()}, protocol=4))
    r = subprocess.run([sys.executable, "-m", "engine", "probe", "--model", str(d), "--fill", "the [MASK] ."],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "the pickle ran" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "could not be read safely" in lines[0], r.stderr


# ------------------------------------------------------------------ 11. the studio refuses a foreign Host on HTTP too
def _get(url: str, host: str) -> int:
    req = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _ws_handshake(port: int, host: str) -> int:
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req.encode())
        return int(s.recv(4096).split(b"\r\n", 1)[0].decode().split()[1])


@pytest.mark.slow  # starts the studio
def test_studio_refuses_a_foreign_host_on_http_too(tmp_path):
    port = _closed_port()
    env = dict(os.environ, BERT_STUDIO_RUNS=str(tmp_path / "runs"))
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port)],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to about a minute for a cold start
            assert proc.poll() is None, (tmp_path / "streamlit.log").read_text()
            try:
                if _get(base + "/_stcore/health", f"127.0.0.1:{port}") == 200:
                    break
            except OSError:
                time.sleep(0.2)
        for path in ("/", "/_stcore/health", "/_stcore/host-config", "/favicon.png", "/no-such-page"):
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
                assert _get(base + path, host) == 200, (path, host)
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example:80"):
                assert _get(base + path, host) == 403, (path, host)
        assert _ws_handshake(port, f"127.0.0.1:{port}") == 101
        assert _ws_handshake(port, f"evil.example:{port}") == 403
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
