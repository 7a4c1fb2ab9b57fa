"""Data-parallel jobs (docs/distributed.md): which rank this process is, the rendezvous of the
ranks, and collectives. In a graph, `Graph.all_reduce / all_gather / reduce_scatter / broadcast`
are ops (with gradients); here the same collectives run on numpy arrays, outside any graph.

    import tgraph as tg, tgraph.distributed as dist
    dist.init()                                   # RANK, WORLD_SIZE ... as torchrun sets them
    w0 = dist.broadcast(np.random.randn(784, 10).astype(np.float32))   # rank 0's weights everywhere
    grads = dist.average_gradients(g, g.gradients(loss, params))        # in the step's graph

Launch N processes on this host with `python -m tgraph.distributed --nproc N program args...`
(or `torchrun --standalone --nproc-per-node N ...`). The engine is NCCL when each rank of the host
has a GPU of its own and NCCL loads (the collectives of a CUDA executable then run on the GPU,
inside its CUDA graph), Gloo over TCP otherwise; `init(backend="gloo" | "nccl")` or
TGRAPH_DIST_BACKEND chooses, `init(device=i)` the GPU (default: the local rank).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from ._tgraph import distributed as _d

init = _d.init
initialized = _d.initialized
rank = _d.rank
world_size = _d.world_size
local_rank = _d.local_rank
backend = _d.backend
shutdown = _d.shutdown
barrier = _d.barrier
all_reduce = _d.all_reduce
all_gather = _d.all_gather
broadcast = _d.broadcast
shard = _d.shard


def average_gradients(graph, grads, bucket_mb: float = 25.0):
    """Each gradient averaged over the ranks, in the step's graph: the gradients (a list, None
    kept as None) are flattened into buckets of about bucket_mb MiB, filled from the last one
    (the backward pass makes the last layers' gradients first, so the first buckets can start
    while it goes on), one all_reduce (mean) per bucket, and split back."""
    return graph._average_gradients(list(grads), int(bucket_mb * (1 << 20)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], nproc: int, timeout_s: float | None = None) -> int:
    """Runs `argv` as `nproc` ranks on this host (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT, a fresh rendezvous folder); when one fails the others are stopped. Returns the
    first non-zero exit code (or 0)."""
    store = tempfile.mkdtemp(prefix="tgraph-dist-")
    base = dict(os.environ, WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(_free_port()), TGRAPH_DIST_STORE=store, TGRAPH_DIST_RUN_ID=uuid.uuid4().hex)
    # Each rank's output is relayed whole lines at a time: ranks writing to one shared stream
    # interleave inside lines (an unbuffered print writes its pieces apart: "RANKRANK 0 ...").
    procs = [subprocess.Popen(argv, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for r in range(nproc)]
    lock = threading.Lock()

    def relay(pipe, out):
        for line in iter(pipe.readline, b""):
            with lock:
                if hasattr(out, "buffer"):
                    out.buffer.write(line)
                else:  # a replaced stream (a notebook's, a test's capture)
                    out.write(line.decode(errors="replace"))
                out.flush()
        pipe.close()
    relays = [threading.Thread(target=relay, args=(stream, out), daemon=True)
              for p in procs for stream, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr))]
    for t in relays:
        t.start()
    start, code = time.time(), 0
    try:
        while procs:
            for p in list(procs):
                rc = p.poll()
                if rc is None:
                    continue
                procs.remove(p)
                if rc != 0 and code == 0:
                    code = rc
                    print(f"[tgraph.distributed] a rank exited with code {rc}: stopping the others", file=sys.stderr)
                    for q in procs:
                        q.send_signal(signal.SIGTERM)
            if timeout_s is not None and time.time() - start > timeout_s and procs:
                print(f"[tgraph.distributed] over {timeout_s} s: stopping the ranks", file=sys.stderr)
                for q in procs:
                    q.kill()
                code = code or 124
            time.sleep(0.05)
    finally:
        for p in procs:
            p.kill()
        for t in relays:
            t.join(timeout=10)
    return code


def _main() -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tgraph.distributed",
                                 description="Run a program as N ranks of a data-parallel job on this host.")
    ap.add_argument("--nproc", type=int, required=True, help="number of ranks")
    ap.add_argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    a = ap.parse_args()
    if not a.program:
        ap.error("no program to run")
    sys.exit(launch(a.program, a.nproc, a.timeout))


if __name__ == "__main__":
    _main()
