"""BERT Studio UI helpers (cached loaders, figures, the job launcher).

Kept free of imports so that `python -m studio.jobs run ...` (the detached job runner) starts fast: modules
that need streamlit import it themselves.
"""
