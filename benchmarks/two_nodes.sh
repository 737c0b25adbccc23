#!/usr/bin/env bash
# Two torchrun "nodes" on this host, as on two machines: a c10d rendezvous on 127.0.0.1:$PORT, one
# process and one GPU each (GPU 0 and GPU 1), running examples/test_infer.py at --tp 2.
#   PORT=29533 bash benchmarks/two_nodes.sh --device nvidia [more test_infer.py flags]
# Exit status: non-zero when either node failed. docs/multi-node.md has the two-machine version.
set -uo pipefail
PORT=${PORT:-29533}
node() {
    CUDA_VISIBLE_DEVICES=$1 python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint "127.0.0.1:$PORT" --max-restarts 0 examples/test_infer.py --tp 2 "${@:2}"
}
node 0 "$@" &
first=$!
node 1 "$@"
second=$?
wait "$first"
first=$?
echo "node exit codes: $first $second"
exit $(( first | second ))
