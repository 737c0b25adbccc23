"""The listening sockets of ``anydev serve``: one port, several sockets where the kernel spreads the
connects over them (Linux's SO_REUSEPORT), each with an accept queue of its own.

A connect waits in its listening socket's accept queue until the server accepts it; the queue holds
at most ``net.core.somaxconn`` (4096 by default) and, once full, the kernel drops the SYNs that
come: each dropped client retries after 1 s, then 3 s, 7 s... A flood of idle connects (a client
on the same cores as the server's one accept loop) fills one queue faster than that loop drains
it, and its dropped SYNs come back in waves on the very schedule of a legitimate client's retries,
which then meet a full queue again. Several sockets give the kernel room for a burst of
:data:`QUEUED_CONNECTIONS` without a sysctl: none of its SYNs is dropped, and the accept loop
drains the queues at its pace (serving/accepting.py).
"""
from __future__ import annotations

import errno
import math
import socket
import sys

from anydev.core.errors import EngineConfigError

#: Connections the listening sockets' accept queues hold together, at least, where the kernel spreads
#: connects over several sockets: a burst of idle connects several times the default connection cap.
QUEUED_CONNECTIONS = 32768
#: The most listening sockets one port gets.
MAX_SOCKETS = 16
#: Asked of listen(); the kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 65535
#: A listening socket's accept queue where the kernel's limit cannot be read.
DEFAULT_SOMAXCONN = 4096


def spreads_connects() -> bool:
    """Whether the kernel spreads the connects to one port over several SO_REUSEPORT sockets (Linux;
    elsewhere the option lets the last socket bound take them all)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def somaxconn() -> int:
    """The kernel's cap on a listening socket's accept queue (``net.core.somaxconn``)."""
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return DEFAULT_SOMAXCONN


def socket_count(queue_per_socket: int) -> int:
    """How many listening sockets hold :data:`QUEUED_CONNECTIONS` at ``queue_per_socket`` each."""
    if not spreads_connects():
        return 1
    return max(1, min(MAX_SOCKETS, math.ceil(QUEUED_CONNECTIONS / queue_per_socket)))


def listening_sockets(host: str, port: int, backlog: int | None = None) -> list[socket.socket]:
    """Listen on ``host``:``port`` (0: a free port) with as many sockets as :func:`socket_count` says,
    inheritable (the front-end processes share them). ``backlog``: each socket's accept queue
    (default: the kernel's limit). A port that another socket holds is an :class:`EngineConfigError`,
    also when that is another server's SO_REUSEPORT group, which the kernel would let these sockets
    join: a plain socket, which no such group admits, is bound to the port first and closed just
    before the group binds it."""
    queue = backlog if backlog is not None else somaxconn()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with _bound(family, host, port, reuse_port=False) as probe:
        port = probe.getsockname()[1]
    count = socket_count(queue)
    sockets = []
    try:
        for _ in range(count):
            sock = _bound(family, host, port, reuse_port=count > 1)
            sockets.append(sock)
            sock.listen(backlog if backlog is not None else LISTEN_BACKLOG)
            sock.set_inheritable(True)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bound(family: int, host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)   # TCP by number: accepts inherit it (asyncio's TCP_NODELAY)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = "; another server holds it: stop it or pick another --port" if exc.errno == errno.EADDRINUSE else ""
        raise EngineConfigError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from exc
    return sock
