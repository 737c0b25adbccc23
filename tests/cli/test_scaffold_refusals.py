"""``anydev new-backend`` refuses what it cannot use with one ``error:`` line (exit 2): a --dir that
is a file or lies under one, and a name an installed third-party backend already has."""
from __future__ import annotations

import pytest

from anydev.cli import commands as cli
from anydev.cli import scaffold
from anydev.plugin_api import get_registry


def run_new_backend(capsys, *args: str) -> tuple[int, list[str]]:
    code = cli.main(["new-backend", *args])
    captured = capsys.readouterr()
    return code, captured.err.splitlines()


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_dir_that_is_a_file_is_one_error_line(tmp_path, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me\n")
    target = {"a file": blocker, "under a file": blocker / "pkg"}[where]
    code, errors = run_new_backend(capsys, "probexyz", "--dir", str(target))
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: ") and str(blocker) in errors[0]
    assert blocker.read_text() == "keep me\n"


def test_a_name_an_installed_backend_has_is_refused_naming_it(tmp_path):
    if "hostdev" not in get_registry().plugins:
        pytest.skip("the example out-of-tree backend (hostdev) is not installed")
    with pytest.raises(scaffold.ScaffoldError, match="'hostdev' is already the name of an installed backend "
                                                     r"\(entry point hostdev = "):
        scaffold.new_backend("hostdev", tmp_path / "out")
    assert not (tmp_path / "out").exists()
