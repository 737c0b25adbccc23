"""A flood of idle connections against ``anydev serve``, and the legitimate requests sent through it.

    python benchmarks/connection_flood.py --idle 21000 --requests 100 --out results/DIR/flood.json

Starts the server on 127.0.0.1 (cpu backend, its defaults), times a few requests alone, then opens
``--idle`` sockets as fast as it can (they send nothing) while ``--requests`` requests go out one
every ``--interval`` seconds; it samples the server's open files meanwhile. It prints each request's
time beyond the median time alone, the statuses, and the most open files beside the cap. Bounded:
the idle sockets and requests are counted, and the whole run stops after ``--timeout`` seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


#: One flooding process: opens N sockets to the port as fast as it can, sending nothing, prints how
#: many it opened, and holds them until its standard input closes.
FLOODER = """
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_request(url: str) -> tuple[int, float]:
    body = json.dumps({"model": "anydev-demo", "prompt": "hi", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"content-type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0                      # refused or reset: counted as a failure
    return status, time.perf_counter() - start


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped because a listen queue was full (each costs its
    client a SYN retransmission: 1 s, then 3 s...); None where /proc/net/netstat does not say."""
    try:
        with open("/proc/net/netstat") as f:
            lines = [line.split() for line in f if line.startswith("TcpExt:")]
        return int(dict(zip(lines[0][1:], lines[1][1:]))["ListenOverflows"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle", type=int, default=21000, help="idle sockets to open (default 21000)")
    p.add_argument("--requests", type=int, default=100, help="legitimate requests during the flood (default 100)")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between those requests (default 0.05)")
    p.add_argument("--timeout", type=float, default=300, help="the whole run's bound in seconds (default 300)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="the server's --max-connections (default: the server's own default)")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    per_process = max(1, soft - 64)      # the flood is spread over processes that each stay inside the limit
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--port", str(port)]
    if args.max_connections is not None:
        command += ["--max-connections", str(args.max_connections)]
    server = subprocess.Popen(command,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + args.timeout
    flooders: list[subprocess.Popen] = []
    opened = [0]
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("error: the server did not become healthy")
            time.sleep(0.2)
        alone = [timed_request(url)[1] for _ in range(10)]
        normal = statistics.median(alone)
        base_files = open_files(server.pid)
        peak = [base_files]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    peak.append(open_files(server.pid))
                except OSError:
                    return
                time.sleep(0.05)

        def flood():
            left = args.idle
            while left > 0 and time.monotonic() < deadline:
                n = min(left, per_process)
                child = subprocess.Popen([sys.executable, "-c", FLOODER, str(port), str(n)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                flooders.append(child)
                opened[0] += int(child.stdout.readline() or 0)
                left -= n

        sampler = threading.Thread(target=sample, daemon=True)
        flooder = threading.Thread(target=flood, daemon=True)
        sampler.start()
        overflows_before = listen_overflows()
        flood_start = time.perf_counter()
        flooder.start()
        with ThreadPoolExecutor(8) as pool:
            futures = []
            for _ in range(args.requests):
                futures.append(pool.submit(timed_request, url))
                time.sleep(args.interval)
            results = [f.result() for f in futures]
        flooder.join(max(0.0, deadline - time.monotonic()))
        flood_seconds = time.perf_counter() - flood_start
        stop.set()
        sampler.join()
        overflows_after = listen_overflows()
        extra = sorted(max(0.0, t - normal) for _, t in results)
        statuses = {str(code): sum(1 for c, _ in results if c == code) for code in sorted({c for c, _ in results})}
        figures = {"idle_sockets_opened": opened[0], "flood_seconds": round(flood_seconds, 2),
                   "requests": len(results), "statuses": statuses,
                   "alone_median_s": round(normal, 4),
                   "extra_wait_s": {"p50": round(extra[len(extra) // 2], 4),
                                    "p99": round(extra[min(len(extra) - 1, int(len(extra) * 0.99))], 4),
                                    "max": round(extra[-1], 4),
                                    "requests_over_2s": sum(1 for e in extra if e > 2.0)},
                   "server_open_files": {"before": base_files, "max": max(peak)},
                   "max_connections": args.max_connections,
                   "listen_overflows": (None if overflows_before is None or overflows_after is None
                                        else overflows_after - overflows_before),
                   "command": " ".join(sys.argv)}
        print(json.dumps(figures, indent=2))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(figures, f, indent=2)
        return 0 if statuses == {"200": len(results)} else 1
    finally:
        for child in flooders:
            child.stdin.close()           # the flooder closes its sockets and exits
            child.wait(60)
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
