"""docs/conformance-domains.md names every contract call and kernel, and only checks and mutants
that exist: the table cannot drift from the suite."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import anydev
from anydev.conformance import mutants
from anydev.plugin_api import REQUIRED_CALLS
from anydev.plugin_api.kernels import KERNEL_NAMES
from anydev.plugin_api.runtime import OPTIONAL_CALLS

ROOT = Path(anydev.__file__).parent
DOC = (ROOT / "docs" / "conformance-domains.md").read_text()


def suite_checks() -> set[str]:
    names = set()
    for module in (ROOT / "conformance").glob("test_*.py"):
        names |= {node.name for node in ast.walk(ast.parse(module.read_text()))
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    return names


def test_every_call_and_kernel_of_the_contract_has_a_row():
    missing = [name for name in (*REQUIRED_CALLS, *OPTIONAL_CALLS, *KERNEL_NAMES)
               if name != "runtime_info" and name != "kernels" and f"`{name}" not in DOC]
    assert not missing, f"docs/conformance-domains.md has no row for {missing}"


def test_the_checks_and_mutants_it_names_exist():
    named_checks = set(re.findall(r"\btest_[a-z0-9_]+\b(?!\.py)", DOC))   # modules (test_x.py) aside
    unknown_checks = sorted(c for c in named_checks if c not in suite_checks())
    assert not unknown_checks, f"checks named in the table that the suite lacks: {unknown_checks}"
    known = mutants.all_mutants()
    table_mutants = {m for row in DOC.splitlines() if row.startswith("|")
                     for m in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", row.rsplit("|", 2)[-2])}
    assert table_mutants, "the mutants column is empty"
    assert not sorted(table_mutants - set(known)), f"mutants named that do not exist: {sorted(table_mutants - set(known))}"


def guide_edges_table() -> str:
    guide = (ROOT / "docs" / "writing-a-backend.md").read_text()
    section = guide.split("### Each call at the edges of its arguments", 1)[1].split("\n### ", 1)[0]
    return "\n".join(row for row in section.splitlines() if row.startswith("| `"))


def test_the_guides_edge_table_has_every_call_with_a_check_that_exists():
    table = guide_edges_table()
    missing = [name for name in (*REQUIRED_CALLS, *OPTIONAL_CALLS) if name != "runtime_info" and f"`{name}`" not in table]
    assert not missing, f"the guide's edge table (writing-a-backend.md) has no row for {missing}"
    checks = suite_checks()
    for row in table.splitlines():
        named = re.findall(r"`(test_[a-z0-9_]+)`", row.rsplit("|", 2)[-2])
        assert named, f"a row of the guide's edge table names no check: {row[:80]}"
        assert not [c for c in named if c not in checks], f"checks the suite lacks in: {row[:80]}"
