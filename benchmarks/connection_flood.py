"""A flood of idle connections against ``anydev serve``, and the legitimate requests sent through it.

    python benchmarks/connection_flood.py --idle 21000 --requests 100 --out results/DIR/flood.json

Starts the server on 127.0.0.1 (cpu backend, its defaults), times a few requests alone, then opens
``--idle`` sockets as fast as it can (they send nothing; ``--flood-processes`` side by side) while
``--requests`` requests go out one every ``--interval`` seconds; it samples the server's open files
meanwhile. It prints each request's time beyond the median time alone and how many connects took a
second or more (a SYN the kernel dropped, sent again), the statuses, the most open files beside the
cap, the kernel's count of dropped connects and the load average. Bounded: the idle sockets and
requests are counted, and the whole run stops after ``--timeout`` seconds.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
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


def timed_request(port: int) -> tuple[int, float, float]:
    """One completion request on a new connection: (status, seconds in all, seconds to connect). A
    connect of a second or more is a SYN the kernel dropped and the client sent again."""
    body = json.dumps({"model": "anydev-demo", "prompt": "hi", "max_tokens": 4})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    connected = start
    try:
        conn.connect()
        connected = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        status = response.status
    except OSError:
        status = 0                      # refused or reset: counted as a failure
    finally:
        conn.close()
    end = time.perf_counter()
    return status, end - start, connected - start


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def listen_counters() -> dict[str, int] | None:
    """The kernel's counts of connects dropped at a listening socket (ListenOverflows: its accept
    queue was full; ListenDrops: those and any other drop), machine-wide: each costs its client a
    SYN retransmission, 1 s, then 3 s...; None where /proc/net/netstat does not say."""
    try:
        with open("/proc/net/netstat") as f:
            lines = [line.split() for line in f if line.startswith("TcpExt:")]
        counters = dict(zip(lines[0][1:], lines[1][1:]))
        return {name: int(counters[name]) for name in ("ListenOverflows", "ListenDrops")}
    except (OSError, IndexError, KeyError, ValueError):
        return None


def listening_sockets(port: int) -> int:
    """How many sockets listen on ``port`` (all of them the server's: it binds a free port)."""
    hex_port = f":{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                count += sum(1 for line in f if line.split()[1].endswith(hex_port) and line.split()[3] == "0A")
        except OSError:
            pass
    return count


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle", type=int, default=21000, help="idle sockets to open (default 21000)")
    p.add_argument("--requests", type=int, default=100, help="legitimate requests during the flood (default 100)")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between those requests (default 0.05)")
    p.add_argument("--timeout", type=float, default=300, help="the whole run's bound in seconds (default 300)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="the server's --max-connections (default: the server's own default)")
    p.add_argument("--api-server-count", type=int, default=1, help="the server's --api-server-count (default 1)")
    p.add_argument("--flood-processes", type=int, default=1,
                   help="processes opening the idle sockets side by side (default 1: one after another)")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    per_process = max(1, soft - 64)      # the flood is spread over processes that each stay inside the limit
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--port", str(port)]
    if args.max_connections is not None:
        command += ["--max-connections", str(args.max_connections)]
    if args.api_server_count != 1:
        command += ["--api-server-count", str(args.api_server_count)]
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
        alone = [timed_request(port)[1] for _ in range(10)]
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
            # --flood-processes at once, each opening its share; a share above the open-file limit
            # goes on in a further process once the first ones have opened theirs
            left = args.idle
            while left > 0 and time.monotonic() < deadline:
                share = min(per_process, -(-left // args.flood_processes))
                wave = []
                while left > 0 and len(wave) < args.flood_processes:
                    n = min(left, share)
                    wave.append(subprocess.Popen([sys.executable, "-c", FLOODER, str(port), str(n)],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
                    left -= n
                flooders.extend(wave)
                for child in wave:
                    opened[0] += int(child.stdout.readline() or 0)

        sampler = threading.Thread(target=sample, daemon=True)
        flooder = threading.Thread(target=flood, daemon=True)
        sampler.start()
        counters_before = listen_counters()
        load_before = os.getloadavg()[0]
        flood_start = time.perf_counter()
        flooder.start()
        with ThreadPoolExecutor(8) as pool:
            futures = []
            for _ in range(args.requests):
                futures.append(pool.submit(timed_request, port))
                time.sleep(args.interval)
            results = [f.result() for f in futures]
        flooder.join(max(0.0, deadline - time.monotonic()))
        flood_seconds = time.perf_counter() - flood_start
        stop.set()
        sampler.join()
        counters_after = listen_counters()
        extra = sorted(max(0.0, t - normal) for _, t, _ in results)
        connects = sorted(c for _, _, c in results)
        statuses = {str(code): sum(1 for c, _, _ in results if c == code) for code in sorted({c for c, _, _ in results})}
        figures = {"idle_sockets_opened": opened[0], "flood_seconds": round(flood_seconds, 2),
                   "requests": len(results), "statuses": statuses,
                   "alone_median_s": round(normal, 4),
                   "extra_wait_s": {"p50": round(extra[len(extra) // 2], 4),
                                    "p99": round(extra[min(len(extra) - 1, int(len(extra) * 0.99))], 4),
                                    "max": round(extra[-1], 4),
                                    "requests_over_2s": sum(1 for e in extra if e > 2.0)},
                   "connect_s": {"max": round(connects[-1], 4),
                                 "requests_resent_syn": sum(1 for c in connects if c >= 0.9)},
                   "server_open_files": {"before": base_files, "max": max(peak)},
                   "max_connections": args.max_connections, "flood_processes": args.flood_processes,
                   "listening_sockets": listening_sockets(port),
                   "listen_drops_machine_wide": (None if counters_before is None or counters_after is None else
                                                 {k: counters_after[k] - counters_before[k] for k in counters_after}),
                   "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
                   "open_file_limit": soft,
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
