"""The start-up timeline's one-line form: what ``anydev serve`` prints for its engine core and what
benchmarks/startup_bench.py reads back."""
from __future__ import annotations

import pytest

from anydev.core.process_timeline import PROCESS_PHASES, ProcessTimeline, parse_phases_line, phases_line


def test_a_phases_line_reads_back_as_the_phases_of_5_ms_or_more():
    phases = {"interpreter": 0.4123, "imports": 3.1, "checkpoint + tokenizer": 0.004, "kernels load": 1.057,
              "graph capture": 12.25}
    line = phases_line(phases)
    assert line == "interpreter 0.41 s, imports 3.10 s, kernels load 1.06 s, graph capture 12.25 s"
    assert parse_phases_line(line) == {"interpreter": 0.41, "imports": 3.1, "kernels load": 1.06, "graph capture": 12.25}


def test_a_phase_of_another_name_is_refused():
    with pytest.raises(ValueError, match="warming up"):
        parse_phases_line("imports 3.10 s, warming up 2.00 s")


def test_a_timeline_started_at_a_given_time_counts_its_first_phase_from_there():
    import time

    timeline = ProcessTimeline(started=time.time() - 2.0)
    timeline.mark("imports")
    phases = timeline.to_json()["phases"]
    assert tuple(phases) == PROCESS_PHASES
    assert 1.9 < phases["interpreter"] < 60 and phases["imports"] >= 0
