"""Build the emulated vendor runtimes, so the real moore and metax plugins run without their hardware.

``build_emulated_runtime("moore", out_dir)`` compiles ``emulated/runtime.c`` (the MUSA runtime API,
prefix ``musa``) and ``emulated/mccl.c`` (MCCL) with gcc into one library under ``out_dir`` (reusing an
earlier build of the same sources; ``libmccl.so`` is a link to it), and returns the environment
variables that point the moore plugin at them (``ANYDEV_MUSART_LIBRARY``, ``ANYDEV_MUSA_MCCL_LIBRARY``)
and register the emulated runtime's class with the cudalike backends (``ANYDEV_CUDALIKE_VARIANTS``:
:mod:`.emulated_runtime`). ``"metax"`` does the same for the MACA runtime API (prefix ``mc``, without
``mcGetErrorName``/``mcRuntimeGetVersion``, as MACA).

The libraries emulate devices over host memory; see the header of ``emulated/runtime.c`` for what is
emulated and for the environment variables that configure them (device count, memory per device,
collective timeout). On them the plugin's torch bridge gives CPU tensors over the emulated device
memory (:mod:`.emulated_runtime`), so anydev's engine runs on the real moore and metax plugin
code; every report labels such a run "emulated runtime".

From the shell (one command: build, then run a program with the library variables set)::

    python -m anydev.conformance.emulated moore -- python examples/test_infer.py --device moore --tp 2
    eval "$(python -m anydev.conformance.emulated moore,metax)"   # or: export the variables here
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from anydev.backends.cudalike.variants import VARIANT_MODULES_ENV

SOURCE_DIR = Path(__file__).with_name("emulated")
#: The module of the emulated runtime's class; importing it registers the class with the cudalike backends.
RUNTIME_MODULE = f"{__package__}.emulated_runtime"
SOURCES = ("emulated.h", "runtime.c", "mccl.c")
CFLAGS = ("-shared", "-fPIC", "-O2", "-pthread")


class EmulatedBuildError(RuntimeError):
    """The emulated runtime could not be compiled (no compiler, or a compile error)."""


@dataclass(frozen=True)
class EmulatedVendor:
    rt: str                     # symbol prefix
    runtime_file: str           # file name (and soname) of the runtime library
    defines: tuple[str, ...]    # which optional functions the vendor runtime has
    spec_module: str            # where the plugin declares its library env vars


VENDORS = {
    "moore": EmulatedVendor("musa", "libmusart.so", ("HAS_ERROR_NAME", "HAS_RUNTIME_VERSION"), "anydev.backends.moore.spec"),
    "metax": EmulatedVendor("mc", "libmcruntime.so", (), "anydev.backends.metax.spec"),
}
CCL_FILE = "libmccl.so"


def build_emulated_runtime(vendor: str, out_dir, extra_defines: tuple[str, ...] = ()) -> dict[str, str]:
    """Compile (or reuse) the emulated runtime of ``vendor`` ("moore" or "metax") under ``out_dir``;
    return the variables that load it: ``{env var: library path}`` for the plugin's exact-library
    variables, and the runtime variant module (:mod:`.emulated_runtime`) the cudalike backends import.

    ``extra_defines`` (e.g. ``("EMU_NOT_READY_CODE=34",)``) builds a variant, for tests of the
    plugin's load-time resolution. Raises :class:`EmulatedBuildError` without a C compiler.
    """
    if vendor not in VENDORS:
        raise ValueError(f"no emulated runtime for {vendor!r}; choose one of {', '.join(VENDORS)}")
    emulated = VENDORS[vendor]
    compiler = _compiler()
    defines = (f"RT={emulated.rt}", *emulated.defines, *extra_defines)
    build_dir = Path(out_dir) / f"{vendor}-{_fingerprint(defines)}"
    runtime_path, ccl_path = build_dir / emulated.runtime_file, build_dir / CCL_FILE
    if not (runtime_path.exists() and ccl_path.exists()):
        _build(compiler, emulated, defines, build_dir)
    spec = importlib.import_module(emulated.spec_module).SPEC
    return {spec.runtime_library.env_var: str(runtime_path), spec.ccl_library.env_var: str(ccl_path),
            VARIANT_MODULES_ENV: RUNTIME_MODULE}


def _compiler() -> str:
    name = os.environ.get("CC") or "gcc"
    path = shutil.which(name)
    if path is None:
        raise EmulatedBuildError(
            f"C compiler {name!r} not found on $PATH: the emulated moore/metax runtimes are compiled at test "
            "time; install gcc (e.g. apt-get install gcc) or set $CC"
        )
    return path


def _fingerprint(defines: tuple[str, ...]) -> str:
    digest = hashlib.sha256(" ".join((*CFLAGS, *defines)).encode())
    for name in SOURCES:
        digest.update((SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def _build(compiler: str, emulated: EmulatedVendor, defines: tuple[str, ...], build_dir: Path) -> None:
    """Compile into a fresh directory, then rename it into place (safe with parallel test workers).

    The runtime and the MCCL are one shared object; the MCCL's file name is a link to it, so loading it
    by that path gives the very same library (the MCCL then always runs on its own runtime's streams,
    even with two emulated builds in one process).
    """
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=build_dir.name + ".", dir=build_dir.parent))
    _run([compiler, *CFLAGS, *(f"-D{d}" for d in defines), f"-Wl,-soname,{emulated.runtime_file}",
          str(SOURCE_DIR / "runtime.c"), str(SOURCE_DIR / "mccl.c"), "-o", str(staging / emulated.runtime_file)])
    (staging / CCL_FILE).symlink_to(emulated.runtime_file)
    staging.chmod(0o755)  # mkdtemp made it private
    try:
        staging.rename(build_dir)
    except OSError:
        if not build_dir.is_dir():  # not a concurrent build that finished first
            raise
        shutil.rmtree(staging)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise EmulatedBuildError(f"compiling the emulated runtime failed: {' '.join(command)}\n{result.stderr}")


def default_build_dir() -> Path:
    """Where the command line builds: ``$XDG_CACHE_HOME/anydev/emulated`` (default ``~/.cache/...``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "anydev" / "emulated"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m anydev.conformance.emulated",
        description="Build anydev's emulated MUSA/MACA runtimes (device memory in host memory; not real "
        "hardware) and print the library variables as shell exports, or run COMMAND with them set.",
        epilog="example: python -m anydev.conformance.emulated moore -- python examples/test_infer.py "
        "--device moore --tp 2",
    )
    parser.add_argument("vendors", help=f"comma list of: {', '.join(VENDORS)}")
    parser.add_argument("--dir", type=Path, default=None, help=f"build folder (default {default_build_dir()})")
    parser.usage = "%(prog)s [-h] [--dir DIR] VENDORS [-- COMMAND [ARGS...]]"
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    vendors = [v.strip() for v in args.vendors.split(",") if v.strip()]
    unknown = [v for v in vendors if v not in VENDORS]
    if unknown or not vendors:
        parser.error(f"no emulated runtime for {', '.join(unknown) or repr(args.vendors)}; choose from {', '.join(VENDORS)}")
    try:
        env = {name: path for vendor in vendors
               for name, path in build_emulated_runtime(vendor, args.dir or default_build_dir()).items()}
    except EmulatedBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    label = f"# anydev emulated runtime(s) for {', '.join(vendors)}: device memory is host memory, not real hardware"
    if not command:
        print(label)
        for name, path in env.items():
            print(f"export {name}={shlex.quote(path)}")
        return 0
    print(label, file=sys.stderr)
    sys.stderr.flush()
    return subprocess.run(command, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    raise SystemExit(main())
