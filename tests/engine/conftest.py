"""Fixtures the engine's probe tests share: the tiny run's latest checkpoint and MiniLM, each loaded once a session."""
import pytest

import engine


@pytest.fixture(scope="session")
def bundle(tiny_run):
    return engine.load(tiny_run)  # the latest checkpoint


@pytest.fixture(scope="session")
def minilm():
    return engine.load("minilm")
