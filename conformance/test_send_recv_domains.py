"""Send/recv over their domain (optional, contract 1.3): any pairing of the ranks, not only rings and
chains (each rank sends to a peer of a random derangement and receives from the rank that sends to it,
all in one group, so ranks two or more apart exchange too), counts from 0 up, at any element offset
into the buffers, with guard elements around each range that nothing may write, every dtype the
backend declares.

Inputs are small integers, exact in every dtype; the receive range is filled with guard bytes first,
so a recv that writes too little, too much or nothing fails.
"""
from __future__ import annotations

import torch

from anydev.conformance.domains import bounded, example, given, st
from anydev.conformance.support import require_torch_bridge, run_ranks
from anydev.conformance.test_collectives_domains import GUARD, assert_guarded, guarded_buffer, values
from anydev.conformance.test_send_recv import communicator_cache, communicators  # noqa: F401 (fixtures)

exchange_cases = st.fixed_dictionaries({
    "count": st.sampled_from([0, 1, 3, 255, 1031]) | st.integers(0, 3000),
    "offsets": st.tuples(st.integers(0, 7), st.integers(0, 7)),
    "dtype_pick": st.integers(0, 1 << 16),
    "pairing_seed": st.integers(0, 1 << 16),
})


def derangement(n: int, seed: int) -> list[int]:
    """``peer[r]``: whom rank r sends to; no rank sends to itself. Seed 0 is the ring (r -> r+1);
    others are random derangements (from 4 ranks on, some pairs are not ring neighbours)."""
    if seed == 0:
        return [(r + 1) % n for r in range(n)]
    gen = torch.Generator().manual_seed(seed)
    while True:
        peer = torch.randperm(n, generator=gen).tolist()
        if all(p != r for r, p in enumerate(peer)):
            return peer


def exchange(comms, dtype: str, count: int, offsets: tuple[int, int], peer: list[int], inputs):
    """Per rank, in one group: send ``inputs[rank]`` to ``peer[rank]`` and receive from the rank that
    sends to it, both ranges surrounded by guard elements; returns each rank's whole recv and send."""
    source = {p: r for r, p in enumerate(peer)}

    def body(rank: int):
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        sbuf, swhole, sat = guarded_buffer(device, dtype, count, offsets[0], None)
        rbuf, rwhole, rat = guarded_buffer(device, dtype, count, offsets[1], None)
        try:
            stream.memset_async(sbuf, 0x7B)
            stream.memset_async(rbuf, 0x7B)
            with stream.torch_stream():
                swhole[sat:sat + count].copy_(inputs[rank].to(swhole.device))
            # Views from the range's start to the buffer's end, with count=: even at count 0 the
            # address is the range's (an empty tensor's data_ptr is 0), and only count may be written.
            with comm.group():
                comm.send(swhole[sat:], peer[rank], stream=stream, count=count, dtype=dtype)
                comm.recv(rwhole[rat:], source[rank], stream=stream, count=count, dtype=dtype)
            stream.synchronize()
            return rwhole.cpu().clone(), swhole.cpu().clone()
        finally:
            stream.synchronize()
            sbuf.free()
            rbuf.free()
            stream.close()

    return run_ranks(len(comms), body, "send/recv on guarded buffers")


@bounded(8)
@given(case=exchange_cases)
@example(case={"count": 0, "offsets": (0, 0), "dtype_pick": 0, "pairing_seed": 0}).via("count 0, a ring")
@example(case={"count": 0, "offsets": (3, 5), "dtype_pick": 2, "pairing_seed": 7}).via("count 0, any pairing")
@example(case={"count": 1031, "offsets": (1, 7), "dtype_pick": 1, "pairing_seed": 11}).via("ragged, any pairing")
def test_send_recv_between_any_pairing_at_any_count_and_offset(backend, communicators, case):
    """Every rank sends to a peer of a random derangement (ranks that are not neighbours included)
    and receives from its sender, ``count`` elements (0 included) at any element offset, every
    declared dtype: each recv range holds exactly its sender's message, the guard elements around it
    are untouched, and the send buffer is unchanged."""
    require_torch_bridge(backend)
    n = len(communicators)
    declared = backend.runtime.collective_dtypes
    dtype = declared[case["dtype_pick"] % len(declared)]
    count, offsets = case["count"], case["offsets"]
    peer = derangement(n, case["pairing_seed"])
    inputs = [values(r, n, dtype, "sum", count, seed=r * 31) for r in range(n)]
    results = exchange(communicators, dtype, count, offsets, peer, inputs)
    source = {p: r for r, p in enumerate(peer)}
    what = f"send/recv of {count} {dtype} at offsets {offsets}, pairing {peer} (rank -> peer)"
    for rank, (recv, send) in enumerate(results):
        assert_guarded(recv, GUARD + offsets[1], inputs[source[rank]], dtype,
                       f"{what}, rank {rank} of {n} receiving from rank {source[rank]}")
        assert_guarded(send, GUARD + offsets[0], inputs[rank], dtype, f"{what}, rank {rank} of {n}: send buffer changed")
