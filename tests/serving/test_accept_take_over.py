"""Connections that the gate's acceptor does not hand over (serving/accepting.py): one that the event
loop's own accept takes still ends with a FIN, though the listening sockets reset on close; and the
acceptor refuses a loop whose own accept it cannot stop (uvloop's), which would go on beside it."""
import asyncio
import socket
from types import SimpleNamespace

import pytest
import uvicorn
from uvicorn.server import ServerState

from anydev.serving.accepting import RESET_ON_CLOSE, take_over_accepting
from anydev.serving.connection import guarded_h11_protocol


async def hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


def guarded_config() -> uvicorn.Config:
    protocol = guarded_h11_protocol(30, 30, lambda reason: None, max_connections=8, first_request_timeout=30)
    config = uvicorn.Config(hello, http=protocol, loop="asyncio", lifespan="off", log_level="warning")
    config.load()
    return config


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_a_connection_the_loops_own_accept_takes_ends_with_a_fin_not_a_reset():
    async def main():
        config = guarded_config()
        sock = listener()
        # what another front end's acceptor sets on the listening sockets they share
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        server = await asyncio.get_running_loop().create_server(
            lambda: config.http_protocol_class(config=config, server_state=ServerState(), app_state={}), sock=sock)
        try:
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 10)      # a reset raises ConnectionResetError
            writer.close()
            return answer
        finally:
            server.close()

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nhello")


def test_taking_over_refuses_a_loop_whose_own_accept_is_not_a_reader_on_the_socket():
    async def main():
        config = guarded_config()
        sock = listener()
        # not serving: the loop has no accept reader on the socket to remove, as on uvloop
        own = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=sock, start_serving=False)
        server = SimpleNamespace(config=config, servers=[own], server_state=ServerState(),
                                 lifespan=SimpleNamespace(state={}))
        try:
            with pytest.raises(RuntimeError, match="cannot take over accepting"):
                take_over_accepting(server)
        finally:
            own.close()

    asyncio.run(main())
