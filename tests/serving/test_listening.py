"""The listening sockets (serving/listening.py): a burst of connects larger than one socket's accept
queue waits in the kernel whole, none of its SYNs dropped; a port that another server holds, even as
an SO_REUSEPORT group these sockets could join, is refused in one error."""
import socket

import pytest

from anydev.core.errors import EngineConfigError
from anydev.serving.listening import listening_sockets, spreads_connects

#: Each socket's accept queue in these tests (the kernel's default is 4096): small, so that a burst
#: of a few dozen connects overflows one socket's queue.
BACKLOG = 16


def accepted_at_once(listeners: list[socket.socket]) -> int:
    """Connections waiting in the listeners' accept queues now (no waiting for retransmitted SYNs)."""
    count = 0
    for listener in listeners:
        listener.setblocking(False)
        while True:
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                break
            sock.close()
            count += 1
    return count


@pytest.mark.skipif(not spreads_connects(), reason="the kernel spreads connects over sockets on Linux only")
def test_a_burst_beyond_one_accept_queue_waits_whole_in_the_sockets_queues():
    listeners = listening_sockets("127.0.0.1", 0, backlog=BACKLOG)
    port = listeners[0].getsockname()[1]
    burst = 3 * BACKLOG           # beyond one queue (BACKLOG + 1), far within all of them together
    clients = []
    try:
        assert len(listeners) > 1 and {s.getsockname()[1] for s in listeners} == {port}
        for _ in range(burst):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))   # on loopback the handshake is done as this returns
            clients.append(client)
        assert accepted_at_once(listeners) == burst
    finally:
        for sock in clients + listeners:
            sock.close()


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT on this platform")
def test_a_port_held_by_another_servers_reuseport_group_is_refused():
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        with pytest.raises(EngineConfigError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            listening_sockets("127.0.0.1", port, backlog=BACKLOG)


def test_a_free_port_is_found_and_shared_by_every_socket():
    listeners = listening_sockets("127.0.0.1", 0, backlog=BACKLOG)
    try:
        ports = {s.getsockname()[1] for s in listeners}
        assert len(ports) == 1 and ports != {0} and all(s.get_inheritable() for s in listeners)
        assert all(s.proto == socket.IPPROTO_TCP for s in listeners)     # what asyncio's TCP_NODELAY asks of accepts
    finally:
        for sock in listeners:
            sock.close()
