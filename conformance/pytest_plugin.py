"""pytest plugin of the conformance suite: its command-line options and its report.

pytest loads this module in every session of an environment where anydev is installed (pytest11 entry
point), so it imports nothing heavy and acts only on the suite's own checks: those carry the
``anydev_backend`` user property (set in ``conftest.py``). A session that collects no conformance
check prints nothing and writes nothing.

Options (the long ``--anydev-*`` spellings are aliases):

* ``--device NAME[,NAME]`` (repeatable), ``all`` for every registered backend, available or not;
  default ``$ANYDEV_DEVICE`` or ``cpu``.
* ``--tp N``: the largest rank count of the collective, parallel-init and inference checks
  (default: the backend's device count).
* ``--report FILE``: write the JSON report to FILE and the Markdown matrix next to it (FILE.md).
* ``--quick``: the kernels group runs its quick sweep (a few shapes, short contexts: what Triton's
  interpreter can run in CI) instead of the full one; every verdict then says "(quick sweep)" and the
  JSON report's ``sweep`` is ``"quick"``, so a quick certificate never reads like a full one.

A run in which nothing ran is not a pass. Each backend gets a verdict: *certified* (nothing failed and
at least one behaviour check passed), *failed*, or *not certified* (no behaviour check ran: all
skipped, e.g. no devices). A backend asked for by name (``--device NAME``, or the default) that is not
certified fails the run; with ``--device all`` (every registered backend, as CI runs it on machines
without most hardware) unavailable backends are listed as not certified, with the reason, without
failing the run. Contract-shape checks (marked ``contract_shape``) are counted apart.
* ``--anydev-mutant NAMES``: register deliberately broken backends (``conformance/mutants/``) as
  ``mutant-NAME``, for ``--device mutant-NAME`` (``python -m anydev.conformance.mutants`` does this).
* ``--anydev-emulated moore,metax``: build the emulated vendor runtimes with gcc before the session and
  point the moore and metax plugins at them, so their code runs on a machine without the cards.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile

import pytest

from .performance import performance_table
from .report import (
    GROUPS, NOT_CERTIFIED, ResultCollector, check_writable, contract_line, failure_lines, markdown_matrix, verdicts, write_report,
)

EMULATED_VENDORS = ("moore", "metax")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("anydev", "anydev conformance suite (python -m anydev.conformance)")
    group.addoption(
        "--device", "--anydev-device", dest="anydev_device", action="append", default=None, metavar="NAME",
        help="backend(s) to certify: a name, a comma list, or 'all' (default: $ANYDEV_DEVICE or cpu)",
    )
    group.addoption(
        "--tp", "--anydev-tp", dest="anydev_tp", type=int, default=None, metavar="N",
        help="largest rank count of the collective/parallel-init/inference checks (default: the backend's device count)",
    )
    group.addoption(
        "--report", "--anydev-report", dest="anydev_report", default=None, metavar="FILE",
        help="write the conformance report as JSON to FILE and the Markdown matrix next to it",
    )
    group.addoption(
        "--quick", "--anydev-quick", dest="anydev_quick", action="store_true", default=False,
        help="the kernels group's quick sweep (for Triton's interpreter in CI); verdicts say '(quick sweep)'",
    )
    group.addoption(
        "--anydev-mutant", dest="anydev_mutant", default=None, metavar="NAMES",
        help="register deliberately broken backends (comma list of mutant names) as mutant-NAME "
        "(python -m anydev.conformance.mutants runs the suite on each)",
    )
    group.addoption(
        "--anydev-emulated", dest="anydev_emulated", default=None, metavar="VENDORS",
        help="build emulated vendor runtimes (comma list of: moore, metax) and load the real plugins on them",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "contract_shape: the check inspects a declaration or signature, or anydev's own wrappers, "
        "which no backend can fail by behaving wrongly; reported apart from the behaviour checks",
    )
    config.addinivalue_line(
        "markers", "performance: the check measures a bandwidth for the report's performance row; never "
        "a pass/fail criterion, and counted in no verdict",
    )
    tp = config.getoption("anydev_tp")
    if tp is not None and tp < 1:
        raise _usage_error(f"--tp must be at least 1, got {tp}")
    mutants = config.getoption("anydev_mutant")
    if mutants:  # in every process (xdist workers too): each has its own registry
        from .mutants import register_backends

        try:
            register_backends([m.strip() for m in mutants.split(",") if m.strip()])
        except KeyError as exc:
            raise _usage_error(f"--anydev-mutant: {exc.args[0]}") from None
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports, and set up the env
        return
    _set_up_crash_folder(config)
    _allow_a_crash_per_group(config)
    report = config.getoption("anydev_report")
    if report:   # checked before the run, not found unwritable after it
        try:
            check_writable(report)
        except OSError as exc:
            raise _usage_error(f"--report {report}: cannot be written ({exc.strerror or exc}: "
                               f"{exc.filename or report}); choose another file") from None
    emulated = _set_up_emulation(config)
    config.pluginmanager.register(ConformanceReporter(config, emulated), "anydev-conformance-reporter")


def _set_up_crash_folder(config) -> None:
    """The folder the controller and its xdist workers share for crash logs (``crashes.py``)."""
    from .crashes import CRASH_DIR_ENV

    folder = tempfile.mkdtemp(prefix="anydev-crashes-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    os.environ[CRASH_DIR_ENV] = folder


def _allow_a_crash_per_group(config) -> None:
    """pytest-xdist ends the session after 4 crashed workers per worker (``--max-worker-restart``
    unset); the suite skips a group after its first crash, so a crash per group and backend is
    allowed on top of that, and a backend that crashes in every group still gets every group run."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or not workers or getattr(config.option, "maxworkerrestart", "") is not None:
        return
    names = [n.strip() for item in config.getoption("anydev_device") or ["cpu"] for n in item.split(",") if n.strip()]
    if "all" in names:
        from anydev.plugin_api import get_registry

        names = get_registry().names()
    config.option.maxworkerrestart = str(4 * int(workers) + len(GROUPS) * len(names))


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler set-up, which it replaces
def pytest_sessionstart(session) -> None:
    """In an xdist worker of the suite: faulthandler writes this worker's crash log."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        from .crashes import start_worker_log

        start_worker_log(workerinput["workerid"])


def _set_up_emulation(config) -> dict[str, dict[str, str]]:
    """Build the requested emulated runtimes in a temporary folder (removed when the session ends)
    and export their env vars, which xdist workers inherit."""
    option = config.getoption("anydev_emulated")
    if not option:
        return {}
    vendors = [v.strip() for v in option.split(",") if v.strip()]
    unknown = sorted(set(vendors) - set(EMULATED_VENDORS))
    if unknown:
        raise _usage_error(f"--anydev-emulated: no emulated runtime for {', '.join(unknown)}; choose from {', '.join(EMULATED_VENDORS)}")
    from .emulated import build_emulated_runtime

    out_dir = tempfile.mkdtemp(prefix="anydev-emulated-")
    config.add_cleanup(lambda: shutil.rmtree(out_dir))
    exported = {}
    for vendor in vendors:
        env = build_emulated_runtime(vendor, os.path.join(out_dir, vendor))
        os.environ.update(env)
        exported[vendor] = env
    return exported


def explicitly_requested(config) -> set[str]:
    """Backends asked for by name (``--device NAME``, or ``$ANYDEV_DEVICE``/cpu by default), not
    through ``all``."""
    from .support import requested_names

    return set(requested_names(config)) - {"all"}


def _usage_error(message: str):
    import pytest

    return pytest.UsageError(message)


class ConformanceReporter:
    """Collects the suite's results on the controller; prints the matrix and writes the report."""

    def __init__(self, config, emulated: dict):
        self.config = config
        self.emulated = emulated
        self.collector = ResultCollector()
        self.uncertified: list[str] = []  # backends named explicitly that certified nothing

    def pytest_runtest_logreport(self, report) -> None:
        self.collector.add(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched) -> None:
        """pytest-xdist: the worker running ``crashitem`` died. Its check group is marked crashed
        (the workers skip the rest of it) and the report says with which signal, where."""
        from .crashes import backend_of, group_of, mark_crashed, read_crash
        from .support import selected_backends

        backend = backend_of(crashitem, selected_backends(self.config))
        if backend is None:  # not one of the suite's checks
            return
        crash = read_crash(backend, group_of(crashitem), crashitem, report.node.gateway.id)
        mark_crashed(crash)
        self.collector.add_crash(crash)

    def pytest_sessionfinish(self, session) -> None:
        """A backend named with ``--device`` (or by default) that certified nothing fails the run;
        ``--device all`` lists unavailable backends as not certified without failing the run."""
        named = explicitly_requested(self.config)
        for backend, (verdict, why) in verdicts(self.collector.results()).items():
            if verdict == NOT_CERTIFIED and backend in named:
                self.uncertified.append(f"backend '{backend}' is not certified: {why}")
        if self.uncertified and session.exitstatus == 0:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        results = self.collector.results()
        if not results:
            return
        sweep = self._sweep()
        terminalreporter.write_sep("=", "anydev conformance matrix")
        terminalreporter.write(markdown_matrix(results, sweep))
        terminalreporter.write(performance_table(self.collector.performance))
        failures = failure_lines(results)
        for line in failures:
            terminalreporter.write_line(line)
        if failures and self.config.getoption("tbstyle") == "no":
            terminalreporter.write_line("(tracebacks are off: add -- --tb=short to see them, and -k NAME for one check)")
        for line in self.uncertified:
            terminalreporter.write_line(f"NOT CERTIFIED (fails the run: it was asked for by name): {line}")
        backends = sorted({r.backend for r in results})
        meta = self._meta(backends)
        terminalreporter.write_line(contract_line(meta))
        path = self.config.getoption("anydev_report")
        if path:
            json_path, md_path = write_report(path, results, meta, self.collector.crashes, sweep,
                                              self.collector.performance)
            terminalreporter.write_line(f"conformance report: {json_path} (matrix: {md_path})")

    def _sweep(self) -> str:
        from .report import FULL_SWEEP, QUICK_SWEEP

        return QUICK_SWEEP if self.config.getoption("anydev_quick") else FULL_SWEEP

    def _meta(self, backends: list[str]) -> dict:
        """``contract_version`` is anydev's; ``plugin_contract_versions`` what each plugin declares
        (absent for a broken one); ``tp`` the largest rank count each backend's checks used."""
        from anydev.plugin_api import CONTRACT_VERSION, get_registry

        from .support import rank_limit

        plugins = get_registry().plugins
        return {
            "command": _command_line(),
            "pytest_args": [str(a) for a in self.config.invocation_params.args],
            "host": platform.node(),
            "python": platform.python_version(),
            "contract_version": list(CONTRACT_VERSION),
            "plugin_contract_versions": {name: list(plugins[name].contract_version) for name in backends if name in plugins},
            "devices": self.config.getoption("anydev_device") or [],
            "tp": {name: rank_limit(self.config, name) for name in backends},
            "emulated": self.emulated,
            "sweep": self._sweep(),
        }


def _command_line() -> str:
    """What the user ran, as they would type it."""
    program = sys.argv[0]
    if program.endswith(os.path.join("conformance", "__main__.py")):
        program = "python -m anydev.conformance"
    elif program.endswith(os.path.join("pytest", "__main__.py")):
        program = "python -m pytest"
    else:
        program = os.path.basename(program)
    return " ".join([program, *sys.argv[1:]])
