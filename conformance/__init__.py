"""anydev's conformance suite: one set of checks, instantiated for every backend.

Run it as ``python -m anydev.conformance --device NAME [--tp N] [--report FILE] [-n K]`` or as a
pytest plugin: ``pytest --pyargs anydev.conformance --device NAME``. Check groups (one test module
each): contract, memory, streams and events, collectives, parallel init, inference. ``report.py``
turns the results into a JSON report and a backend × group Markdown matrix.
"""
