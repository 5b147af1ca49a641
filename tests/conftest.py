import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "data_samples")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own binary-cache directory, outside its tmp_path."""
    monkeypatch.setenv("RAFM_CACHE_DIR", str(tmp_path_factory.mktemp("rafm-cache")))


@pytest.fixture
def sample():
    """Path of a shipped sample file, e.g. sample('regression.train')."""
    return lambda name: os.path.join(SAMPLES, name + ".libfm")
