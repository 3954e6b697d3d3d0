"""The one data builder against the in-memory builder it replaced: every array of both splits (tokens, offsets,
b_start, nsp_label, source) and the held-out documents, built from the same documents with the same settings
(docs/lab-notes/data-builder.md). The old builder is read from a copy of engine/pretraining/cache.py as it was, e.g.

    git show c51c390:engine/pretraining/cache.py > /tmp/old_cache.py
    python docs/lab-notes/data_builder_check.py /tmp/old_cache.py bbc sotu wiki chat all everyday

A copy without the input-format setting is compared on the default format only. One line per build; an assertion
names the first difference.
"""
import importlib.util
import inspect
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import engine  # noqa: E402 (after the repository root is on the path)
from engine.pretraining.prepare import build_pretraining_data  # noqa: E402
from engine.tokenizer import train_tokenizer  # noqa: E402

ARRAYS = ("tokens", "offsets", "b_start", "nsp_label", "source")
SETTINGS = [("mlm+nsp", None, 32, 1, 0.05), ("mlm+nsp", None, 128, 1, 0.05), ("mlm", None, 64, 2, 0.05),
            ("ltr", None, 32, 1, 0.0), ("mlm+sop", None, 32, 1, 0.05), ("mlm", "full-sentences", 64, 1, 0.05),
            ("mlm+nsp", "sentence-pair", 64, 1, 0.05), ("mlm", "doc-sentences", 64, 1, 0.05)]


def main(old_path: str, names: list) -> None:
    spec = importlib.util.spec_from_file_location("old_cache", old_path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    formats = "input_format" in inspect.signature(old.build_pretraining_data).parameters
    for name in names:
        docs = engine.load_corpus(name)
        tok = train_tokenizer(list(docs)[:400], vocab_size=3000, lowercase=True)
        for obj, fmt, seq_len, dupe, held in SETTINGS:
            if fmt and not formats:
                continue
            kw = dict(seq_len=seq_len, objective=obj, seed=3, dupe_factor=dupe, eval_fraction=held, eval_seed=0,
                      corpus_name=name, **({"input_format": fmt} if formats else {}))
            a = old.build_pretraining_data(docs, tok, cache_dir=tempfile.mkdtemp(), **kw)
            b = build_pretraining_data(docs, tok, cache_dir=tempfile.mkdtemp(), **kw)
            for split in ("train", "eval"):
                x, y = getattr(a, split), getattr(b, split)
                assert (x is None) == (y is None), (name, kw, split)
                for arr in ARRAYS if x is not None else ():
                    assert np.array_equal(getattr(x, arr), getattr(y, arr)), (name, kw, split, arr)
            assert a.config["eval_documents"] == b.config["eval_documents"], (name, kw)
            print(f"same: {name} {obj} {fmt or 'segment-pair'} T{seq_len} dupe {dupe} held out {held}: "
                  f"{a.train.num_instances} training instances", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["bbc"])
