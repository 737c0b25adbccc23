"""The accept loop's rate: connects queued on one listening socket, drained by serving/accepting.py's
GatedAcceptor under a gate already full, so that each accept evicts (closes) an older bare socket.

    python accept_rate.py --connects 4000 --cap 1000

Whichever anydev the interpreter imports is measured (PYTHONPATH=DIR with DIR/anydev a checkout of
another commit measures that one). Bounded: the connects are counted, the drain stops after 60 s.
"""
import argparse
import asyncio
import inspect
import select
import socket
import time

from anydev.serving.accepting import GatedAcceptor
from anydev.serving.connection import ConnectionGate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connects", type=int, default=4000, help="connects queued first (at most the backlog, 4096)")
    p.add_argument("--cap", type=int, default=1000, help="the gate's cap")
    args = p.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    clients = []
    for _ in range(args.connects):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(listener.getsockname())
        clients.append(client)

    async def drain() -> float:
        loop = asyncio.get_running_loop()
        gate = ConnectionGate(args.cap, lambda reason: None)
        several = "listeners" in inspect.signature(GatedAcceptor).parameters
        acceptor = GatedAcceptor(loop, [listener] if several else listener, lambda: None, gate, 60, lambda r: None)
        start = time.perf_counter()
        acceptor.start()
        while select.select([listener], [], [], 0)[0] and time.perf_counter() - start < 60:
            await asyncio.sleep(0)
        seconds = time.perf_counter() - start
        acceptor.close()
        return seconds

    seconds = asyncio.run(drain())
    print(f"{args.connects} accepted in {seconds:.3f} s: {args.connects / seconds:.0f} a second")
    for client in clients:
        client.close()


if __name__ == "__main__":
    main()
