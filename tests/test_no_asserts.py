"""Runtime invariants raise typed errors: ``assert`` vanishes under ``python -O``, so package code
(everything but tests) has none."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from anydev.core.loading import demo_model
from anydev.core.loading.checkpoint import ModelLoadError

ROOT = Path(__file__).resolve().parents[1]


def package_files():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        parts = path.relative_to(ROOT).parts
        if parts[0] in ("tests", "build") or path.name.startswith("test_") or "site-packages" in parts:
            continue
        yield relative, path


def test_package_code_has_no_assert_statements():
    found = [f"{relative}:{node.lineno}" for relative, path in package_files() for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.Assert)]
    assert found == []


def test_the_demo_vocab_invariant_raises_a_typed_error(monkeypatch):
    monkeypatch.setitem(demo_model.DEMO_SHAPE, "vocab_size", 100)
    with pytest.raises(ModelLoadError, match="the tokenizer has 376 tokens but the model's vocab_size is 100"):
        demo_model.build_demo_model()


def test_the_example_arena_refuses_unaligned_memory_with_a_typed_error():
    arena = pytest.importorskip("anydev_hostdev.arena", reason="the example out-of-tree backend is not installed")
    with pytest.raises(ValueError, match="must be multiples of 256"):
        arena.Arena(0x1001, 4096)
