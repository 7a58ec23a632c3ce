"""The job side of `corral validate`: one task per node (srun), each printing its results as
`CORRAL-VALIDATE {json}` lines on standard output (the job's output file collects them).

Checks: `gpu` and `disk` on every node; `network` (latency, bandwidth) and `allreduce` (a sum
checked element by element, bus bandwidth) for every pair of nodes.  Rank 0 coordinates over
TCP: every rank tells it where its own listener is, then it runs the pairs one at a time so
that measurements do not share the wire.  The all-reduce uses torch.distributed (NCCL with GPUs,
gloo otherwise) where torch is installed, else the plain-socket one here.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

MARK = "CORRAL-VALIDATE "
MB = 1 << 20
# level -> (disk MiB, network MiB, all-reduce MiB, dcgmi run level)
SIZES = {1: (64, 32, 16, 1), 2: (512, 256, 128, 2)}


def emit(check: str, nodes: str, ok: bool | None, detail: str) -> None:
    """ok None: skipped (nothing to check), which is no failure."""
    result = "ok" if ok else ("skip" if ok is None else "FAIL")
    sys.stdout.write(MARK + json.dumps({"check": check, "nodes": nodes, "result": result,
                                        "detail": detail}) + "\n")
    sys.stdout.flush()


# ---- node checks -----------------------------------------------------------------------------

def check_gpu(level: int) -> tuple[bool | None, str]:
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if shutil.which("dcgmi"):
        r = subprocess.run(["dcgmi", "diag", "-r", str(SIZES[level][3])], capture_output=True,
                           text=True, timeout=1800)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        return r.returncode == 0, f"dcgmi diag -r {SIZES[level][3]}: exit {r.returncode} {last}"
    if not shutil.which("nvidia-smi"):
        if visible:
            return None, f"{len(visible)} GPUs allocated, no nvidia-smi or DCGM to check them"
        return None, "no GPUs"
    r = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return False, f"nvidia-smi failed: {(r.stderr or r.stdout).strip()[:200]}"
    seen = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if not seen:
        return None, "no GPUs"
    if visible and len(seen) < len(visible):
        return False, f"{len(seen)} GPUs visible, {len(visible)} allocated"
    return True, f"{len(seen)} GPUs visible; " + gpu_load(level)


def gpu_load(level: int) -> str:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        return "no load test (torch not installed)"
    if not torch.cuda.is_available():
        return "no load test (torch has no CUDA)"
    seconds = 2.0 * level
    flops = 0.0
    for dev in range(torch.cuda.device_count()):
        a = torch.randn(4096, 4096, device=f"cuda:{dev}")
        end = time.monotonic() + seconds / max(1, torch.cuda.device_count())
        n = 0
        while time.monotonic() < end:
            a = torch.mm(a, a).clamp_(-1, 1)
            n += 1
        torch.cuda.synchronize(dev)
        flops += 2 * 4096 ** 3 * n
    # the GPUs run one after the other, so this is their mean rate
    return (f"matmul load {flops / seconds / 1e12:.1f} TFLOP/s per GPU "
            f"({torch.cuda.device_count()} GPUs)")


def check_disk(directory: str, mib: int) -> tuple[bool, str]:
    chunk = os.urandom(4 * MB)
    try:
        fd, path = tempfile.mkstemp(prefix="corral-validate-", dir=directory)
    except OSError as e:
        return False, f"cannot write in {directory}: {e.strerror or e}"
    try:
        t0 = time.monotonic()
        for _ in range(mib // 4):
            os.write(fd, chunk)
        os.fsync(fd)
        wrote = time.monotonic() - t0
        if hasattr(os, "posix_fadvise"):  # read from the disk, not from the page cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.lseek(fd, 0, os.SEEK_SET)
        t0 = time.monotonic()
        for _ in range(mib // 4):
            if os.read(fd, 4 * MB) != chunk:
                return False, f"data read back from {directory} differs from what was written"
        read = time.monotonic() - t0
    except OSError as e:
        return False, f"{directory}: {e.strerror or e}"
    finally:
        os.close(fd)
        os.unlink(path)
    return True, (f"write {mib / max(wrote, 1e-6):.0f} MB/s, read {mib / max(read, 1e-6):.0f} "
                  f"MB/s ({mib} MiB in {directory})")


# ---- wire helpers ----------------------------------------------------------------------------

def send_msg(s: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode()
    s.sendall(struct.pack("!I", len(data)) + data)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("peer closed the connection")
        got += k
    return bytes(buf)


def recv_msg(s: socket.socket) -> Any:
    (n,) = struct.unpack("!I", recv_exact(s, 4))
    return json.loads(recv_exact(s, n))


# ---- pair measurements: `lead` connects to the peer's listener -------------------------------

def serve_peer(conn: socket.socket) -> None:
    """The peer's side of one measurement: answer pings, swallow the bulk, add arrays."""
    with conn:
        while True:
            try:
                op = recv_msg(conn)
            except ConnectionError:
                return
            if op["op"] == "ping":
                for _ in range(op["count"]):
                    conn.sendall(recv_exact(conn, 8))
            elif op["op"] == "bulk":
                left = op["bytes"]
                while left:
                    left -= len(conn.recv(min(left, 4 * MB)))
                send_msg(conn, {"done": True})
            elif op["op"] == "sum":
                data = recv_exact(conn, op["bytes"])
                conn.sendall(add_constant(data, float(op["rank"]) + 1.0))
            elif op["op"] == "bye":
                return


def add_constant(data: bytes, value: float) -> bytes:
    """float32 array + value, with numpy where installed (the peer's half of the sum)."""
    try:
        import numpy
    except ImportError:
        return array.array("f", [x + value for x in array.array("f", data)]).tobytes()
    return (numpy.frombuffer(data, dtype=numpy.float32) + numpy.float32(value)).tobytes()


def all_equal(data: bytes, value: float) -> bool:
    try:
        import numpy
    except ImportError:
        return all(x == value for x in array.array("f", data))
    return bool((numpy.frombuffer(data, dtype=numpy.float32) == value).all())


def measure_network(addr: tuple[str, int], mib: int) -> tuple[bool, str]:
    with socket.create_connection(addr, timeout=60) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        count = 50
        send_msg(s, {"op": "ping", "count": count})
        rtts = []
        for _ in range(count):
            t0 = time.perf_counter()
            s.sendall(b"x" * 8)
            recv_exact(s, 8)
            rtts.append(time.perf_counter() - t0)
        send_msg(s, {"op": "bulk", "bytes": mib * MB})
        chunk = b"\0" * (4 * MB)
        t0 = time.monotonic()
        for _ in range(mib // 4):
            s.sendall(chunk)
        recv_msg(s)
        seconds = time.monotonic() - t0
        send_msg(s, {"op": "bye"})
    rtts.sort()
    return True, (f"latency {rtts[len(rtts) // 2] * 1e6:.0f} us, "
                  f"bandwidth {mib / max(seconds, 1e-6):.0f} MB/s")


def socket_allreduce(addr: tuple[str, int], lead_rank: int, peer_rank: int,
                     mib: int) -> tuple[bool, str]:
    """A two-rank all-reduce (sum) of float32 arrays: lead sends, the peer adds and returns."""
    n = mib * MB // 4
    mine = array.array("f", [float(lead_rank) + 1.0]) * n
    with socket.create_connection(addr, timeout=120) as s:
        t0 = time.monotonic()
        send_msg(s, {"op": "sum", "bytes": n * 4, "rank": peer_rank})
        s.sendall(mine.tobytes())
        total = recv_exact(s, n * 4)
        seconds = time.monotonic() - t0
        send_msg(s, {"op": "bye"})
    want = float(lead_rank + peer_rank + 2)
    if not all_equal(total, want):
        return False, "wrong sum"
    # bus bandwidth as nccl-tests counts it: size / time * 2 * (ranks - 1) / ranks
    return True, f"busbw {mib / max(seconds, 1e-6):.0f} MB/s ({mib} MiB, plain sockets)"


# ---- the run ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corral-validate-job")
    ap.add_argument("--level", type=int, choices=(1, 2), default=1)
    ap.add_argument("--addrs", default="", help="NODE=ADDR,… where each node listens")
    ap.add_argument("--port", type=int, default=0, help="rank 0's port (0: from the job id)")
    ap.add_argument("--disk-dir", default="", help="where to write (%%n: the node's name)")
    args = ap.parse_args(argv)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    ranks = int(os.environ.get("SLURM_NTASKS", "1"))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    addrs = dict(kv.split("=", 1) for kv in args.addrs.split(",") if "=" in kv)
    disk_mib, net_mib, ar_mib, _ = SIZES[args.level]

    # every rank listens for its pair measurements before anything else
    listener = socket.create_server((addrs.get(node, "0.0.0.0"), 0))
    my_port = listener.getsockname()[1]

    ok, detail = check_gpu(args.level)
    emit("gpu", node, ok, detail)
    directory = (args.disk_dir.replace("%n", node) if args.disk_dir
                 else os.environ.get("TMPDIR") or tempfile.gettempdir())
    ok2, detail = check_disk(directory, disk_mib)
    emit("disk", node, ok2, detail)
    if ranks < 2:
        return 0

    job = int(os.environ.get("SLURM_JOB_ID", "0"))
    port = args.port or 20000 + (job * 7919) % 20000
    from corral.model.hostlists import expand

    first = expand(os.environ.get("SLURM_JOB_NODELIST", node))[0]  # where rank 0 runs
    coord = (addrs.get(first, first), port)
    hello = {"rank": rank, "node": node, "addr": addrs.get(node, node), "port": my_port}
    if rank == 0:
        return coordinate(listener, coord, hello, ranks, net_mib, ar_mib)
    return follow(listener, coord, hello)


def follow(listener: socket.socket, coord: tuple[str, int], hello: dict[str, Any]) -> int:
    deadline = time.monotonic() + 60
    while True:
        try:
            s = socket.create_connection(coord, timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with s:
        s.settimeout(None)
        send_msg(s, hello)
        while True:
            op = recv_msg(s)
            if op["op"] == "serve":
                conn, _ = listener.accept()
                serve_peer(conn)
                send_msg(s, {"served": True})
            elif op["op"] == "lead":
                send_msg(s, lead(op))
            elif op["op"] == "torch":
                torch_pairs(int(hello["rank"]), len(op["nodes"]), op)
                send_msg(s, {"done": True})
            else:
                return 0


def torch_usable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def torch_pairs(rank: int, ranks: int, op: dict[str, Any]) -> None:
    """The all-reduce through torch.distributed (NCCL with GPUs, gloo otherwise), one pair of
    ranks at a time; the pair's lower rank reports it."""
    from datetime import timedelta

    nodes = op["nodes"]
    pairs = [(i, j) for i in range(ranks) for j in range(i + 1, ranks)]
    done: set[tuple[int, int]] = set()
    try:
        import torch
        import torch.distributed as dist

        nccl = torch.cuda.is_available() and dist.is_nccl_available()
        backend = "nccl" if nccl else "gloo"
        device = "cuda" if nccl else "cpu"
        dist.init_process_group(backend, init_method=f"tcp://{op['addr']}:{op['port']}",
                                rank=rank, world_size=ranks, timeout=timedelta(seconds=120))
        n = op["mib"] * MB // 4
        for i, j in pairs:
            group = dist.new_group([i, j])  # every rank makes every group, in one order
            if rank in (i, j):
                t = torch.full((n,), float(rank + 1), device=device)
                dist.all_reduce(t, group=group)  # warm-up: connections, buffers
                t.fill_(float(rank + 1))
                if nccl:
                    torch.cuda.synchronize()
                t0 = time.monotonic()
                dist.all_reduce(t, group=group)
                if nccl:
                    torch.cuda.synchronize()
                seconds = time.monotonic() - t0
                ok = bool((t == float(i + j + 2)).all())
                if rank == i:
                    # nccl-tests' bus bandwidth: size / time * 2 * (ranks - 1) / ranks
                    emit("allreduce", f"{nodes[i]}<>{nodes[j]}", ok,
                         f"busbw {op['mib'] / max(seconds, 1e-6):.0f} MB/s "
                         f"({op['mib']} MiB, torch.distributed {backend})" if ok
                         else f"wrong sum (torch.distributed {backend})")
                    done.add((i, j))
            dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # any failure of the library is this check's failure
        for i, j in pairs:
            if i == rank and (i, j) not in done:
                emit("allreduce", f"{nodes[i]}<>{nodes[j]}", False,
                     f"torch.distributed: {type(e).__name__}: {e}"[:300])


def lead(op: dict[str, Any]) -> dict[str, Any]:
    addr = (op["addr"], op["port"])
    try:
        if op["what"] == "network":
            ok, detail = measure_network(addr, op["mib"])
        else:
            ok, detail = socket_allreduce(addr, op["rank"], op["peer_rank"], op["mib"])
    except OSError as e:
        ok, detail = False, f"{type(e).__name__}: {e}"
    return {"ok": ok, "detail": detail}


def coordinate(listener: socket.socket, coord: tuple[str, int], hello: dict[str, Any],
               ranks: int, net_mib: int, ar_mib: int) -> int:
    server = socket.create_server(("", coord[1]), reuse_port=False)
    server.settimeout(120)
    peers: dict[int, tuple[dict[str, Any], socket.socket | None]] = {0: (hello, None)}
    while len(peers) < ranks:
        conn, _ = server.accept()
        conn.settimeout(None)
        info = recv_msg(conn)
        peers[int(info["rank"])] = (info, conn)
    server.close()
    order = sorted(peers)
    kinds = [("network", net_mib)]
    if torch_usable():
        torch_op = {"op": "torch", "mib": ar_mib, "addr": coord[0], "port": coord[1] + 1,
                    "nodes": [peers[r][0]["node"] for r in order]}
        for r in order[1:]:
            send_msg(_conn(peers, r), torch_op)
        torch_pairs(0, ranks, torch_op)
        for r in order[1:]:
            recv_msg(_conn(peers, r))
    else:
        kinds.append(("allreduce", ar_mib))
    for what, mib in kinds:
        for i in order:
            for j in order:
                if j <= i:
                    continue
                a, b = peers[i][0], peers[j][0]
                op = {"op": "lead", "what": what, "mib": mib, "addr": b["addr"],
                      "port": b["port"], "rank": i, "peer_rank": j}
                if i == 0:  # rank 0 takes its part itself
                    send_msg(_conn(peers, j), {"op": "serve"})
                    result = lead(op)
                else:
                    send_msg(_conn(peers, j), {"op": "serve"})
                    send_msg(_conn(peers, i), op)
                    result = recv_msg(_conn(peers, i))
                recv_msg(_conn(peers, j))
                emit(what, f"{a['node']}<>{b['node']}", bool(result.get("ok")),
                     str(result.get("detail", "no answer")))
    for r in order[1:]:
        send_msg(_conn(peers, r), {"op": "done"})
    listener.close()
    return 0


def _conn(peers: dict[int, tuple[dict[str, Any], socket.socket | None]], rank: int
          ) -> socket.socket:
    conn = peers[rank][1]
    assert conn is not None
    return conn


if __name__ == "__main__":
    sys.exit(main())
