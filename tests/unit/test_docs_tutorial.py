"""``docs/tutorial.md`` runs as written: its Python blocks, in order, in one namespace, on the emulator
(each block checks its own result against torch)."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

TUTORIAL = pathlib.Path(__file__).parents[2] / "docs" / "tutorial.md"


def test_tutorial_blocks_run() -> None:
    pytest.importorskip("iree.compiler")
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for i, block in enumerate(blocks):
            exec(compile(block, f"{TUTORIAL.name}[block {i}]", "exec"), namespace)  # noqa: S102 - the doc's code
