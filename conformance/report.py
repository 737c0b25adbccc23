"""The conformance report: one result per check, a JSON file and a Markdown matrix.

pytest reports each check in up to three phases (setup, call, teardown); :class:`ResultCollector`
folds them into one :class:`CheckResult`. It runs on the pytest controller, also under pytest-xdist,
and reads what the suite attached to each check as ``user_properties`` (backend, group, where it ran),
so it never needs the test items themselves.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

#: The check groups, in the order the matrix shows them (a test module ``test_<group>.py`` each).
GROUPS = ("contract", "devices", "memory", "streams_events", "collectives", "send_recv", "comm_abort", "processes",
          "graphs", "parallel_init", "inference", "kernels", "performance")

# user_properties keys the suite sets on each check.
BACKEND_KEY = "anydev_backend"
GROUP_KEY = "anydev_group"
HARDWARE_KEY = "anydev_hardware"
KIND_KEY = "anydev_kind"
RANKS_KEY = "anydev_ranks"  # the rank count the check ran at (absent: 1)
PERFORMANCE_KEY = "anydev_performance"  # a measurement of the performance row (performance.py)

#: What a check shows. Behaviour: what the backend does (counted in the matrix's groups). Contract
#: shape: a declaration, a signature, or anydev's own wrappers (argument checks, use after close),
#: which no backend can fail by behaving wrongly; reported in a column of its own.
BEHAVIOUR, CONTRACT_SHAPE = "behaviour", "contract shape"
#: A measurement for the performance row (``test_performance.py``): never pass/fail, in no verdict.
PERFORMANCE = "performance"
#: A backend's verdict: certified (no failure, at least one behaviour check passed), failed, or not
#: certified (nothing failed, but no behaviour check ran: every one skipped, e.g. no devices).
CERTIFIED, FAILED, NOT_CERTIFIED = "certified", "failed", "not certified"

#: How much of the kernels group's sweep ran (``--quick``: the interpreter-sized one). A quick
#: certificate says so in its verdict text: ``certified at 1 rank (quick sweep)``.
FULL_SWEEP, QUICK_SWEEP = "full", "quick"

PASS, FAIL, SKIP = "pass", "fail", "skip"
#: The check's process died while it ran (a segfault, an abort, a hang past the check time limit);
#: the rest of its group was skipped (``crashes.py``). Counts as a failure.
CRASHED = "crashed"
PENDING = "pending"  # seen, but its call phase has not reported yet
INCOMPLETE = "the check did not finish (session interrupted?)"


@dataclass
class CheckResult:
    """One check of one backend."""

    backend: str
    check: str  # the pytest node id
    group: str
    status: str  # "pass" | "fail" | "skip"
    reason: str  # why it failed or was skipped ("" for a pass)
    duration: float  # seconds, all phases
    hardware: str  # where it ran: the runtime's hardware_label, "unavailable" or "broken plugin"
    kind: str = BEHAVIOUR  # or CONTRACT_SHAPE
    ranks: int = 1  # the rank count it ran at


class ResultCollector:
    """Folds pytest's per-phase reports into one :class:`CheckResult` per check."""

    def __init__(self) -> None:
        self._results: dict[str, CheckResult] = {}
        self.crashes: list = []  # crashes.Crash, in the order they happened
        self.performance: dict[str, dict[str, dict]] = {}  # backend -> metric -> measurement (performance.py)

    def add_crash(self, crash) -> None:
        """The check ``crash.check`` lost its process (a :class:`~anydev.conformance.crashes.Crash`)."""
        self.crashes.append(crash)
        result = self._results.get(crash.check)
        if result is None:
            result = self._results[crash.check] = CheckResult(
                backend=crash.backend, check=crash.check, group=crash.group, status=PENDING, reason="",
                duration=0.0, hardware="",
            )
        result.status = CRASHED
        result.reason = f"crashed the process: {crash.describe()}; the rest of the group was skipped"

    def add(self, report) -> None:
        """Take one pytest ``TestReport``; reports of tests outside the suite are ignored."""
        props = dict(report.user_properties)
        if BACKEND_KEY not in props:
            return
        result = self._results.get(report.nodeid)
        if result is None:
            result = CheckResult(
                backend=props[BACKEND_KEY], check=report.nodeid, group=props.get(GROUP_KEY, "other"),
                status=PENDING, reason=INCOMPLETE, duration=0.0, hardware="",
            )
            self._results[report.nodeid] = result
        result.duration += report.duration
        for key, value in report.user_properties:
            if key == PERFORMANCE_KEY:
                self.performance.setdefault(result.backend, {})[value["metric"]] = value
        result.hardware = props.get(HARDWARE_KEY, result.hardware)
        result.kind = props.get(KIND_KEY, result.kind)
        result.ranks = int(props.get(RANKS_KEY, result.ranks))
        if result.status == CRASHED:  # xdist's own report of the crash: already recorded
            return
        if report.failed:
            if result.status != FAIL:  # the first failure is the cause; later ones follow from it
                result.status, result.reason = FAIL, failure_reason(report)
            else:  # e.g. a teardown that hung after the check itself failed: kept, after the cause
                result.reason += f"; then {failure_reason(report)}"
        elif report.skipped and result.status in (PENDING, PASS):
            result.status, result.reason = SKIP, skip_reason(report)
        elif report.passed and report.when == "call" and result.status == PENDING:
            result.status, result.reason = PASS, ""

    def results(self) -> list[CheckResult]:
        """Every check seen; one that never reported its call (an interrupted session) is a failure."""
        out = []
        for r in self._results.values():
            out.append(CheckResult(**{**asdict(r), "status": FAIL}) if r.status == PENDING else r)
        return sorted(out, key=lambda r: (r.backend, GROUP_ORDER.get(r.group, 99), r.check))


GROUP_ORDER = {group: i for i, group in enumerate(GROUPS)}


def skip_reason(report) -> str:
    """The text given to ``pytest.skip`` (pytest stores ``(path, line, "Skipped: text")``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _last_line(report.longreprtext)


def failure_reason(report) -> str:
    """The failing line's message (the exception type and text), else the report's last line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") if crash is not None else ""
    where = "" if report.when == "call" else f"[{report.when}] "
    return where + (message or _last_line(report.longreprtext))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ---- summary and rendering ---------------------------------------------------------------------

def summarise(results: list[CheckResult]) -> dict[str, dict[str, Counter]]:
    """``{backend: {group: Counter(pass=.., fail=.., skip=..)}}`` of the behaviour checks."""
    table: dict[str, dict[str, Counter]] = {}
    for r in results:
        if r.kind == BEHAVIOUR:
            table.setdefault(r.backend, {}).setdefault(r.group, Counter())[r.status] += 1
    return table


RAN = (PASS, FAIL, CRASHED)


def group_ranks(results: list[CheckResult]) -> dict[str, dict[str, list[int]]]:
    """``{backend: {group: [rank counts its checks ran at]}}`` (skipped checks ran at none)."""
    table: dict[str, dict[str, set[int]]] = {}
    for r in results:
        if r.status in RAN:
            table.setdefault(r.backend, {}).setdefault(r.group, set()).add(r.ranks)
    return {b: {g: sorted(n) for g, n in groups.items()} for b, groups in table.items()}


def certified_ranks(results: list[CheckResult], backend: str) -> int:
    """The most ranks at which a behaviour check of ``backend`` passed (0: none passed)."""
    return max((r.ranks for r in results if r.backend == backend and r.status == PASS and r.kind == BEHAVIOUR), default=0)


def verdict_text(results: list[CheckResult], backend: str, verdict: str, sweep: str = FULL_SWEEP) -> str:
    """``certified at 4 ranks``, ``certified at 1 rank (quick sweep)``; other verdicts as they are."""
    if verdict != CERTIFIED:
        return verdict
    n = certified_ranks(results, backend)
    return f"{CERTIFIED} at {n} rank{'s' if n != 1 else ''}" + (" (quick sweep)" if sweep == QUICK_SWEEP else "")


def verdicts(results: list[CheckResult]) -> dict[str, tuple[str, str]]:
    """``{backend: (verdict, reason)}``: a run in which no behaviour check ran certifies nothing."""
    out: dict[str, tuple[str, str]] = {}
    for backend in sorted({r.backend for r in results}):
        mine = [r for r in results if r.backend == backend and r.kind != PERFORMANCE]
        failed = [r for r in mine if r.status == FAIL]
        crashed = [r for r in mine if r.status == CRASHED]
        passed = [r for r in mine if r.status == PASS and r.kind == BEHAVIOUR]
        if crashed:
            groups = ", ".join(f"{r.group} ({r.check.rsplit('::', 1)[-1]})" for r in crashed)
            out[backend] = (FAILED, f"{len(crashed)} group(s) crashed: {groups}" + (f"; {len(failed)} check(s) failed" if failed else ""))
        elif failed:
            out[backend] = (FAILED, f"{len(failed)} check(s) failed")
        elif passed:
            out[backend] = (CERTIFIED, f"{len(passed)} behaviour checks passed")
        else:
            skips = Counter(r.reason for r in mine if r.status == SKIP)
            why = skips.most_common(1)[0][0] if skips else "no check of it was selected"
            out[backend] = (NOT_CERTIFIED, f"no behaviour check ran: {why}")
    return out


def hardware_labels(results: list[CheckResult]) -> dict[str, str]:
    """Where each backend ran, from its checks (one label per backend)."""
    labels: dict[str, str] = {}
    for r in results:
        if r.hardware and labels.get(r.backend) in (None, "", "unavailable"):
            labels[r.backend] = r.hardware
    return labels


def matrix_cell(checks: list[CheckResult], width: int = 60) -> str:
    """One cell: "12/12 pass", "3 fail, 9/12 pass", "skip: <reason>", "10/12 pass, 2 skip"; with the
    rank counts its checks ran at when any ran at more than one: "12/12 pass at 1,2,3,4 ranks"."""
    if not checks:
        return "-"
    counts = Counter(r.status for r in checks)
    total = len(checks)
    if counts[SKIP] == total:
        reason = Counter(r.reason for r in checks).most_common(1)[0][0]
        return _cell_text(f"skip: {reason}", width)
    parts = []
    if counts[CRASHED]:
        parts.append("crashed")
    if counts[FAIL]:
        parts.append(f"{counts[FAIL]} fail")
    parts.append(f"{counts[PASS]}/{total} pass")
    if counts[SKIP]:
        parts.append(f"{counts[SKIP]} skip")
    ranks = sorted({r.ranks for r in checks if r.status in RAN})
    return ", ".join(parts) + (f" at {','.join(map(str, ranks))} ranks" if ranks and ranks != [1] else "")


def _cell_text(text: str, width: int) -> str:
    """``text`` on one line within ``width``: whole, else its leading clauses up to a "; " when they
    fit (a reason written "why; details" keeps its why whole), else cut with "..."."""
    text = " ".join(text.split()).replace("|", "/")
    if len(text) <= width:
        return text
    clause = text.rfind("; ", 0, width + 1)
    return text[:clause] if clause > 0 else text[: width - 3] + "..."


def markdown_matrix(results: list[CheckResult], sweep: str = FULL_SWEEP) -> str:
    """Backend × check group (behaviour checks), with where each backend ran, its verdict and its
    contract-shape checks apart; groups with no behaviour check are left out.

    Cells that are all skips show their reason shortened; the full reasons follow the table.
    """
    behaviour = [r for r in results if r.kind == BEHAVIOUR]
    groups = [g for g in GROUPS if any(r.group == g for r in behaviour)]
    groups += sorted({r.group for r in behaviour} - set(groups))
    labels = hardware_labels(results)
    verdict = verdicts(results)
    lines = [
        "| backend | where it ran | verdict | " + " | ".join(groups) + " | contract shape |",
        "|---|---|---|" + "---|" * (len(groups) + 1),
    ]
    skip_reasons: dict[tuple[str, str], None] = {}
    for backend in sorted({r.backend for r in results}):
        cells = []
        for group in groups:
            checks = [r for r in behaviour if r.backend == backend and r.group == group]
            cells.append(matrix_cell(checks))
            if checks and all(r.status == SKIP for r in checks):
                skip_reasons[(backend, Counter(r.reason for r in checks).most_common(1)[0][0])] = None
        cells.append(matrix_cell([r for r in results if r.backend == backend and r.kind == CONTRACT_SHAPE]))
        shown = verdict_text(results, backend, verdict[backend][0], sweep)
        lines.append(f"| {backend} | {labels.get(backend) or '-'} | {shown} | " + " | ".join(cells) + " |")
    crashed = [r for r in results if r.status == CRASHED]
    if crashed:
        lines += ["", "Crashed groups (the process died; the group's later checks were skipped):"]
        lines += [f"- {r.backend} {r.group}: {r.reason.split(';')[0].removeprefix('crashed the process: ')}, "
                  f"in the last check started, {r.check}" for r in crashed]
    uncertified = [(b, why) for b, (v, why) in verdict.items() if v == NOT_CERTIFIED]
    if uncertified:
        lines += ["", "Not certified:"] + [f"- {backend}: {why}" for backend, why in uncertified]
    if skip_reasons:
        lines += ["", "Skipped groups:"] + [f"- {backend}: {reason}" for backend, reason in skip_reasons]
    return "\n".join(lines) + "\n"


def failure_lines(results: list[CheckResult], limit: int = 30) -> list[str]:
    """One line per failed check (the matrix says how many; this says which and why)."""
    failed = [r for r in results if r.status in (FAIL, CRASHED)]
    lines = [f"{r.status.upper()} {r.check}: {_cell_text(r.reason, 200)}" for r in failed[:limit]]
    if len(failed) > limit:
        lines.append(f"... and {len(failed) - limit} more failures (see the JSON report)")
    return lines


def contract_line(meta: dict) -> str:
    """"contract: anydev 1.2; declared by the plugins: cpu 1.2, xyz 1.0; ranks: cpu 4, xyz 2"."""
    declared = ", ".join(f"{name} {major}.{minor}" for name, (major, minor) in meta["plugin_contract_versions"].items())
    ranks = ", ".join(f"{name} {n}" for name, n in meta["tp"].items())
    major, minor = meta["contract_version"]
    return f"contract: anydev {major}.{minor}; declared by the plugins: {declared or '-'}; ranks (tp): {ranks}"


def matrix_path(path: str | Path) -> Path:
    """Where the Markdown matrix of the JSON report ``path`` goes (``report.json`` → ``report.md``)."""
    path = Path(path)
    return path.with_suffix(".md") if path.suffix != ".md" else path.with_name(path.name + ".md")


def check_writable(path: str | Path) -> None:
    """Raise OSError now when the report ``path`` or its matrix could not be written later (the
    folders are made; no file is left behind)."""
    for target in (Path(path), matrix_path(path)):
        target.parent.mkdir(parents=True, exist_ok=True)
        existed = target.exists()
        with open(target, "a"):
            pass
        if not existed:
            target.unlink()


def write_report(path: str | Path, results: list[CheckResult], meta: dict, crashes=(), sweep: str = FULL_SWEEP,
                 performance: dict | None = None) -> tuple[Path, Path]:
    """Write ``path`` (JSON) and the matrix next to it (``report.json`` → ``report.md``); return both."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        backend: {group: dict(counts) for group, counts in groups.items()}
        for backend, groups in summarise(results).items()
    }
    document = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **meta,
        "hardware": hardware_labels(results),
        "summary": summary,
        "contract_shape": {
            backend: dict(Counter(r.status for r in results if r.backend == backend and r.kind == CONTRACT_SHAPE))
            for backend in sorted({r.backend for r in results})
        },
        "crashes": [asdict(c) for c in crashes],
        "ranks": group_ranks(results),
        "verdicts": {
            backend: {"verdict": v, "reason": why, "text": verdict_text(results, backend, v, sweep),
                      "ranks": certified_ranks(results, backend) if v == CERTIFIED else None}
            for backend, (v, why) in verdicts(results).items()
        },
        "performance": performance or {},
        "checks": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    md_path = matrix_path(path)
    header = f"# anydev conformance matrix\n\n{document['created']}, command: `{meta.get('command', '')}`\n\n"
    if "plugin_contract_versions" in meta:  # anydev's contract and each plugin's declared one, and the ranks
        header += contract_line(meta) + "\n\n"
    from .performance import performance_table

    md_path.write_text(header + markdown_matrix(results, sweep) + performance_table(performance or {}))
    return path, md_path
