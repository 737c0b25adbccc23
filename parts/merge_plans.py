"""Merge ``linear_bench.py --table-out`` files into a tree's ``linear_plans.RECORDED`` (its source text):
an entry whose key is there replaces that line, a new one goes before the dict's closing brace. How a
call script runs a sweep's winners through the conformance checks of recorded plans in the same call
(on a copy of the tree), and how they are then pasted here.

    python parts/merge_plans.py backends/triton_kernels/linear_plans.py plans-a.txt [plans-b.txt ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from linear_bench import read_table                                            # noqa: E402

OPENING = "RECORDED: dict[tuple[str, int, str, int, int], tuple] = {\n"


def merged(source: str, table: dict) -> str:
    """``source`` with ``table``'s entries in RECORDED."""
    start = source.index(OPENING) + len(OPENING)
    end = source.index("\n}\n", start) + 1
    lines = source[start:end].splitlines(keepends=True)
    for key, value in sorted(table.items()):
        line = f"    {key!r}: {value!r},\n"
        at = next((i for i, old in enumerate(lines) if old.startswith(f"    {key!r}:")), None)
        if at is None:
            lines.append(line)
        else:
            lines[at] = line
    return source[:start] + "".join(lines) + source[end:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("plans_module", help="a tree's backends/triton_kernels/linear_plans.py")
    p.add_argument("tables", nargs="*", help="--table-out files (missing or empty ones are skipped)")
    args = p.parse_args(argv)
    table = {}
    for path in args.tables:
        if Path(path).is_file() and Path(path).stat().st_size:
            table.update(read_table(path))
    module = Path(args.plans_module)
    module.write_text(merged(module.read_text(), table))
    for key, value in sorted(table.items()):
        print(f"merged {key!r}: {value!r}")
    print(f"{len(table)} plan(s) merged into {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
