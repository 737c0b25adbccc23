"""The accept path (serving/accepting.py) on a real event loop and loopback sockets: every accepted
socket counted at once, the oldest bare one closed to make room, a socket's first bytes reaching its
protocol whole, a silent one closed after the first-request timeout, all bare ones closed with it;
a socket whose request is in when it is accepted never pushed out by the accepts after it; a handed
socket's writes not held back by Nagle."""
import asyncio
import select
import socket

import pytest

from anydev.serving.accepting import GatedAcceptor
from anydev.serving.connection import ConnectionGate
from anydev.serving.listening import listening_sockets, spreads_connects


class Recorder(asyncio.Protocol):
    def __init__(self, gate):
        self.gate, self.data, self.transport = gate, b"", None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def connection_lost(self, exc):
        self.gate.closed(self)


def closed_by_server(sock: socket.socket) -> bool:
    """The server has ended it (a reset or an end on loopback arrives as the server closes)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except BlockingIOError:
        return False


async def accepting(cap: int, timeout: float, scenario):
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    drops, protocols = [], []
    gate = ConnectionGate(cap, drops.append)

    def factory():
        protocols.append(Recorder(gate))
        return protocols[-1]

    acceptor = GatedAcceptor(loop, [listener], factory, gate, timeout, drops.append)
    acceptor.start()
    clients = []

    def connect():
        sock = socket.create_connection(listener.getsockname())
        clients.append(sock)
        return sock

    try:
        return await scenario(connect, gate, acceptor, drops, protocols)
    finally:
        acceptor.close()
        for sock in clients:
            sock.close()


async def until(predicate, seconds=10.0):
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


@pytest.fixture(params=["epoll", "selector"])
def waiting_set(request, monkeypatch):
    """Both ways the bare sockets wait: epoll (Linux) and the platform's selector (elsewhere)."""
    if request.param == "epoll" and not hasattr(select, "epoll"):
        pytest.skip("no epoll on this platform")
    if request.param == "selector":
        monkeypatch.delattr(select, "epoll", raising=False)
    return request.param


def test_past_the_cap_the_oldest_idle_sockets_are_closed_and_a_talking_one_gets_its_protocol(waiting_set):
    async def scenario(connect, gate, acceptor, drops, protocols):
        idle = [connect() for _ in range(10)]
        assert await until(lambda: drops.count("evicted_idle") == 7)
        assert gate.open_count == 3 and protocols == []            # no protocol for a silent socket
        talking = connect()
        talking.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert await until(lambda: protocols and protocols[0].data == b"GET / HTTP/1.1\r\n\r\n")
        await asyncio.sleep(0.05)
        return [closed_by_server(s) for s in idle], gate.open_count, drops.count("evicted_idle")

    closed, open_count, evicted = asyncio.run(accepting(3, 30, scenario))
    assert open_count == 3 and evicted == 8                        # the talker took the oldest idle place
    assert closed == [True] * 8 + [False] * 2


def test_a_silent_socket_is_closed_after_the_first_request_timeout_and_close_ends_the_rest(waiting_set):
    async def scenario(connect, gate, acceptor, drops, protocols):
        first = connect()
        assert await until(lambda: drops == ["first_request_timeout"], seconds=10)
        first.settimeout(10)
        assert gate.open_count == 0 and first.recv(1) == b""    # an end, not a reset: the server closed it
        acceptor.first_request_timeout = 60        # the next one is ended by close(), not by the timeout
        second = connect()
        assert await until(lambda: gate.open_count == 1)
        acceptor.close()
        await asyncio.sleep(0.05)
        return closed_by_server(second), gate.open_count, drops

    second_closed, open_count, drops = asyncio.run(accepting(4, 0.3, scenario))
    assert open_count == 0 and second_closed and drops == ["first_request_timeout"]


def queued_then_accepted(listeners, idle_count: int, cap: int):
    """A connection that has sent its request, then ``idle_count`` silent ones, all waiting in the
    kernel's queues before the acceptor starts; then accepted under a gate of ``cap``. Returns the
    protocols built, whether the talking one was closed by the server, and the gate's open count."""
    async def main():
        loop = asyncio.get_running_loop()
        address = listeners[0].getsockname()
        talker = socket.create_connection(address)
        talker.sendall(b"GET / HTTP/1.1\r\n\r\n")
        idle = [socket.create_connection(address) for _ in range(idle_count)]
        drops, protocols = [], []
        gate = ConnectionGate(cap, drops.append)

        def factory():
            protocols.append(Recorder(gate))
            return protocols[-1]

        acceptor = GatedAcceptor(loop, listeners, factory, gate, 30, drops.append)
        acceptor.start()
        try:
            await until(lambda: drops.count("evicted_idle") == idle_count + 1 - cap)
            await until(lambda: bool(protocols))
            await asyncio.sleep(0.05)
            return [p.data for p in protocols], closed_by_server(talker), gate.open_count
        finally:
            acceptor.close()
            for sock in [talker, *idle]:
                sock.close()

    return asyncio.run(main())


def test_a_socket_whose_request_is_in_is_not_pushed_out_by_the_idle_ones_accepted_after_it(waiting_set):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    data, talker_closed, open_count = queued_then_accepted([listener], idle_count=20, cap=4)
    assert data == [b"GET / HTTP/1.1\r\n\r\n"] and not talker_closed and open_count == 4


@pytest.mark.skipif(not spreads_connects(), reason="the kernel spreads connects over sockets on Linux only")
def test_over_several_listening_sockets_a_talking_socket_is_handed_on_before_more_are_accepted(waiting_set):
    listeners = listening_sockets("127.0.0.1", 0, backlog=16)      # 16 sockets, one port
    data, talker_closed, open_count = queued_then_accepted(listeners, idle_count=30, cap=4)
    assert data == [b"GET / HTTP/1.1\r\n\r\n"] and not talker_closed and open_count == 4


def test_a_handed_over_socket_sends_small_writes_at_once_tcp_nodelay(waiting_set):
    """asyncio sets TCP_NODELAY only on a socket whose protocol says TCP: a streamed token's few bytes
    must not wait for the ACK of the one before."""
    async def scenario(connect, gate, acceptor, drops, protocols):
        connect().sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert await until(lambda: protocols and protocols[0].transport is not None)
        sock = protocols[0].transport.get_extra_info("socket")
        return sock.proto, sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    proto, nodelay = asyncio.run(accepting(4, 30, scenario))
    assert proto == socket.IPPROTO_TCP and nodelay != 0
