"""The PMI server of an `srun --mpi=pmi2` step's tasks that run under this agent.

Each task gets one end of a socketpair as PMI_FD (with PMI_RANK, PMI_SIZE, PMI_JOBID) and
speaks the simple PMI wire protocol on it, as MPICH's PMI client does: a first line
`cmd=init pmi_version=V ...` picks PMI-1 (lines of space-separated `key=value`, one per
message) or PMI-2 (each message a 6-character decimal length, then `key=value;` pairs, `;`
doubled inside a value). Written from the protocol's description (MPICH's pmi docs and the
behaviour of Slurm's mpi/pmi2 plugin); no code is taken from either.

The key-value space is the step's: a put is seen by every rank after the next fence (PMI-1's
barrier). When this agent serves every rank of the step the fence is settled here, with no
message to anyone. When other agents serve some of the ranks, the fence is gathered by the
controller (model/pmi.py): once this agent's ranks have all reached it, their puts go up in a
`pmi_fence` message, and the ranks are released when the merged puts of every rank come back
in `pmi_kvs`. Job attributes (PMI_process_mapping, universeSize) are known to each agent from
the step's layout; node attributes (PMI-2 info-putnodeattr) are the node's own.

`Pmi2Session` is pure (bytes in, replies out) so it can be tested without processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.model import messages as m
from corral.model.messages import TaskSpec
from corral.model.pmi import node_of_rank as layout_ranks
from corral.model.pmi import parse_tasks_per_node

LENGTH_FIELD = 6  # PMI-2: the decimal length before each message
MAX_MESSAGE = 1 << 20  # a longer message (or line) ends the connection: not a PMI client
KVS_LIMITS = {"kvsname_max": 256, "keylen_max": 256, "vallen_max": 1024}


def process_mapping(node_of_rank: list[int]) -> str:
    """MPICH's PMI_process_mapping: `(vector,(first node,node count,ranks per node),...)`,
    each block a run of nodes holding consecutive ranks, the same number on each."""
    runs: list[tuple[int, int]] = []  # (node, ranks on it in a row)
    for node in node_of_rank:
        if runs and runs[-1][0] == node:
            runs[-1] = (node, runs[-1][1] + 1)
        else:
            runs.append((node, 1))
    blocks: list[list[int]] = []
    for node, count in runs:
        last = blocks[-1] if blocks else None
        if last is not None and last[2] == count and last[0] + last[1] == node:
            last[1] += 1
        else:
            blocks.append([node, 1, count])
    return "(vector," + ",".join(f"({a},{b},{c})" for a, b, c in blocks) + ")"


def encode2(pairs: list[tuple[str, str]]) -> bytes:
    body = "".join(f"{k}={v.replace(';', ';;')};" for k, v in pairs).encode()
    return f"{len(body):<{LENGTH_FIELD}d}".encode() + body


def decode2(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    i, n = 0, len(body)
    while i < n:
        eq = body.find("=", i)
        if eq < 0:
            break
        key = body[i:eq]
        j, value = eq + 1, []
        while j < n:
            if body[j] == ";":
                if j + 1 < n and body[j + 1] == ";":
                    value.append(";")
                    j += 2
                    continue
                break
            value.append(body[j])
            j += 1
        out[key] = "".join(value)
        i = j + 1
    return out


def decode1(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in line.split():
        key, _, value = word.partition("=")
        out[key] = value
    return out


def encode1(pairs: list[tuple[str, str]]) -> bytes:
    return (" ".join(f"{k}={v}" for k, v in pairs) + "\n").encode()


@dataclass(slots=True)
class _Conn:
    rank: int
    buf: bytes = b""
    version: int = 0  # 0 until the init line, then 1 or 2
    closed: bool = False


@dataclass(slots=True)
class Pmi2Session:
    """One step's PMI service on this node: `feed` takes what rank `rank`'s connection sent
    and returns the replies, as (rank, bytes), that are due (a fence answers every rank)."""

    jobid: str  # the KVS name, as Slurm's: JOBID.STEPID
    node_of_rank: list[int]  # the step's node index of each rank
    # the ranks this agent serves; None: every rank of the step (fences settled here)
    local_ranks: frozenset[int] | None = None
    kvs: dict[str, str] = field(default_factory=dict)
    node_attrs: dict[tuple[int, str], str] = field(default_factory=dict)  # (node, key)
    pending_puts: dict[str, str] = field(default_factory=dict)
    fenced: set[int] = field(default_factory=set)
    epoch: int = 0  # fences completed
    # fences this agent's ranks all reached, for the controller to gather: (epoch, ranks, puts)
    outbox: list[tuple[int, list[int], dict[str, str]]] = field(default_factory=list)
    conns: dict[int, _Conn] = field(default_factory=dict)
    finalized: set[int] = field(default_factory=set)
    aborted: str | None = None

    def __post_init__(self) -> None:
        self.kvs["PMI_process_mapping"] = process_mapping(self.node_of_rank)

    @property
    def size(self) -> int:
        return len(self.node_of_rank)

    def feed(self, rank: int, data: bytes) -> list[tuple[int, bytes]]:
        conn = self.conns.setdefault(rank, _Conn(rank))
        conn.buf += data
        out: list[tuple[int, bytes]] = []
        while not conn.closed:
            message = self._next(conn)
            if message is None:
                break
            out += self._handle(conn, message)
        return out

    def _next(self, conn: _Conn) -> dict[str, str] | None:
        if conn.version == 2:
            if len(conn.buf) < LENGTH_FIELD:
                return None
            try:
                length = int(conn.buf[:LENGTH_FIELD].decode())
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_MESSAGE:
                conn.closed = True
                return None
            if len(conn.buf) < LENGTH_FIELD + length:
                return None
            body = conn.buf[LENGTH_FIELD:LENGTH_FIELD + length]
            conn.buf = conn.buf[LENGTH_FIELD + length:]
            return decode2(body.decode(errors="replace"))
        nl = conn.buf.find(b"\n")
        if nl < 0:
            if len(conn.buf) > MAX_MESSAGE:
                conn.closed = True
            return None
        line, conn.buf = conn.buf[:nl], conn.buf[nl + 1:]
        return decode1(line.decode(errors="replace"))

    def _handle(self, conn: _Conn, msg: dict[str, str]) -> list[tuple[int, bytes]]:
        cmd = msg.get("cmd", "")
        if conn.version == 0:
            if cmd != "init":
                conn.closed = True
                return []
            version = 2 if msg.get("pmi_version") == "2" else 1
            conn.version = version
            sub = "0" if version == 2 else "1"
            return [(conn.rank, encode1([("cmd", "response_to_init"),
                                         ("pmi_version", str(version)),
                                         ("pmi_subversion", sub), ("rc", "0")]))]
        if conn.version == 2:
            return self._handle2(conn, cmd, msg)
        return self._handle1(conn, cmd, msg)

    def _reply(self, conn: _Conn, pairs: list[tuple[str, str]]) -> list[tuple[int, bytes]]:
        data = encode2(pairs) if conn.version == 2 else encode1(pairs)
        return [(conn.rank, data)]

    def _fence(self, conn: _Conn) -> list[tuple[int, bytes]]:
        self.fenced.add(conn.rank)
        if self.local_ranks is None:
            if len(self.fenced) < self.size:
                return []
            self.kvs.update(self.pending_puts)
            self.pending_puts.clear()
            return self._release()
        if len(self.fenced) < len(self.local_ranks):
            return []
        # every rank here is in: their puts go to the controller, the ranks wait for the rest
        self.outbox.append((self.epoch, sorted(self.fenced), dict(self.pending_puts)))
        self.pending_puts.clear()
        return []

    def fence_done(self, epoch: int, merged: dict[str, str]) -> list[tuple[int, bytes]]:
        """The controller's merged puts of fence `epoch` (every rank's): the ranks go on."""
        if epoch != self.epoch or self.local_ranks is None \
                or len(self.fenced) < len(self.local_ranks):
            return []  # not the fence these ranks wait at (a repeat): nothing to release
        self.kvs.update(merged)
        return self._release()

    def _release(self) -> list[tuple[int, bytes]]:
        self.fenced.clear()
        self.epoch += 1
        out: list[tuple[int, bytes]] = []
        for other in sorted(self.conns.values(), key=lambda c: c.rank):
            if other.closed:
                continue
            if other.version == 2:
                out += self._reply(other, [("cmd", "kvs-fence-response"), ("rc", "0")])
            else:
                out += self._reply(other, [("cmd", "barrier_out")])
        return out

    def _handle1(self, conn: _Conn, cmd: str, msg: dict[str, str]) -> list[tuple[int, bytes]]:
        if cmd == "get_maxes":
            return self._reply(conn, [("cmd", "maxes"),
                                      *((k, str(v)) for k, v in KVS_LIMITS.items())])
        if cmd == "get_appnum":
            return self._reply(conn, [("cmd", "appnum"), ("appnum", "0")])
        if cmd == "get_my_kvsname":
            return self._reply(conn, [("cmd", "my_kvsname"), ("kvsname", self.jobid)])
        if cmd == "get_universe_size":
            return self._reply(conn, [("cmd", "universe_size"), ("size", str(self.size))])
        if cmd == "put":
            self.pending_puts[msg.get("key", "")] = msg.get("value", "")
            return self._reply(conn, [("cmd", "put_result"), ("rc", "0")])
        if cmd == "barrier_in":
            return self._fence(conn)
        if cmd == "get":
            value = self.kvs.get(msg.get("key", ""))
            if value is None:
                return self._reply(conn, [("cmd", "get_result"), ("rc", "-1"),
                                          ("msg", "key_not_found")])
            return self._reply(conn, [("cmd", "get_result"), ("rc", "0"), ("value", value)])
        if cmd == "finalize":
            self.finalized.add(conn.rank)
            return self._reply(conn, [("cmd", "finalize_ack")])
        if cmd == "abort":
            self.aborted = msg.get("msg", "") or "abort"
            conn.closed = True
            return []
        return self._reply(conn, [("cmd", cmd or "unknown"), ("rc", "-1"),
                                  ("msg", "unknown_command")])

    def _handle2(self, conn: _Conn, cmd: str, msg: dict[str, str]) -> list[tuple[int, bytes]]:
        if cmd == "fullinit":
            return self._reply(conn, [
                ("cmd", "fullinit-response"), ("rc", "0"), ("pmi-version", "2"),
                ("pmi-subversion", "0"), ("rank", str(conn.rank)), ("size", str(self.size)),
                ("appnum", "0"), ("debugged", "FALSE"), ("pmiverbose", "FALSE")])
        if cmd == "job-getid":
            return self._reply(conn, [("cmd", "job-getid-response"), ("rc", "0"),
                                      ("jobid", self.jobid)])
        if cmd == "info-getjobattr":
            value = self.kvs.get(msg.get("key", ""))
            if value is None and msg.get("key") == "universeSize":
                value = str(self.size)
            return self._reply(conn, [("cmd", "info-getjobattr-response"), ("rc", "0"),
                                      *self._found(value)])
        node = self.node_of_rank[conn.rank] if 0 <= conn.rank < self.size else -1
        if cmd == "info-putnodeattr":
            self.node_attrs[node, msg.get("key", "")] = msg.get("value", "")
            return self._reply(conn, [("cmd", "info-putnodeattr-response"), ("rc", "0")])
        if cmd == "info-getnodeattr":
            value = self.node_attrs.get((node, msg.get("key", "")))
            return self._reply(conn, [("cmd", "info-getnodeattr-response"), ("rc", "0"),
                                      *self._found(value)])
        if cmd == "kvs-put":
            self.pending_puts[msg.get("key", "")] = msg.get("value", "")
            return self._reply(conn, [("cmd", "kvs-put-response"), ("rc", "0")])
        if cmd == "kvs-fence":
            return self._fence(conn)
        if cmd == "kvs-get":
            value = self.kvs.get(msg.get("key", ""))
            return self._reply(conn, [("cmd", "kvs-get-response"), ("rc", "0"),
                                      *self._found(value)])
        if cmd == "finalize":
            self.finalized.add(conn.rank)
            return self._reply(conn, [("cmd", "finalize-response"), ("rc", "0")])
        if cmd == "abort":
            self.aborted = msg.get("msg", "") or "abort"
            conn.closed = True
            return []
        return self._reply(conn, [("cmd", f"{cmd}-response"), ("rc", "-1"),
                                  ("errmsg", "unknown command")])

    @staticmethod
    def _found(value: str | None) -> list[tuple[str, str]]:
        if value is None:
            return [("found", "FALSE")]
        return [("found", "TRUE"), ("value", value)]


def task_environment(fd: int, rank: int, size: int, jobid: str) -> dict[str, str]:
    """What Slurm's mpi/pmi2 plugin gives each task (PMI_FD is the task's end of its
    socketpair, as the task sees it)."""
    return {"PMI_FD": str(fd), "PMI_RANK": str(rank), "PMI_SIZE": str(size),
            "PMI_JOBID": jobid, "PMI_SPAWNED": "0", "SLURM_MPI_TYPE": "pmi2"}


Send = Callable[[dict[str, Any]], None]


class StepPmiServer:
    """The I/O around a `Pmi2Session`: one socketpair per task, read on the agent's loop;
    a fence the controller gathers goes out through `send` (the agent's link)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, session: Pmi2Session,
                 job_id: int = 0, step_id: int = 0, send: Send | None = None) -> None:
        self.loop = loop
        self.session = session
        self.job_id, self.step_id = job_id, step_id
        self.send = send
        self.socks: dict[int, socket.socket] = {}

    def task_end(self, rank: int) -> int:
        """A new fd for rank `rank`'s end (the caller passes it to the task and closes it)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        old = self.socks.pop(rank, None)
        if old is not None:
            self._drop(rank, old)
        self.socks[rank] = ours
        self.loop.add_reader(ours.fileno(), self._readable, rank, ours)
        return theirs.detach()

    def environment(self, fd: int, rank: int) -> dict[str, str]:
        return task_environment(fd, rank, self.session.size, self.session.jobid)

    def _readable(self, rank: int, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(rank, sock)
            return
        self._deliver(self.session.feed(rank, data))
        for epoch, ranks, puts in self.session.outbox:
            if self.send is not None:
                self.send(m.PmiFence(job_id=self.job_id, step_id=self.step_id, epoch=epoch,
                                     ranks=ranks, puts=puts).to_dict())
        self.session.outbox.clear()
        conn = self.session.conns.get(rank)
        if conn is not None and conn.closed:
            self._drop(rank, sock)

    def fence_done(self, epoch: int, merged: dict[str, str]) -> None:
        """The controller's `pmi_kvs`: the merged puts of every rank; release ours."""
        self._deliver(self.session.fence_done(epoch, merged))

    def _deliver(self, replies: list[tuple[int, bytes]]) -> None:
        for to, reply in replies:
            peer = self.socks.get(to)
            if peer is None:
                continue
            try:
                peer.sendall(reply)  # small replies; a peer that does not read is dropped
            except OSError:
                self._drop(to, peer)

    def _drop(self, rank: int, sock: socket.socket) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(sock.fileno())
        sock.close()
        if self.socks.get(rank) is sock:
            del self.socks[rank]

    def close(self) -> None:
        for rank, sock in list(self.socks.items()):
            self._drop(rank, sock)


def server_for(loop: asyncio.AbstractEventLoop, job_id: int, step_id: int,
               specs: list[TaskSpec], first_launch: bool,
               send: Send | None = None) -> tuple[StepPmiServer | None, str]:
    """The PMI server of an `--mpi=pmi2` step, or None and why not ("" when no MPI asked).

    `specs` are the step's tasks under this agent (the controller sends each agent one
    message with all of them); the other ranks are served by other agents, whose fences
    the controller gathers through `send`."""
    if not specs or specs[0].env.get("SLURM_MPI_TYPE") != "pmi2":
        return None, ""
    env = specs[0].env
    size = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or len(specs))
    ranks = sorted(s.task_id for s in specs)
    everyone = ranks == list(range(size))
    try:
        layout = layout_ranks(parse_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", "")))
    except ValueError:
        layout = []
    if len(layout) != size:  # no layout given: the node ids of the ranks here
        by_rank = {s.task_id: int(s.env.get("SLURM_NODEID") or 0) for s in specs}
        layout = [by_rank.get(r, 0) for r in range(size)]
    if not first_launch or (not everyone and send is None):
        return None, ("slurmstepd: error: mpi/pmi2: this step's tasks span several agents "
                      "and no controller link gathers their fences (no PMI_FD)\n")
    session = Pmi2Session(f"{job_id}.{step_id}", layout,
                          local_ranks=None if everyone else frozenset(ranks))
    return StepPmiServer(loop, session, job_id, step_id, send), ""
