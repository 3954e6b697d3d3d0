"""BERT Studio UI helpers (cached loaders, figures, the attention view); the job queue itself is engine.jobs.

Kept free of imports: modules that need streamlit import it themselves.
"""
