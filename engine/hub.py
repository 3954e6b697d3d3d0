"""Hugging Face Hub ids for `engine.load`: "bert-base-uncased", "google-bert/bert-base-uncased", "prajjwal1/bert-tiny".

The files come through huggingface_hub (installed with transformers) into the user's own hub cache
(HF_HUB_CACHE, else HF_HOME/hub, read when called). Offline (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1, read
when called, or no network) a cached id is read from that cache and an uncached one is one line naming what
works offline. Only what a BERT, or another encoder of engine.encoders (RoBERTa, DistilBERT, ALBERT, ELECTRA,
DeBERTa-v2/v3, ModernBERT), needs is fetched: config.json first, so a model that is neither is refused before any
weight is downloaded, then the tokenizer files and model.safetensors; pytorch_model.bin only when the repository has
no safetensors (read with torch.load(weights_only=True)).
`class prepare` fetches Google's BERT-base (BERT_BASE) when online (`download`: `snapshot` with progress), and the
Probe and Attention pages offer it first once `cached` finds it.
This module never sets HF_HUB_OFFLINE: whether to go online is the user's choice.
"""
import json
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path

from engine.errors import EngineError, quoted

WEIGHTS, LEGACY_WEIGHTS = "model.safetensors", "pytorch_model.bin"
FILES = ["config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", WEIGHTS,
         "vocab.json", "merges.txt", "spm.model", "sentencepiece.bpe.model", "added_tokens.json"]  # BPE and sentencepiece
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HUB_ID = re.compile(rf"{_PART}(?:/{_PART})?")  # name or org/name, in the characters the Hub allows
BERT_BASE = "google-bert/bert-base-uncased"  # Google's BERT-base, uncased (the paper's): `class prepare` fetches it


class NotCached(EngineError):
    """The model is not (completely) in the hub cache, and HF_HUB_OFFLINE is set or the Hub could not be reached."""


def is_hub_id(name) -> bool:
    """True for a string meant as a Hub id: not an existing path, not written as a path (./, ../, /, ~), not
    `folder/name` under a folder that exists here (`runs/typo` is a mistyped run, not the Hub's org "runs"), and
    `name` or `org/name` in the Hub's characters. Everything else stays a path; "minilm" is the built-in model."""
    if not isinstance(name, str) or name == "minilm" or name.startswith((".", "/", "~")) or Path(name).expanduser().exists():
        return False
    if "/" in name and Path(name.split("/", 1)[0]).is_dir():
        return False
    return bool(HUB_ID.fullmatch(name)) and "--" not in name and ".." not in name


def _true(value) -> bool:
    return str(value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE as the environment says now (huggingface_hub reads them once, at
    import, so its own flag counts too)."""
    from huggingface_hub import constants
    env = os.environ
    return _true(env.get("HF_HUB_OFFLINE")) or _true(env.get("TRANSFORMERS_OFFLINE")) or bool(constants.HF_HUB_OFFLINE)


def cache_dir() -> str:
    """The user's hub cache as the environment says now: HF_HUB_CACHE, else HF_HOME/hub, else huggingface_hub's."""
    env = os.environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return os.path.expandvars(os.path.expanduser(env[var]))
    if env.get("HF_HOME"):
        return os.path.join(os.path.expandvars(os.path.expanduser(env["HF_HOME"])), "hub")
    from huggingface_hub import constants
    return constants.HF_HUB_CACHE


def offline_choices() -> str:
    """What loads with no network: the words of every offline error."""
    from engine.recipes import CONTINUED, PROBE_READY_INIT, PROBE_READY_RUN
    from engine.runs import runs_root
    return (f"offline, load 'minilm' (the built-in MiniLM), a local checkpoint or run folder, or the probe-ready "
            f"model {runs_root() / PROBE_READY_RUN} (`python -m engine pretrain --init {PROBE_READY_INIT} --corpus "
            f"{CONTINUED.settings['corpus']} --out {runs_root() / PROBE_READY_RUN}`)")


def _not_cached(repo_id: str, cache: str) -> EngineError:
    why, fix = (("HF_HUB_OFFLINE is set", "unset HF_HUB_OFFLINE to download it") if offline() else
                ("the Hub could not be reached", "download it once with a network connection"))
    return NotCached(f"{quoted(repo_id)} is not a folder here and not (completely) in the Hugging Face Hub cache {cache}, "
                     f"and {why}; {offline_choices()}; or {fix}")


BERT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


def _check_bert(config_path: str, repo_id: str) -> None:
    """config.json names a BERT: model_type "bert", or no model_type and BERT's fields (older uploads such as
    prajjwal1/bert-tiny predate model_type; engine.checkpoint.read_config reads them as BERT too); or another encoder
    of engine.encoders."""
    from engine.encoders import ENCODERS, names
    try:
        cfg = json.loads(Path(config_path).read_text(encoding="utf-8"))
        model_type = cfg.get("model_type", "bert" if all(k in cfg for k in BERT_KEYS) else None)
    except (ValueError, UnicodeDecodeError, AttributeError) as e:
        raise EngineError(f"{quoted(repo_id)} on the Hugging Face Hub has a config.json that is not a JSON object; it is not a BERT checkpoint") from e
    if model_type != "bert" and model_type not in ENCODERS:
        raise EngineError(f"{quoted(repo_id)} on the Hugging Face Hub is a '{model_type}' model, not BERT or another encoder "
                          f"read here ({names()}); pick one of those, e.g. google-bert/bert-base-uncased or FacebookAI/roberta-base")


_NO_RETRY = threading.Lock()


@contextmanager
def _first_failure_is_final():
    """huggingface_hub answers a file that is not cached, and whose first request could not connect (refused, no
    route, no DNS, timed out), by trying again 5 times with backoff: about 23 s and 11 log lines ("Retrying in Ns")
    before the same failure. One failed connection says enough; the not-cached error names what works offline. So
    while config.json, the first file, is asked for, the connection errors that trigger the retry are none
    (huggingface_hub.file_download._DEFAULT_RETRY_ON_EXCEPTIONS, read when the retry is decided; a version without it
    has no such retry to switch off). A cached file is still returned after that failure, and an answer from the Hub
    (404, 401, 5xx) is handled as before; the later files keep huggingface_hub's retries."""
    from huggingface_hub import file_download
    with _NO_RETRY:
        saved = getattr(file_download, "_DEFAULT_RETRY_ON_EXCEPTIONS", None)
        if saved is not None:
            file_download._DEFAULT_RETRY_ON_EXCEPTIONS = ()
        try:
            yield
        finally:
            if saved is not None:
                file_download._DEFAULT_RETRY_ON_EXCEPTIONS = saved


def _fetch(repo_id: str, cache: str, local: bool) -> Path:
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
    kw = dict(cache_dir=cache, local_files_only=local)
    try:
        with _first_failure_is_final():
            config = hf_hub_download(repo_id, "config.json", **kw)
    except EntryNotFoundError as e:
        if isinstance(e, LocalEntryNotFoundError):
            raise
        raise EngineError(f"{quoted(repo_id)} on the Hugging Face Hub has no config.json; it is not a model in the transformers layout") from e
    _check_bert(config, repo_id)
    d = Path(snapshot_download(repo_id, allow_patterns=FILES, **kw))
    if not (d / WEIGHTS).is_file():
        try:
            d = Path(hf_hub_download(repo_id, LEGACY_WEIGHTS, **kw)).parent
        except EntryNotFoundError as e:
            if isinstance(e, LocalEntryNotFoundError):
                raise
            raise EngineError(f"{quoted(repo_id)} on the Hugging Face Hub has neither {WEIGHTS} nor {LEGACY_WEIGHTS} "
                              f"(sharded weights are not supported); pick another model") from e
    return d


def snapshot(repo_id: str) -> Path:
    """The folder in the hub cache holding `repo_id`'s config.json, tokenizer files and weights: downloaded when
    online, the cached copy offline. Every failure is one line (EngineError)."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    cache = cache_dir()
    try:
        return _fetch(repo_id, cache, local=offline())
    except LocalEntryNotFoundError as e:
        raise _not_cached(repo_id, cache) from e
    except GatedRepoError as e:
        raise EngineError(f"{quoted(repo_id)} is gated on the Hugging Face Hub; accept its terms at https://huggingface.co/{repo_id} "
                          f"and log in (`hf auth login`), or pick another model") from e
    except RepositoryNotFoundError as e:
        raise EngineError(f"{quoted(repo_id)} does not exist here or on the Hugging Face Hub (a private model needs `hf auth "
                          f"login`); give a run folder, a checkpoint folder, a Hugging Face BERT folder, 'minilm' or a Hub "
                          f"id such as google-bert/bert-base-uncased") from e
    except (HfHubHTTPError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise EngineError(f"could not fetch {quoted(repo_id)} from the Hugging Face Hub ({first}); check the id and the network, "
                          f"or {offline_choices()}") from e


def cached(repo_id: str) -> Path | None:
    """The folder of `repo_id` in the user's hub cache when its config.json and weights are all there, read with no
    network (as `snapshot` reads it offline); None when they are not, or when what is cached is not a model read
    here."""
    from huggingface_hub.errors import LocalEntryNotFoundError
    try:
        return _fetch(repo_id, cache_dir(), local=True)
    except (LocalEntryNotFoundError, EngineError, OSError, ValueError):
        return None


def _download_megabytes(repo_id: str) -> int:
    """What `snapshot` would download of `repo_id`, in megabytes, from the Hub's file list (0 when unknown)."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi
    try:
        files = {f.rfilename: f.size or 0 for f in HfApi().model_info(repo_id, files_metadata=True).siblings or []}
    except Exception:  # (any failure of the size query: the download says what is wrong)
        return 0
    wanted = [f for f in files if any(fnmatch(f, pattern) for pattern in FILES)]
    if WEIGHTS not in files and LEGACY_WEIGHTS in files:
        wanted.append(LEGACY_WEIGHTS)
    return int(sum(files[f] for f in wanted) / 1e6)


def _megabytes_under(folder: Path) -> int:
    """The megabytes of the files under `folder` (a cache repository's blobs, the one being written included)."""
    total = 0
    for f in folder.glob("*") if folder.is_dir() else ():
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return int(total / 1e6)


def download(repo_id: str, stream=None, every: float = 60.0) -> Path:
    """`snapshot` with progress (engine.progress: a bar on a terminal, a line every `every` seconds in a log): the
    megabytes written into the repository's cache folder against the files' sizes the Hub lists. Every failure is
    one line (EngineError; NotCached when the Hub could not be reached)."""
    import threading

    from engine.progress import Progress
    blobs = Path(cache_dir()) / ("models--" + repo_id.replace("/", "--")) / "blobs"
    before = _megabytes_under(blobs)
    bar = Progress(_download_megabytes(repo_id), f"downloading {repo_id}", unit="megabyte", stream=stream, every=every)
    stop = threading.Event()

    def follow():
        while True:
            stopped = stop.wait(1.0)
            done = max(0, _megabytes_under(blobs) - before)
            if done > bar.done:
                bar.update(done - bar.done)
            if stopped:
                return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    theirs = not are_progress_bars_disabled()  # huggingface_hub's own bars would say the same twice: off meanwhile
    disable_progress_bars()
    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    try:
        return snapshot(repo_id)
    finally:
        stop.set()
        watcher.join()
        bar.close()
        if theirs:
            enable_progress_bars()
