"""Test tiers: unit, ir, binary, emulator run everywhere; ``gpu`` tests need a CUDA GPU."""

import pytest


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_GPU = _gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own compile cache so no test can pass on another's artifact."""
    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path / "wavec-cache"))
