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
