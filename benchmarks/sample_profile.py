"""Where a Python program's host time goes, over all its threads (cProfile sees only the main one):
a sampler thread reads every thread's stack every --interval seconds and, at exit, prints per thread
the functions most often on top of the stack (self) and anywhere on it (inclusive).

    python benchmarks/sample_profile.py [--interval 0.001] [--top 25] SCRIPT ARGS...

Samples are taken when the sampler gets the GIL, so a thread that holds it long (a C call without
release) is seen at the end of that call: read the shares, not the absolute rates.
"""
from __future__ import annotations

import argparse
import atexit
import collections
import runpy
import sys
import threading
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--interval", type=float, default=0.001)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    own = collections.defaultdict(collections.Counter)
    inclusive = collections.defaultdict(collections.Counter)
    samples = collections.Counter()
    done = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        while not done.wait(a.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                thread = names.get(ident, str(ident))
                samples[thread] += 1
                own[thread][_where(frame)] += 1
                seen = set()
                while frame is not None:
                    where = _where(frame)
                    if where not in seen:
                        seen.add(where)
                        inclusive[thread][where] += 1
                    frame = frame.f_back

    def report() -> None:
        done.set()
        for thread, total in samples.most_common():
            if total < 20:
                continue
            print(f"\n== thread {thread}: {total} samples")
            for title, table in (("self", own[thread]), ("inclusive", inclusive[thread])):
                print(f"  -- {title}")
                for where, n in table.most_common(a.top):
                    print(f"  {100 * n / total:5.1f}%  {where}")

    threading.Thread(target=sample, name="sampler", daemon=True).start()
    atexit.register(report)
    sys.argv = [a.script, *a.args]
    started = time.perf_counter()
    try:
        runpy.run_path(a.script, run_name="__main__")
    finally:
        print(f"\nsample_profile: {time.perf_counter() - started:.1f} s of {a.script}")


def _where(frame) -> str:
    code = frame.f_code
    return f"{code.co_name} ({code.co_filename.rsplit('/', 2)[-2:][-1]}:{code.co_firstlineno})"


if __name__ == "__main__":
    main()
