"""The key-value exchange of an `srun --mpi=pmi2` step whose nodes several agents serve: pure.

Each agent serves PMI to its own ranks (agent/pmi2.py).  When all of them have reached a
fence (PMI-1's barrier, PMI-2's kvs-fence), the agent sends its ranks' puts since the last
fence to the controller (`pmi_fence`); the controller's step manager gathers them here and,
once every rank of the step has reached the fence, sends the merged puts back to every agent
of the step (`pmi_kvs`), which adds them to its table and releases its ranks.  A step served
wholly by one agent never leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def parse_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed tasks per node ("2(x3),1" -> [2, 2, 2, 1]); ValueError if bad."""
    counts: list[int] = []
    for part in text.split(","):
        count, sep, rest = part.partition("(x")
        if sep:
            if not rest.endswith(")"):
                raise ValueError(f"bad tasks per node: {text!r}")
            counts += [int(count)] * int(rest[:-1])
        else:
            counts.append(int(part))
    if not counts or min(counts) < 0:
        raise ValueError(f"bad tasks per node: {text!r}")
    return counts


def node_of_rank(tasks_per_node: list[int]) -> list[int]:
    """The step's node index of each rank: the controller numbers a step's tasks node by
    node (controller/steps.py), so ranks are blocks of consecutive ids."""
    return [node for node, count in enumerate(tasks_per_node) for _ in range(count)]


class FenceError(ValueError):
    """A contribution that does not fit the fence under way (a rank twice, one out of range,
    a fence that is not the current one)."""


@dataclass(slots=True)
class FenceGather:
    """The controller's side of one step's fences: `add` each agent's part; the merged puts
    come back once every rank of the step is in (and the next fence begins)."""

    size: int  # the step's ranks
    epoch: int = 0  # the fence under way: the agents count their fences from 0 too
    arrived: set[int] = field(default_factory=set)
    parts: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (first rank, puts)

    def add(self, epoch: int, ranks: list[int], puts: dict[str, str]) -> dict[str, str] | None:
        if epoch != self.epoch:
            raise FenceError(f"fence {epoch} while fence {self.epoch} is under way")
        if not ranks:
            raise FenceError("a fence part without ranks")
        fresh = set(ranks)
        if len(fresh) != len(ranks) or fresh & self.arrived:
            raise FenceError("a rank reached the fence twice")
        if min(fresh) < 0 or max(fresh) >= self.size:
            raise FenceError(f"a rank out of range (the step has {self.size})")
        self.arrived |= fresh
        self.parts.append((min(fresh), dict(puts)))
        if len(self.arrived) < self.size:
            return None
        merged: dict[str, str] = {}
        for _, part in sorted(self.parts, key=lambda p: p[0]):  # a key put twice: the
            merged.update(part)  # higher ranks' value, whatever order the agents came in
        self.arrived.clear()
        self.parts.clear()
        self.epoch += 1
        return merged
