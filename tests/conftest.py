"""Shared fixtures: offline settings, the ../shared/data folder, and a tiny checkpoint with MLM+NSP heads."""
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data is absent ({SHARED_DATA}); the shared benchmark files are needed for this test")
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
