"""``anydev new-backend NAME``: write the skeleton of an installable backend package.

The skeleton is a package ``anydev_NAME`` with a pyproject.toml declaring the entry point in the group
``anydev.backends``, ``plugin.py`` with the pluggy hook, and ``runtime.py`` with every required call of
the contract stubbed to raise ``NotSupportedError`` naming the call. The stubs are rendered from
``DeviceRuntime`` itself (signature and docstring), so the skeleton always matches this anydev's
contract. Template text lives in ``cli/templates/`` and is rendered with ``string.Template``.

With ``--prefix PREFIX`` (a runtime that mirrors CUDA's, e.g. ``xyzMalloc``), the package instead holds
``spec.py``: a ``VendorSpec`` for anydev's CUDA-like core, which implements every call.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from pathlib import Path
from string import Template

from anydev.plugin_api import REQUIRED_CALLS, DeviceRuntime, InvalidArgumentError
from anydev.plugin_api.discovery import BUILTIN_PLUGINS, Registry
from anydev.plugin_api.version import DECLARED_ONCE_SINCE

TEMPLATE_DIR = Path(__file__).parent / "templates"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9]*$")
BUILTIN_NAMES = tuple(module.split(".")[-2] for module in BUILTIN_PLUGINS)
#: What a stubbed skeleton declares: it implements no optional call, and its runtime leaves its name
#: and version to the plugin, which needs contract 1.6 ("declare what you use", docs/writing-a-backend.md
#: section 3).
SKELETON_CONTRACT_VERSION = DECLARED_ONCE_SINCE
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
    registry = Registry()
    source = registry.sources.get(name) or (registry.broken[name].source if name in registry.broken else None)
    if source is not None:
        raise ScaffoldError(f"'{name}' is already the name of an installed backend ({source}); choose another "
                            "name, or uninstall that one first")


def new_backend(name: str, directory: str | Path | None = None, prefix: str | None = None) -> Path:
    """Write the package skeleton for backend ``name`` into ``directory`` (default ``./anydev-NAME``);
    return the directory. Refuses a directory that exists and is not empty.

    Without ``prefix``: ``runtime.py`` with every call stubbed. With ``prefix``: ``spec.py`` for the
    CUDA-like core, for a runtime whose symbols are ``<prefix>Malloc``, ``<prefix>cclAllReduce``, ...
    """
    check_name(name)
    if prefix is not None and not PREFIX_PATTERN.match(prefix):
        raise ScaffoldError(f"symbol prefix {prefix!r} must be lower-case letters and digits (like cuda, musa, mc)")
    root = Path(directory if directory is not None else f"anydev-{name.replace('_', '-')}")
    if root.exists() and not root.is_dir():
        raise ScaffoldError(f"{root} is a file, not a directory; pass --dir with a new or empty directory")
    if root.exists() and any(root.iterdir()):
        raise ScaffoldError(f"{root} exists and is not empty; pass --dir with a new or empty directory")
    package = f"anydev_{name}"
    values = dict(
        name=name,
        NAME=name.upper(),
        package=package,
        distribution=f"anydev-{name.replace('_', '-')}",
        class_name="".join(part.capitalize() for part in name.split("_")) + "Runtime",
        contract_version=repr(SKELETON_CONTRACT_VERSION),
        description=f"anydev backend {name}",
        prefix=prefix or "",
        PREFIX=(prefix or "").upper(),
    )
    if prefix is None:
        values["layout"] = (f"Every call of the device-API contract is a stub in `{package}/runtime.py` that "
                            "raises `NotSupportedError` naming the call.")
        values["finish"] = "Fill in `runtime.py` call by call; each conformance failure names a call still to write."
        code = {"plugin.py": render("plugin.py.tmpl", **values),
                "runtime.py": render("runtime.py.tmpl", methods="".join(map(stub_method, REQUIRED_CALLS)), **values)}
    else:
        values["layout"] = (f"`{package}/spec.py` describes a runtime that mirrors CUDA's with the prefix "
                            f"`{prefix}`; anydev's CUDA-like core implements every call from it.")
        values["finish"] = ("Correct `spec.py` (library names, SDK roots, constants that differ from CUDA's) "
                            "until the suite passes; without the libraries every check skips, saying what was searched.")
        code = {"plugin.py": render("cudalike_plugin.py.tmpl", **values),
                "spec.py": render("cudalike_spec.py.tmpl", **values)}
    files = {
        "pyproject.toml": render("pyproject.toml.tmpl", **values),
        "README.md": render("README.md.tmpl", **values),
        f"{package}/__init__.py": render("__init__.py.tmpl", **values),
        **{f"{package}/{file}": text for file, text in code.items()},
    }
    for relative, text in files.items():
        path = root / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:
            raise ScaffoldError(f"cannot write {path} ({exc.strerror or exc}); pass --dir with a new or empty "
                                "directory") from None
    return root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``anydev new-backend`` (shared by the CLI and ``python -m anydev.cli.scaffold``)."""
    parser.add_argument("name", help="the backend name users pass as --device NAME")
    parser.add_argument("--dir", dest="directory", default=None, help="where to write it (default ./anydev-NAME)")
    parser.add_argument("--prefix", default=None,
                        help="symbol prefix of a runtime that mirrors CUDA's (xyz for xyzMalloc): build on "
                             "anydev's CUDA-like core instead of stubs")


def run(args: argparse.Namespace) -> int:
    """Run ``new-backend`` for parsed ``args``; print where the skeleton went and what to do next."""
    try:
        root = new_backend(args.name, args.directory, args.prefix)
    except ScaffoldError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    to_edit = "spec.py (check every value)" if args.prefix else "runtime.py, call by call"
    print(f"wrote the backend '{args.name}' to {root}/\nnext:\n  pip install -e {root}\n"
          f"  python -m anydev.conformance --device {args.name} --report conformance-{args.name}.json\n"
          f"  then edit {root}/anydev_{args.name}/{to_edit}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="anydev new-backend", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
