"""2-D projections (PCA or t-SNE) of frozen sentence features of BBC articles, for the Features page's picture of
what the features already separate (no streamlit import; the page caches the result)."""
import random

import numpy as np

PROJECTIONS = ("PCA", "t-SNE")


def project(X: np.ndarray, method: str, seed: int = 0) -> np.ndarray:
    """(N, D) features -> (N, 2) by PCA or t-SNE (perplexity capped for small N, PCA initialisation)."""
    X = np.asarray(X, dtype=np.float32)
    if method == "t-SNE":
        from sklearn.manifold import TSNE
        return TSNE(n_components=2, perplexity=max(2.0, min(30.0, (len(X) - 1) / 3)), init="pca", random_state=seed).fit_transform(X)
    if method == "PCA":
        from sklearn.decomposition import PCA
        return PCA(n_components=2, random_state=seed).fit_transform(X)
    raise ValueError(f"unknown projection {method!r}; choose one of {', '.join(PROJECTIONS)}")


def bbc_projection(bundle, n: int, combine: str, layers: tuple, pooling: str, method: str, seed: int = 0) -> tuple:
    """(xy (N, 2), topics, hover texts) of a fixed random sample of n BBC articles (`seed` picks the sample)."""
    from engine.corpora import load_bbc_labeled
    from engine.features import extract_features
    rows = load_bbc_labeled()
    sample = random.Random(seed).sample(rows, min(n, len(rows)))
    X = extract_features(bundle, [t for t, _, _ in sample], layers=layers, combine=combine, pooling=pooling, max_seq_len=128)
    hover = [f"<b>{topic}</b> · {fid}<br>{' '.join(text.split())[:90]}…" for text, topic, fid in sample]
    return project(X, method, seed), [topic for _, topic, _ in sample], hover
