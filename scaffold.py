"""``anydev new-backend NAME``: write the skeleton of an installable backend package.

The skeleton is a package ``anydev_NAME`` with a pyproject.toml declaring the entry point in the group
``anydev.backends``, ``plugin.py`` with the pluggy hook, and ``runtime.py`` with every required call of
the contract stubbed to raise ``NotSupportedError`` naming the call. The stubs are rendered from
``DeviceRuntime`` itself (signature and docstring), so the skeleton always matches this anydev's
contract. Template text lives in ``scaffold_templates/`` and is rendered with ``string.Template``.
"""
from __future__ import annotations

import argparse
import inspect
import re
import textwrap
from pathlib import Path
from string import Template

from .plugin_api import CONTRACT_VERSION, REQUIRED_CALLS, DeviceRuntime, InvalidArgumentError
from .plugin_api.discovery import BUILTIN_PLUGINS

TEMPLATE_DIR = Path(__file__).parent / "scaffold_templates"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
BUILTIN_NAMES = tuple(module.split(".")[-2] for module in BUILTIN_PLUGINS)
#: A comment line before the first call of each part of the contract.
SECTION_BEFORE = {"device_count": "devices", "malloc": "memory", "stream_create": "streams",
                  "event_create": "events", "comm_init_all": "collectives", "torch_device": "torch bridge"}


class ScaffoldError(InvalidArgumentError):
    """``new-backend`` was given a name or directory it cannot use."""


def render(template_name: str, **values: str) -> str:
    return Template((TEMPLATE_DIR / template_name).read_text()).substitute(values)


def stub_method(call: str) -> str:
    """The stub of one contract call: its signature and docstring from DeviceRuntime, raising."""
    function = getattr(DeviceRuntime, call)
    signature = inspect.signature(function)
    parameters = ", ".join(
        name if param.annotation is inspect.Parameter.empty else f"{name}: {param.annotation}"
        for name, param in signature.parameters.items()
    )
    returns = "" if signature.return_annotation is inspect.Signature.empty else f" -> {signature.return_annotation}"
    doc = inspect.getdoc(function)
    docstring = textwrap.indent(f'"""{doc}\n"""' if "\n" in doc else f'"""{doc}"""', " " * 8)
    section = f"\n    # ---- {SECTION_BEFORE[call]} ".ljust(94, "-") if call in SECTION_BEFORE else ""
    return section + "\n" + render("method.py.tmpl", call=call, parameters=parameters, returns=returns,
                                   docstring=docstring)


def check_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise ScaffoldError(
            f"backend name {name!r} must be lower-case letters, digits and underscores, starting with a "
            "letter (it becomes --device NAME and the package anydev_NAME)"
        )
    if name in BUILTIN_NAMES:
        raise ScaffoldError(f"'{name}' is a built-in backend; choose another name (built-in: {', '.join(BUILTIN_NAMES)})")


def new_backend(name: str, directory: str | Path | None = None) -> Path:
    """Write the package skeleton for backend ``name`` into ``directory`` (default ``./anydev-NAME``);
    return the directory. Refuses a directory that exists and is not empty."""
    check_name(name)
    root = Path(directory if directory is not None else f"anydev-{name.replace('_', '-')}")
    if root.exists() and any(root.iterdir()):
        raise ScaffoldError(f"{root} exists and is not empty; pass --dir with a new or empty directory")
    package = f"anydev_{name}"
    values = dict(
        name=name,
        package=package,
        distribution=f"anydev-{name.replace('_', '-')}",
        class_name="".join(part.capitalize() for part in name.split("_")) + "Runtime",
        contract_version=repr(tuple(CONTRACT_VERSION)),
        description=f"anydev backend {name}",
    )
    files = {
        "pyproject.toml": render("pyproject.toml.tmpl", **values),
        "README.md": render("README.md.tmpl", **values),
        f"{package}/__init__.py": render("__init__.py.tmpl", **values),
        f"{package}/plugin.py": render("plugin.py.tmpl", **values),
        f"{package}/runtime.py": render("runtime.py.tmpl", methods="".join(map(stub_method, REQUIRED_CALLS)), **values),
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``anydev new-backend`` (shared by the CLI and ``python -m anydev.scaffold``)."""
    parser.add_argument("name", help="the backend name users pass as --device NAME")
    parser.add_argument("--dir", dest="directory", default=None, help="where to write it (default ./anydev-NAME)")


def run(args: argparse.Namespace) -> int:
    """Run ``new-backend`` for parsed ``args``; print where the skeleton went and what to do next."""
    try:
        root = new_backend(args.name, args.directory)
    except ScaffoldError as exc:
        print(f"anydev new-backend: {exc}")
        return 2
    print(f"wrote the backend '{args.name}' to {root}/\nnext:\n  pip install -e {root}\n"
          f"  python -m anydev.conformance --device {args.name}   # each failure names a call to fill in\n"
          f"  then implement {root}/anydev_{args.name}/runtime.py call by call")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="anydev new-backend", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
