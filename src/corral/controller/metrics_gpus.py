"""Corral's `/metrics/gpus` route: per GPU (node, index) and per job, incrementally.

The route is large (at 1,000 nodes x 8 GPUs and 5,000 running jobs, 2.5 MB), and most of it
changes at each sample, so nothing is rendered twice and nothing unchanged is walked at a
scrape:

- a node's lines are written when its GPUs are sampled (`on_sample`, while the sample is at
  hand), and so are the lines of the jobs holding GPUs there (the usage book has summed their
  use by then);
- a job event marks the job and the nodes where it holds GPUs, a node event the node: the
  scrape looks again at those only (a job's row appears, changes owner or goes; a node's
  `corral_gpu_allocated` follows its allocation);
- lines are kept in blocks (nodes by position in name order, jobs by id // 64), each block
  joined into bytes once per change (at the write of its last item when all were written
  anew, as between two scrapes; else by the scrape): a scrape hands on the blocks' bytes
  (`GpuRoute.chunks`: the combined `/metrics` joins them with the other routes' once).

`full_text` renders the route from scratch; the kept text equals it after any sequence of
changes (tests/unit/test_metrics.py).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from corral.exposition import escape_label, format_number, header

if TYPE_CHECKING:
    from corral.controller.cluster import NodeEvent
    from corral.controller.jobs import JobEvent
    from corral.controller.state import Controller
    from corral.controller.usage import UsageBook

GPU_SERIES: list[tuple[str, str]] = [
    ("corral_gpu_utilization_percent",
     "GPU utilisation at the last sample (NVML), per node and GPU"),
    ("corral_gpu_memory_used_bytes", "GPU memory in use at the last sample"),
    ("corral_gpu_power_watts", "GPU power draw at the last sample"),
    ("corral_gpu_allocated", "1 if a job holds the GPU, else 0"),
]
JOB_SERIES: list[tuple[str, str]] = [
    ("corral_job_gpu_utilization_percent",
     "Utilisation summed over the job's GPUs at the last sample"),
    ("corral_job_gpu_memory_used_bytes", "Memory in use on the job's GPUs at the last sample"),
]
NODE_BLOCK = 32  # nodes per block, in name order
JOB_BLOCK_SHIFT = 6  # jobs per block: the ids that share id >> JOB_BLOCK_SHIFT
# changed jobs remembered for the next scrape beyond twice the jobs in memory: no one
# scrapes (jobs left memory meanwhile); the kept text is dropped, the next scrape renders all
FORGET_SLACK = 1024


def node_lines(node: str, samples: list[dict[str, Any]], held: set[int]) -> tuple[bytes, ...]:
    """A node's lines of the four per-GPU families (bytes: encoded once, when written)."""
    util, mem, power, alloc = [], [], [], []
    node_label = escape_label(node)
    for g in samples:
        lab = f'{{node="{node_label}",gpu="{g["index"]}"}} '
        util.append(f"corral_gpu_utilization_percent{lab}{format_number(g['util'])}\n")
        mem.append(f"corral_gpu_memory_used_bytes{lab}{format_number(g['memory_used'])}\n")
        if g["power_w"] is not None:
            power.append(f"corral_gpu_power_watts{lab}{format_number(g['power_w'])}\n")
        alloc.append(f"corral_gpu_allocated{lab}{int(g['index'] in held)}\n")
    return ("".join(util).encode(), "".join(mem).encode(), "".join(power).encode(),
            "".join(alloc).encode())


def job_lines(job_id: int, user: str, account: str,
              use: tuple[tuple[float, float], ...]) -> tuple[bytes, ...]:
    """A job's lines of the two per-job families: its use summed over its nodes."""
    who = f'{{jobid="{job_id}",username="{escape_label(user)}",account="{escape_label(account)}"}} '
    return (f"corral_job_gpu_utilization_percent{who}{format_number(sum(u for u, _ in use))}\n"
            .encode(),
            f"corral_job_gpu_memory_used_bytes{who}{format_number(sum(m for _, m in use))}\n"
            .encode())


def _held(ctl: Controller, node: str) -> tuple[int, ...]:
    n = ctl.nodes.get(node)
    return tuple(n.alloc_gpus) if n is not None else ()


def full_text(ctl: Controller, book: UsageBook) -> bytes:
    """The route rendered from scratch (what the kept text must equal)."""
    per_node = [node_lines(name, book.gpus[name][1], set(_held(ctl, name)))
                for name in sorted(book.gpus)]
    per_job = []
    for jid in sorted(book.job_gpu):
        job = ctl.jobs.get(jid)
        if job is not None:
            per_job.append(job_lines(jid, job.user, job.account or "",
                                     tuple(book.job_gpu[jid].values())))
    out: list[bytes] = []
    for i, (name, doc) in enumerate(GPU_SERIES):
        out.append(header(name, doc).encode())
        out.extend([lines[i] for lines in per_node])
    for i, (name, doc) in enumerate(JOB_SERIES):
        out.append(header(name, doc).encode())
        out.extend([lines[i] for lines in per_job])
    return b"".join(out)


class Blocks:
    """Items' lines (one per family) kept in blocks in order: a change of an item
    re-joins its block's bytes at the next `joined`, not the whole route.  A block keeps its
    lines by family in item order (columns), so that joining it is one C call a family; a
    changed block all of whose items were made current since it was joined (each node
    sampled, each job's use summed: what happens between two scrapes) is joined then, at the
    last, and the scrape finds it joined."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: dict[Hashable, tuple[Any, tuple[bytes, ...]]] = {}  # item -> (key, lines)
        self.members: dict[int, list[Any]] = {}  # block -> its items, sorted
        self.pos: dict[Hashable, int] = {}  # item -> its place in its block
        self.cols: dict[int, list[list[bytes]]] = {}  # block -> family -> lines, in order
        self.order: list[int] = []  # the blocks, in order
        self.bytes: dict[int, tuple[bytes, ...]] = {}  # block -> its bytes per family
        self.dirty: set[int] = set()
        self.fresh: dict[int, set[Any]] = {}  # block -> its items written since it was joined
        self.rejoined = False  # a block was joined at a write since the last `joined`

    def _lay_out(self, block: int) -> None:
        """The block's columns anew (an item came or went)."""
        members, lines = self.members[block], self.lines
        for i, item in enumerate(members):
            self.pos[item] = i
        rows = [lines[item][1] for item in members]
        self.cols[block] = [[r[i] for r in rows] for i in range(self.width)]

    def put(self, block: int, item: Any, key: Any, lines: tuple[bytes, ...]) -> None:
        known = item in self.lines
        self.lines[item] = (key, lines)
        self.dirty.add(block)
        if known:
            cols, at = self.cols[block], self.pos[item]
            for i in range(self.width):
                cols[i][at] = lines[i]
        else:
            members = self.members.get(block)
            if members is None:
                members = self.members[block] = []
                insort(self.order, block)
            insort(members, item)
            self._lay_out(block)
        self.touch(block, item)

    def touch(self, block: int, item: Any) -> None:
        """`item`'s lines are current (written anew, or looked at and unchanged): when every
        item of a changed block is, since it was last joined, the block is joined now."""
        fresh = self.fresh.get(block)
        if fresh is None:
            fresh = self.fresh[block] = set()
        fresh.add(item)
        if len(fresh) == len(self.members[block]):
            fresh.clear()
            if block in self.dirty:
                self.bytes[block] = tuple([b"".join(col) for col in self.cols[block]])
                self.dirty.discard(block)
                self.rejoined = True

    def drop(self, block: int, item: Any) -> None:
        if self.lines.pop(item, None) is None:
            return
        members = self.members[block]
        members.remove(item)
        del self.pos[item]
        self.fresh.get(block, set()).discard(item)
        self.dirty.add(block)
        if members:
            self._lay_out(block)
        else:
            del self.members[block]
            del self.cols[block]
            self.fresh.pop(block, None)
            self.order.remove(block)
            self.bytes.pop(block, None)

    def key(self, item: Any) -> Any:
        kept = self.lines.get(item)
        return None if kept is None else kept[0]

    def joined(self) -> bool:
        """Join the changed blocks; whether any changed since the last call."""
        changed, self.rejoined = self.rejoined, False
        if not self.dirty:
            return changed
        for block in self.dirty:
            cols = self.cols.get(block)
            if cols is not None:
                self.bytes[block] = tuple([b"".join(col) for col in cols])
                self.fresh.get(block, set()).clear()
        self.dirty.clear()
        return True

    def family(self, i: int) -> list[bytes]:
        return [self.bytes[b][i] for b in self.order]


class GpuRoute:
    """/metrics/gpus, kept between scrapes (see the module's docstring)."""

    def __init__(self, ctl: Controller, book: UsageBook) -> None:
        self.ctl, self.book = ctl, book
        self.nodes = Blocks(len(GPU_SERIES))
        self.jobs = Blocks(len(JOB_SERIES))
        self.node_block: dict[str, int] = {}  # node -> its block (by position in name order)
        self.dirty_nodes: set[str] = set()
        self.dirty_jobs: set[int] = set()
        self.seen_jobs: set[int] = set()  # the jobs of book.job_gpu looked at
        # job -> the nodes where it held GPUs at its last event (the book's gpu_jobs is
        # already the new state when on_job runs: these are the lines it leaves)
        self.job_nodes: dict[int, set[str]] = {}
        for job in list(ctl.running.values()):
            self._track(job.job_id, {a.node for a in job.alloc if a.gpus})
        # the route's blocks' bytes: None until the first scrape (nothing is kept before)
        self.pieces: list[bytes] | None = None
        self.text: bytes | None = None  # the pieces joined (render), and what they were
        self._joined_from: list[bytes] | None = None
        self.headers = [header(name, doc).encode() for name, doc in GPU_SERIES + JOB_SERIES]

    def _track(self, job_id: int, nodes: set[str]) -> None:
        if nodes:
            self.job_nodes[job_id] = nodes
        else:
            self.job_nodes.pop(job_id, None)

    # ---- what tells of a change --------------------------------------------------------
    def on_job(self, ev: JobEvent) -> None:
        job = ev.job
        jid = job.job_id
        nodes = {a.node for a in job.alloc if a.gpus}
        if self.pieces is not None:  # before the first scrape, it looks at everything
            self.dirty_nodes.update(self.job_nodes.get(jid, ()))
            self.dirty_nodes.update(nodes)
            self.dirty_jobs.add(jid)
            if len(self.dirty_jobs) > 2 * len(self.ctl.jobs) + FORGET_SLACK:
                self._reset()  # no scrape for long: the next one renders everything
        self._track(jid, nodes if job.state.active else set())

    def _reset(self) -> None:
        self.pieces = self.text = self._joined_from = None
        self.nodes, self.jobs = Blocks(len(GPU_SERIES)), Blocks(len(JOB_SERIES))
        self.node_block = {}
        self.dirty_nodes, self.dirty_jobs, self.seen_jobs = set(), set(), set()

    def on_node(self, ev: NodeEvent) -> None:
        if self.pieces is not None:
            self.dirty_nodes.add(ev.node.name)

    def on_sample(self, node: str) -> None:
        """The node's GPUs were sampled (and its jobs' use summed): their lines now."""
        if self.pieces is None:
            return
        if node in self.node_block:
            self._node(node)
        else:
            self.dirty_nodes.add(node)  # a new node: the blocks are laid out again
        for jid in self.book.gpu_jobs.get(node, ()):
            self._job(jid)

    # ---- rendering ---------------------------------------------------------------------
    def _node(self, name: str) -> None:
        entry = self.book.gpus.get(name)
        block = self.node_block.get(name)
        if entry is None or block is None:
            return
        held = _held(self.ctl, name)
        key = (entry, held)
        if self.nodes.key(name) != key:
            self.nodes.put(block, name, key, node_lines(name, entry[1], set(held)))
        else:
            self.nodes.touch(block, name)

    def _job(self, jid: int) -> None:
        block = jid >> JOB_BLOCK_SHIFT
        per = self.book.job_gpu.get(jid)
        job = self.ctl.jobs.get(jid)
        if per is None:
            self.seen_jobs.discard(jid)
        else:
            self.seen_jobs.add(jid)
        if per is None or job is None:
            self.jobs.drop(block, jid)
            return
        account = job.account or ""
        key = (tuple(per.values()), job.user, account)
        if self.jobs.key(jid) != key:
            self.jobs.put(block, jid, key, job_lines(jid, job.user, account, key[0]))
        else:
            self.jobs.touch(block, jid)

    def _layout(self) -> None:
        """Blocks of nodes by position in name order, all lines written anew."""
        names = sorted(self.book.gpus)
        self.node_block = {name: i // NODE_BLOCK for i, name in enumerate(names)}
        self.nodes = Blocks(len(GPU_SERIES))
        for name in names:
            self._node(name)

    def render(self) -> bytes:
        """The route's text (the same bytes while nothing changed)."""
        pieces = self.chunks()
        if self.text is None or pieces is not self._joined_from:
            self.text = None  # let go first: its memory is reused (controller.metrics.render)
            self.text = b"".join(pieces)
            self._joined_from = pieces
        return self.text

    def chunks(self) -> list[bytes]:
        """The route's text as its blocks' bytes, in order (a new list when any changed)."""
        book = self.book
        changed = False
        if self.pieces is None or len(book.gpus) != len(self.node_block):
            self._layout()
            self.dirty_nodes.clear()
            changed = True
        elif self.dirty_nodes:
            for name in self.dirty_nodes:
                self._node(name)
            self.dirty_nodes.clear()
        live = book.job_gpu
        if len(live) != len(self.seen_jobs):  # a job's first sample, or one gone without event
            self.dirty_jobs.update(live.keys() - self.seen_jobs)
            self.dirty_jobs.update(self.seen_jobs - live.keys())
        if self.dirty_jobs:
            for jid in sorted(self.dirty_jobs):
                self._job(jid)
            self.dirty_jobs.clear()
        changed = self.nodes.joined() | changed
        changed = self.jobs.joined() | changed
        if self.pieces is not None and not changed:
            return self.pieces
        out: list[bytes] = []
        heads = iter(self.headers)
        for i in range(len(GPU_SERIES)):
            out.append(next(heads))
            out.extend(self.nodes.family(i))
        for i in range(len(JOB_SERIES)):
            out.append(next(heads))
            out.extend(self.jobs.family(i))
        self.pieces = out
        return out
