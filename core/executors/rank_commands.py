"""The engine's commands to the ranks of a process group: which go to every rank, which wait for replies."""
from __future__ import annotations

#: Commands the engine gives every rank; any other goes to the one rank it is submitted to.
EVERY_RANK = frozenset({"init", "capture_graphs", "forward", "forward_stage", "release"})
#: Commands of the step loop: no reply (their futures end with rank 0's own); every other command
#: (init, graph capture, release, reads) waits for each rank's reply.
NO_REPLY = frozenset({"forward"})
#: After a failure, rank 0 still runs these on its own rank (to free its memory).
CLEANUP = frozenset({"release"})
#: Step commands: rank 0's own one failing means the group is broken (a peer died or failed).
STEP_CALLS = frozenset({"forward", "forward_stage", "read_tokens"})
