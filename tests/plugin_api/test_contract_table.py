"""docs/writing-a-backend.md opens with the contract on one page: every required call, optional call
and kernel has a row, each kernel's row says the version the kernels registry gives it."""
from __future__ import annotations

from pathlib import Path

import pytest

import anydev
from anydev.plugin_api import OPTIONAL_CALLS, REQUIRED_CALLS, TORCH_BRIDGE_CALLS
from anydev.plugin_api import kernels as K

GUIDE = Path(anydev.__file__).parent / "docs" / "writing-a-backend.md"


@pytest.fixture(scope="module")
def table() -> list[str]:
    """The rows of the first table after the heading "The contract on one page", before section 1."""
    text = GUIDE.read_text()
    start = text.index("## The contract on one page")
    assert start < text.index("## 1. "), "the one-page table must open the guide"
    section = text[start:text.index("\n## ", start + 1)]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| entry ")]


def _row(table, needle: str) -> list[str]:
    rows = [r for r in table if f"`{needle}`" in r]
    assert rows, f"no row of the one-page table names {needle}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


@pytest.mark.parametrize("call", REQUIRED_CALLS)
def test_every_required_call_is_in_a_required_row(table, call):
    assert _row(table, call)[1] == "required"


@pytest.mark.parametrize("call", OPTIONAL_CALLS + ("close",))
def test_every_optional_call_is_in_an_optional_row(table, call):
    assert _row(table, call)[1] == "optional"


@pytest.mark.parametrize("name", K.KERNEL_NAMES)
def test_every_kernel_has_its_own_row_with_the_registrys_version(table, name):
    cells = _row(table, name) if any(r.startswith(f"| kernel `{name}`") for r in table) else None
    assert cells is not None and cells[0] == f"kernel `{name}`", f"no row 'kernel `{name}`'"
    assert cells[1] == "optional" and cells[2] == f"{K.KERNELS[name].since[0]}.{K.KERNELS[name].since[1]}"


def test_the_torch_bridge_is_one_row_named_by_its_constant(table):
    row = next(r for r in table if "TORCH_BRIDGE_CALLS" in r)
    assert all(f"`{call}`" in row for call in TORCH_BRIDGE_CALLS)
