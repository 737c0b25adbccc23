"""``anydev list-backends``: every backend the registry knows, whether it is usable here, and why not."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field

from anydev.plugin_api import BackendUnavailableError, Registry, is_stub
from anydev.plugin_api.version import format_version


@dataclass
class BackendRow:
    """What ``anydev list-backends`` reports about one backend (``--json`` prints these fields)."""

    name: str
    source: str
    available: bool = False
    reason: str = ""
    searched: list[str] = field(default_factory=list)
    contract_version: str = ""
    device_count: int | None = None
    hardware: str = ""
    runtime_version: str = ""
    driver_version: str = ""
    collective_library: str = ""
    collective_version: str = ""
    library_paths: list[str] = field(default_factory=list)
    notes: str = ""


def describe_backends(registry: Registry) -> list[BackendRow]:
    """One row per backend the registry knows, broken plugins included; loads each available one."""
    rows = []
    for name in registry.names():
        if name in registry.broken:
            broken = registry.broken[name]
            rows.append(BackendRow(name=name, source=broken.source, reason=f"the plugin is broken: {broken.cause}"))
            continue
        plugin = registry.plugins[name]
        row = BackendRow(name=name, source=registry.sources[name],
                         contract_version=format_version(plugin.contract_version))
        try:
            backend = registry.load(name)
        except BackendUnavailableError as exc:
            row.reason, row.searched = exc.reason, exc.searched
        except Exception as exc:  # a plugin's own failure: reported on its row, the other rows still print
            row.reason = f"loading failed: {type(exc).__name__}: {exc}"
        else:
            _describe_loaded(row, backend.runtime)
        rows.append(row)
    return rows


def _describe_loaded(row: BackendRow, runtime) -> None:
    """Fill in a loaded backend's row; one whose ``device_count`` fails (a skeleton's stub, a runtime
    error) is unavailable, with the reason on its row."""
    try:
        row.device_count = runtime.device_count()
    except Exception as exc:  # the plugin's failure: reported on its row, the other rows still print
        what = "is still a stub (a new-backend skeleton)" if is_stub(type(runtime).device_count) else "failed"
        row.reason = f"loaded, but device_count() {what}: {type(exc).__name__}: {exc}"
        return
    row.available = True
    row.hardware = runtime.hardware_label
    if not runtime.supports("runtime_info"):
        row.notes = "the backend does not report runtime info"
        return
    try:
        info = runtime.runtime_info()
    except Exception as exc:  # reported on the row, like a failing device_count
        row.notes = f"runtime_info() failed: {type(exc).__name__}: {exc}"
        return
    row.runtime_version, row.driver_version = info.runtime_version, info.driver_version
    row.collective_library, row.collective_version = info.collective_library, info.collective_version
    row.library_paths, row.notes = list(info.library_paths), info.notes


COLUMNS = (("BACKEND", "name"), ("AVAILABLE", "available"), ("DEVICES", "device_count"), ("HARDWARE", "hardware"),
           ("RUNTIME", "runtime_version"), ("DRIVER", "driver_version"), ("COLLECTIVES", "collectives"),
           ("CONTRACT", "contract_version"), ("SOURCE", "source"))


def format_table(rows: list[BackendRow]) -> str:
    """A plain-text table, each row followed by its details (why it is unavailable, libraries, notes)."""
    cells = [[header for header, _ in COLUMNS]] + [[_cell(row, key) for _, key in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]

    def line(values):
        return "  ".join(value.ljust(width) for value, width in zip(values, widths)).rstrip()

    out = [line(cells[0])]
    for row, values in zip(rows, cells[1:]):
        out.append(line(values))
        out.extend("    " + detail for detail in _details(row))
    return "\n".join(out)


def _cell(row: BackendRow, key: str) -> str:
    if key == "available":
        return "yes" if row.available else "no"
    if key == "collectives":
        return f"{row.collective_library} {row.collective_version}".strip() or "-"
    if key == "source":
        return "built-in" if row.source.startswith("built-in") else row.source
    value = getattr(row, key)
    return "-" if value in (None, "") else str(value)


def _details(row: BackendRow) -> list[str]:
    details = []
    if row.reason:
        details.append(f"why: {row.reason}")
    if row.searched:
        details.append("searched:")
        details.extend(f"  {place}" for place in row.searched)
    if row.library_paths:
        details.append("libraries: " + ", ".join(row.library_paths))
    if row.notes:
        details.append(f"notes: {row.notes}")
    return details


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    """Print every backend and whether it is usable here; exit 0 even when some are not."""
    rows = describe_backends(Registry())
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
    else:
        print(format_table(rows))
    return 0
