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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Why tests were skipped, one line per reason (not per test)."""
    reasons: dict[str, int] = {}
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"skipped {count}: {reason}")
