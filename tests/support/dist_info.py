"""Make a source tree discoverable as an installed plugin without pip (for tests).

``pip install -e`` writes a ``*.dist-info`` folder whose ``entry_points.txt`` lists the project's
entry points; ``importlib.metadata`` finds it on ``sys.path``. ``write_dist_info`` writes the same
from the project's own pyproject.toml, so a test still checks what the pyproject declares.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from anydev.plugin_api import hookspecs


def write_dist_info(project_root: Path, into: Path) -> dict[str, str]:
    """Write ``<name>-<version>.dist-info`` for ``project_root`` into ``into``; return its
    ``anydev.backends`` entry points."""
    project = tomllib.loads((project_root / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"][hookspecs.ENTRY_POINT_GROUP]
    dist_info = into / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = [f"[{hookspecs.ENTRY_POINT_GROUP}]"] + [f"{name} = {target}" for name, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return entry_points
