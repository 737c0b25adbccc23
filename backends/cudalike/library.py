"""Finding and loading a vendor library, recording everything searched.

Search order for one library (first hit that loads wins):

1. the exact path in the library's own environment variable (e.g. ``ANYDEV_CUDART_LIBRARY``); when it
   is set, nothing else is tried: a wrong path is an error, not a reason to load something else;
2. ``<root>/<subdir>/<file name>`` for each SDK root (from environment variables, a compiler on
   ``PATH``, or a fixed default) and each library subdirectory;
3. pip packages: ``<site-packages>/<relative path>`` (NVIDIA's ``nvidia-*`` wheels);
4. the dynamic loader's own search (``LD_LIBRARY_PATH``, ``ld.so.cache``, system directories) by
   bare file name.

When nothing loads, :class:`BackendUnavailableError` lists the file names, the paths and the
environment variables searched; a file that exists but fails to load is reported with the loader's
error.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from anydev.plugin_api.errors import BackendUnavailableError


@dataclass(frozen=True)
class LibrarySpec:
    """How to find one library. ``label`` names it in messages (``libcudart``)."""

    label: str
    env_var: str
    file_names: tuple[str, ...]
    pip_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvRoot:
    """An SDK root named by an environment variable (``CUDA_HOME``)."""

    var: str

    def resolve(self) -> tuple[str | None, str]:
        value = os.environ.get(self.var)
        return (value, f"${self.var}={value}") if value else (None, f"${self.var} (unset)")


@dataclass(frozen=True)
class ExecutableRoot:
    """The SDK root above a compiler found on ``PATH`` (``mcc`` in ``<root>/bin``)."""

    executable: str

    def resolve(self) -> tuple[str | None, str]:
        found = shutil.which(self.executable)
        if not found:
            return None, f"{self.executable} on $PATH (not found)"
        root = str(Path(found).resolve().parent.parent)
        return root, f"{root} (parent of {found})"


@dataclass(frozen=True)
class FixedRoot:
    """A default install location (``/usr/local/cuda``)."""

    path: str

    def resolve(self) -> tuple[str | None, str]:
        return self.path, f"{self.path} (default)"


@dataclass(frozen=True)
class LoadedLibrary:
    lib: object
    path: str  # the file loaded, or the bare name the loader resolved


def site_package_dirs() -> list[str]:
    """Existing site-packages directories of this interpreter, in import order, without repeats."""
    candidates = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    found: list[str] = []
    for directory in candidates:
        if os.path.basename(directory) in ("site-packages", "dist-packages") and os.path.isdir(directory):
            if directory not in found:
                found.append(directory)
    return found


def dlopen(ffi, target: str):
    """``ffi.dlopen(target)``; raises OSError with the loader's own message.

    ctypes loads it first because its error is the plain ``dlerror()`` text, while cffi, on failure,
    falls back to ``ctypes.util.find_library``, which spawns compilers and hides the real cause.
    """
    ctypes.CDLL(target, mode=os.RTLD_NOW)
    return ffi.dlopen(target, ffi.RTLD_NOW)


def load_library(ffi, spec: LibrarySpec, backend: str, roots=(), lib_subdirs=("lib64", "lib"),
                 site_dirs: list[str] | None = None) -> LoadedLibrary:
    """Find and load ``spec`` (order in the module docstring), or raise BackendUnavailableError."""
    exact = os.environ.get(spec.env_var)
    if exact:
        return _load_exact(ffi, spec, backend, exact)
    searched = [f"${spec.env_var} (unset)"]
    failures: list[str] = []

    def attempt(target: str):
        try:
            return LoadedLibrary(dlopen(ffi, target), target)
        except OSError as exc:
            failures.append(f"{target}: {exc}")
            return None

    seen_dirs: set[str] = set()
    for root in roots:
        root_dir, origin = root.resolve()
        searched.append(origin)
        if root_dir is None:
            continue
        for subdir in lib_subdirs:
            directory = os.path.join(root_dir, subdir)
            if directory in seen_dirs:
                continue
            seen_dirs.add(directory)
            if not os.path.isdir(directory):
                searched.append(f"{directory} (no such directory)")
                continue
            searched.append(directory)
            for name in spec.file_names:
                path = os.path.join(directory, name)
                if os.path.exists(path) and (loaded := attempt(path)):
                    return loaded

    if spec.pip_paths:
        for site_dir in site_package_dirs() if site_dirs is None else site_dirs:
            searched.append(f"{site_dir}/{{{','.join(spec.pip_paths)}}}")
            for relative in spec.pip_paths:
                path = os.path.join(site_dir, relative)
                if os.path.exists(path) and (loaded := attempt(path)):
                    return loaded

    loader_path = os.environ.get("LD_LIBRARY_PATH")
    searched.append("dynamic loader path (" + (f"$LD_LIBRARY_PATH={loader_path}" if loader_path else
                                                "$LD_LIBRARY_PATH unset") + ", ld.so.cache, system dirs)")
    for name in spec.file_names:
        try:
            return LoadedLibrary(dlopen(ffi, name), name)
        except OSError as exc:
            if "No such file" not in str(exc):  # found by the loader but broken
                failures.append(f"{name}: {exc}")

    if failures:
        reason = f"{spec.label} was found but could not be loaded: " + "; ".join(failures)
    else:
        reason = f"{spec.label} not found (file names: {', '.join(spec.file_names)})"
    raise BackendUnavailableError(backend, reason, searched=searched)


def _load_exact(ffi, spec: LibrarySpec, backend: str, path: str) -> LoadedLibrary:
    searched = [f"${spec.env_var}={path}"]
    if os.path.isdir(path):
        raise BackendUnavailableError(
            backend, f"${spec.env_var} names {path}, which is a directory; name the library file in it "
            f"({' or '.join(spec.file_names)}) or unset it", searched=searched
        )
    if not os.path.isfile(path):
        raise BackendUnavailableError(
            backend, f"${spec.env_var} names {path}, which does not exist; fix or unset it", searched=searched
        )
    try:
        return LoadedLibrary(dlopen(ffi, path), path)
    except OSError as exc:
        raise BackendUnavailableError(
            backend, f"{spec.label} at {path} (from ${spec.env_var}) failed to load: {exc}", searched=searched
        ) from None
