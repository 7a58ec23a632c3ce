"""model/messages.py: typed messages, strict parsing, symmetric encoding."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from corral.model import messages as m
from corral.model.launchplan import ContainerSpec, LaunchPlan, SignalSpec

CHANNELS = [m.TO_CONTROLLER_FROM_CLIENT, m.TO_CLIENT, m.TO_AGENT, m.TO_CONTROLLER_FROM_AGENT,
            m.TO_STEPD, m.TO_AGENT_FROM_STEPD]

# One valid instance of every message kind, fields set away from their defaults.
SAMPLES: list[tuple[m.Channel, m.Message]] = [
    (m.TO_CONTROLLER_FROM_CLIENT, m.StepStart(job_id=None, alloc={"num_nodes": 2, "batch": False},
                                          step=m.StepSpec(name="x", argv=["hostname", "-s"],
                                                          env={"A": "1"}, ntasks=4,
                                                          gpus_per_task=1, gpu_bind="single:2",
                                                          window=m.Window(rows=40, cols=100),
                                                          stdin="all", output="o-%t"),
                                          alloc_env={"HOME": "/home/a"})),
    (m.TO_CONTROLLER_FROM_CLIENT, m.StepStart(job_id=12)),
    (m.TO_CONTROLLER_FROM_CLIENT, m.Stdin(data="aGVsbG8K")),
    (m.TO_CONTROLLER_FROM_CLIENT, m.StdinEof()),
    (m.TO_CONTROLLER_FROM_CLIENT, m.SignalStep(signal=10)),
    (m.TO_CONTROLLER_FROM_CLIENT, m.Cancel()),
    (m.TO_CONTROLLER_FROM_CLIENT, m.Resize(rows=50, cols=132)),
    (m.TO_CONTROLLER_FROM_CLIENT, m.Release(exit_code=3)),
    (m.TO_CONTROLLER_FROM_CLIENT, m.Detach()),
    (m.TO_CLIENT, m.Pending(job_id=5, reason="Resources")),
    (m.TO_CLIENT, m.Allocated(job_id=5, nodes="node-[1-2]", env={"SLURM_JOB_ID": "5"})),
    (m.TO_CLIENT, m.Waiting(message="busy")),
    (m.TO_CLIENT, m.StepStarted(job_id=5, step_id=0, nodes=["a", "b"], tasks_per_node=[2, 1],
                                ntasks=3)),
    (m.TO_CLIENT, m.Output(task=2, stream="stderr", data="eA==")),
    (m.TO_CLIENT, m.TaskEnded(task=1, exit_code=2, signal=9)),
    (m.TO_CLIENT, m.StepEnd(exit_code=137)),
    (m.TO_CLIENT, m.Error(message="no")),
    (m.TO_CLIENT, m.AllocationEnded(state="CANCELLED")),
    (m.TO_CLIENT, m.UserMessage(message="disk full")),
    (m.TO_AGENT, m.Batch(messages=[{"type": "ack", "job_id": 1}])),
    (m.TO_AGENT, m.LaunchJob(node="n1", launch=LaunchPlan(
        job_id=4, uid=0, gid=0, script_text="#!/bin/sh", env={"A": "1"},
        signal=SignalSpec(num=10), container=ContainerSpec(image="x.sqsh")))),
    (m.TO_AGENT, m.Control(job_id=4, control={"op": "signal", "signal": 15,
                                              "batch_only": True})),
    (m.TO_AGENT, m.LaunchTasks(job_id=4, step_id=1, uid=1000, gid=1000, user="a", cwd="/w",
                               argv=["x"], pty=True, window=m.Window(rows=0, cols=0),
                               stdin="none", kill_wait=2.5, open_mode="append",
                               tasks=[m.TaskSpec(task_id=3, local_id=1, node="n1",
                                                 env={"K": "V"}, stdout="/o", notice="hi\n")],
                               cpus_per_task=2, node_cpus={"n1": 4}, node_mem_mb={"n1": 100})),
    (m.TO_AGENT, m.TaskStdin(job_id=4, step_id=1, data="YQ==")),
    (m.TO_AGENT, m.TaskStdinEof(job_id=4, step_id=1)),
    (m.TO_AGENT, m.SignalTasks(job_id=4, step_id=1, signal=2)),
    (m.TO_AGENT, m.KillTasks(job_id=4, step_id=1)),
    (m.TO_AGENT, m.ResizeTasks(job_id=4, step_id=1, rows=10, cols=20)),
    (m.TO_AGENT, m.TaskFlow(job_id=4, step_id=1, pause=True)),
    (m.TO_AGENT, m.PmiKvs(job_id=4, step_id=1, epoch=0, kvs={"bc-0": "a"})),
    (m.TO_AGENT, m.Ack(job_id=4)),
    (m.TO_AGENT, m.Reconnect(reason="silent")),
    (m.TO_AGENT, m.Registered(nodes=["n1"], ack=[1, 2], heartbeat=5.0,
                              config={"cluster_name": "c"})),
    (m.TO_CONTROLLER_FROM_AGENT, m.Register(nodes=["n1"], running=[3],
                                            ended=[m.JobEnded(job_id=2, state="FAILED",
                                                              exit_code=1, end_time=10.5)],
                                            hw={"cpus": 4})),
    (m.TO_CONTROLLER_FROM_AGENT, m.JobEnded(job_id=2, state="TIMEOUT", signal=15)),
    (m.TO_CONTROLLER_FROM_AGENT, m.TaskOutput(job_id=4, step_id=1, task_id=0, data="eHl6")),
    (m.TO_CONTROLLER_FROM_AGENT, m.TaskExit(job_id=4, step_id=1, task_id=0, exit_code=1)),
    (m.TO_CONTROLLER_FROM_AGENT, m.PmiFence(job_id=4, step_id=1, epoch=0, ranks=[0],
                                            puts={"bc-0": "a"})),
    (m.TO_CONTROLLER_FROM_AGENT, m.LaunchFailed(job_id=4, error="disk full")),
    (m.TO_CONTROLLER_FROM_AGENT, m.Heartbeat(load=0.5, free_mem=1000)),
    (m.TO_CONTROLLER_FROM_AGENT, m.Heartbeat(load=0.5, health=[
        m.HealthReport(node="n1", ok=False, reason="GPU 0 XID 79", source="gpu", checked=1.0,
                       gpu_events=[m.GpuHealthEvent(gpu=0, kind="xid", code=79, drains=True,
                                                    text="GPU 0 XID 79")])])),
    (m.TO_AGENT, m.HealthCheck(nodes=["n1"], program="/bin/true", timeout=5.0)),
    (m.TO_AGENT, m.JobStart(job_id=3, nodes=["n1"], batch_host="n1", prolog="/bin/true",
                            timeout=5.0, alloc=True, env={"SLURM_JOB_ID": "3"},
                            gpus={"n1": "0,1"})),
    (m.TO_AGENT, m.JobEnd(job_id=3, nodes=["n1"], env={"SLURM_JOB_EXIT_CODE": "0"})),
    (m.TO_CONTROLLER_FROM_AGENT, m.PrologResult(job_id=3, node="n1", kind="prolog", ok=False,
                                                reason="exit 1")),
    (m.TO_CONTROLLER_FROM_AGENT, m.CpusBound(job_id=4, node="n1", cpus=[2, 3])),
    (m.TO_CONTROLLER_FROM_AGENT, m.Usage(time=1.5, gpus=[{"index": 0, "util": 3.0}],
                                         steps=[{"job_id": 4, "step": "batch", "rss": 7}])),
    (m.TO_STEPD, m.CancelOp()),
    (m.TO_STEPD, m.RequeueOp()),
    (m.TO_STEPD, m.SignalOp(signal=10, batch_only=True)),
    (m.TO_STEPD, m.SuspendOp()),
    (m.TO_STEPD, m.ResumeOp()),
    (m.TO_STEPD, m.TimeLimitOp(seconds=-1.0)),
    (m.TO_STEPD, m.NotifyOp(message="hello")),
    (m.TO_AGENT_FROM_STEPD, m.StepdStarted(job_id=4, pid=1234)),
    (m.TO_AGENT_FROM_STEPD, m.StepdExited(job_id=4, state="COMPLETED")),
]


def test_every_message_kind_has_a_sample() -> None:
    covered = {type(msg) for _, msg in SAMPLES}
    for channel in CHANNELS:
        assert set(channel.kinds.values()) <= covered, channel.name


@pytest.mark.parametrize(("channel", "msg"), SAMPLES, ids=lambda x: getattr(x, "TYPE", ""))
def test_encode_decode_symmetric(channel: m.Channel, msg: m.Message) -> None:
    text = m.encode(msg)
    back = m.decode(text, channel)
    assert back == msg and type(back) is type(msg)
    assert m.encode(back) == text
    assert m.decode(json.loads(text), channel) == msg  # a parsed object as well


def test_wire_format_is_todays() -> None:
    # peers that still build plain dicts read and write the same JSON
    assert m.TaskOutput(job_id=1, step_id=2, task_id=3, stream="stdout", data="eA==").to_dict() \
        == {"type": "task_output", "job_id": 1, "step_id": 2, "task_id": 3, "stream": "stdout",
            "data": "eA=="}
    assert m.SignalOp(signal=9).to_dict() == {"op": "signal", "signal": 9, "batch_only": False}
    assert "alloc_env" not in m.StepStart(job_id=3).to_dict()
    assert "notice" not in m.TaskSpec(task_id=0).to_dict()
    # what the agent sends today, field for field
    ended = {"type": "ended", "job_id": 7, "state": "COMPLETED", "exit_code": 0, "signal": 0,
             "end_time": 1.5}
    assert m.decode(ended, m.TO_CONTROLLER_FROM_AGENT).to_dict() == ended
    # defaults for fields a sender leaves out; unknown fields are ignored
    msg = m.decode({"type": "signal", "extra": [1]}, m.TO_CONTROLLER_FROM_CLIENT)
    assert msg == m.SignalStep(signal=2)


BAD: list[tuple[m.Channel, Any, str]] = [
    (m.TO_AGENT, "{", "not valid JSON"),
    (m.TO_AGENT, b"\xff\xfe", "not valid JSON"),
    (m.TO_AGENT, "[1, 2]", "expected an object, got list"),
    (m.TO_AGENT, "null", "expected an object, got null"),
    (m.TO_AGENT, {"job_id": 1}, "unknown message type None"),
    (m.TO_AGENT, {"type": ["x"]}, "unknown message type"),
    (m.TO_AGENT, {"type": "task_output"}, "unknown message type 'task_output'"),  # wrong way
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": 1}, "kill_tasks: missing field 'step_id'"),
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": "1", "step_id": 0},
     "kill_tasks.job_id: expected an integer, got str"),
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": True, "step_id": 0},
     "kill_tasks.job_id: expected an integer, got bool"),
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": 1.0, "step_id": 0},
     "kill_tasks.job_id: expected an integer, got float"),
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": -1, "step_id": 0}, "out of range"),
    (m.TO_AGENT, {"type": "kill_tasks", "job_id": 1 << 60, "step_id": 0}, "out of range"),
    (m.TO_AGENT, {"type": "signal_tasks", "job_id": 1, "step_id": 0, "signal": 0},
     "signal_tasks.signal: 0 is out of range [1, 64]"),
    (m.TO_AGENT, {"type": "signal_tasks", "job_id": 1, "step_id": 0, "signal": 65},
     "out of range"),
    (m.TO_AGENT, {"type": "task_stdin", "job_id": 1, "step_id": 0, "data": "not base64!"},
     "task_stdin.data: not base64"),
    (m.TO_AGENT, {"type": "task_flow", "job_id": 1, "step_id": 0, "pause": 1},
     "task_flow.pause: expected true or false, got int"),
    (m.TO_AGENT, {"type": "launch_tasks", "job_id": 1, "step_id": 0, "uid": 0, "gid": 0,
                  "tasks": [{"task_id": 0, "env": {"A": 1}}]},
     "launch_tasks.tasks[0].env['A']: expected a string, got int"),
    (m.TO_AGENT, {"type": "launch_tasks", "job_id": 1, "step_id": 0, "uid": 0, "gid": 0,
                  "tasks": {"task_id": 0}}, "launch_tasks.tasks: expected a list, got dict"),
    (m.TO_AGENT, {"type": "launch_tasks", "job_id": 1, "step_id": 0, "uid": 0, "gid": 0,
                  "stdin": "03"}, "launch_tasks.stdin: '03' is not all, none or a task id"),
    (m.TO_AGENT, {"type": "launch_tasks", "job_id": 1, "step_id": 0, "uid": 0, "gid": 0,
                  "kill_wait": float("nan")}, "launch_tasks.kill_wait: expected a number"),
    (m.TO_AGENT, {"type": "launch_tasks", "job_id": 1, "step_id": 0, "uid": 0, "gid": 0,
                  "argv": ["x"] * (m.MAX_ITEMS + 1)}, "more than"),
    (m.TO_AGENT, {"type": "control", "job_id": 1, "control": {"op": "explode"}},
     "unknown message op 'explode'"),
    (m.TO_AGENT, {"type": "launch", "launch": {"job_id": "4"}}, "launch.launch.job_id"),
    (m.TO_AGENT, {"type": "launch", "launch": {"job_id": 4, "uid": 0, "gid": 0,
                                               "step": "../x"}}, "is not a step name"),
    (m.TO_AGENT, {"type": "launch", "launch": {"job_id": 4, "uid": 0, "gid": 0,
                                               "container": {"mounts": []}}},
     "a container needs an image or a name"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "ended", "job_id": 1, "state": "RUNNING"},
     "ended.state: 'RUNNING' is not one of"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "ended", "job_id": 1, "state": "COMPLETED",
                                  "end_time": float("inf")}, "expected a number"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "task_exit", "job_id": 1, "step_id": 0,
                                  "task_id": 0, "exit_code": 256}, "out of range"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "task_output", "job_id": 1, "step_id": 0,
                                  "task_id": 0, "stream": "stdin", "data": ""},
     "task_output.stream: 'stdin' is not one of"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "register", "ended": [{"job_id": 1}]},
     "register.ended[0]: missing field 'state'"),
    (m.TO_CONTROLLER_FROM_CLIENT, {"type": "start", "step": {"argv": "ls"}},
     "start.step.argv: expected a list, got str"),
    (m.TO_CONTROLLER_FROM_CLIENT, {"type": "start", "step": {"ntasks": 0}},
     "start.step.ntasks: 0 is out of range"),
    (m.TO_CONTROLLER_FROM_CLIENT, {"type": "start", "step": {"window": {"rows": -1}}},
     "start.step.window.rows: -1 is out of range"),
    (m.TO_CONTROLLER_FROM_CLIENT, {"type": "start", "step": {"name": "x" * (m.MAX_TEXT + 1)}},
     "longer than"),
    (m.TO_CLIENT, {"type": "step", "job_id": 1, "step_id": 0, "nodes": ["a"],
                   "tasks_per_node": [1, 2], "ntasks": 3}, "disagree"),
    (m.TO_STEPD, {"op": "time_limit", "seconds": "5"}, "time_limit.seconds: expected a number"),
    (m.TO_STEPD, {"op": "notify", "message": "x" * 1025}, "longer than"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "cpus_bound", "job_id": 1, "node": "n1",
                                  "cpus": [0, -1]}, "out of range"),
    (m.TO_CONTROLLER_FROM_AGENT, {"type": "cpus_bound", "job_id": 1, "node": "n1",
                                  "cpus": ["0"]}, "expected"),
    (m.TO_AGENT_FROM_STEPD, {"event": "exited", "job_id": 1, "state": "WHATEVER"},
     "is not one of"),
]


@pytest.mark.parametrize(("channel", "raw", "why"), BAD)
def test_malformed_messages_raise_message_error_only(channel: m.Channel, raw: Any,
                                                     why: str) -> None:
    with pytest.raises(m.MessageError) as info:
        m.decode(raw, channel)
    assert why in str(info.value)


def test_deep_nesting_is_a_message_error() -> None:
    deep = '{"type": "start", "alloc": ' + "[" * 100000 + "]" * 100000 + "}"
    with pytest.raises(m.MessageError):
        m.decode(deep, m.TO_CONTROLLER_FROM_CLIENT)


def _mutate(value: Any, rnd: random.Random) -> Any:
    """A random corruption of a valid message: wrong types, odd numbers, dropped keys."""
    junk: list[Any] = [None, True, -1, 1 << 70, 3.5, float("nan"), "", "x" * 5, [], {}, [1],
                       {"a": None}, "@@@", 0]
    if isinstance(value, dict):
        out = dict(value)
        if out and rnd.random() < 0.3:
            del out[rnd.choice(list(out))]
        for k in list(out):
            if rnd.random() < 0.3:
                out[k] = _mutate(out[k], rnd) if rnd.random() < 0.5 else rnd.choice(junk)
        return out
    if isinstance(value, list):
        return [_mutate(v, rnd) for v in value] + ([rnd.choice(junk)] if rnd.random() < 0.2
                                                   else [])
    return rnd.choice(junk)


def test_random_corruptions_never_raise_anything_but_message_error() -> None:
    rnd = random.Random(8)
    accepted = refused = 0
    for _ in range(3000):
        channel, msg = SAMPLES[rnd.randrange(len(SAMPLES))]
        raw = _mutate(msg.to_dict(), rnd)
        try:
            back = m.decode(raw, channel)
        except m.MessageError:
            refused += 1
            continue
        accepted += 1
        assert m.decode(m.encode(back), channel) == back  # what is accepted round-trips
    assert accepted and refused  # both paths were exercised


def test_constructor_refuses_unknown_and_missing_fields() -> None:
    with pytest.raises(TypeError):
        m.Ack()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        m.Ack(job_id=1, nope=2)  # type: ignore[call-arg]


# ---- the controller's use of them (controller/steps.py) -------------------------------------

def _live_step(sent: list[m.Message]) -> Any:
    from corral.controller.steps import LiveStep
    from corral.model.job import Step

    return LiveStep(job_id=5, step_id=0, send=sent.append, nodes=["n1", "n2"],
                    tasks_per_node=[2, 1], cpus={}, gpus={}, record=Step("0", "x"))


def _manager() -> Any:
    from corral.controller.steps import StepManager

    class Ctl:
        listeners: list[Any] = []
        jobs: dict[int, Any] = {}
        agent_senders: dict[str, Any] = {}

        def mark(self, job: Any) -> None:
            pass

    return StepManager(Ctl())  # type: ignore[arg-type]


def test_agent_messages_are_checked_before_they_reach_a_step() -> None:
    mgr = _manager()
    sent: list[m.Message] = []
    mgr.live[(5, 0)] = step = _live_step(sent)
    for bad in ({"type": "task_exit", "job_id": "5", "step_id": 0, "task_id": 0},
                {"type": "task_output", "job_id": 5, "step_id": 0, "task_id": 0, "data": "!"},
                {"type": "task_exit", "job_id": 5, "step_id": 0, "task_id": 3},  # no task 3
                {"type": "nonsense"}, {"no": "type"}):
        mgr.agent_message(bad)  # never raises
    # task 2 runs on n2: an agent of n1 cannot end it
    mgr.agent_message({"type": "task_exit", "job_id": 5, "step_id": 0, "task_id": 2},
                      nodes=["n1"])
    assert sent == [] and step.exits == {}
    mgr.agent_message({"type": "task_output", "job_id": 5, "step_id": 0, "task_id": 2,
                       "data": "eA=="}, nodes=["n2"])
    mgr.agent_message({"type": "task_exit", "job_id": 5, "step_id": 0, "task_id": 2,
                       "exit_code": 3}, nodes=["n2"])
    mgr.agent_message({"type": "task_exit", "job_id": 5, "step_id": 0, "task_id": 2,
                       "exit_code": 0}, nodes=["n2"])  # a second end is not counted
    assert sent == [m.Output(task=2, stream="stdout", data="eA=="),
                    m.TaskEnded(task=2, exit_code=3, signal=0)]
    assert step.exits == {2: (3, 0)}


def test_session_output_queue_pauses_resumes_and_is_capped(monkeypatch: Any) -> None:
    from corral.controller import steps

    monkeypatch.setattr(steps, "OUTPUT_HIGH", 100)
    monkeypatch.setattr(steps, "OUTPUT_LOW", 40)
    monkeypatch.setattr(steps, "OUTPUT_HARD", 300)
    monkeypatch.setattr(steps, "OUTPUT_WINDOW", 0)  # no agent windows in transit here
    monkeypatch.setattr(steps, "OUTPUT_CREDIT", 1 << 30)
    flows: list[bool] = []

    async def body() -> None:
        s = steps.Session()
        s.flow = lambda step, pause: flows.append(pause)
        s.step = _live_step([])
        chunk = m.Output(task=0, data="A" * 60)
        s.send(chunk)
        assert flows == []
        s.send(chunk)  # 120 queued > 100: pause
        assert flows == [True]
        for _ in range(4):
            s.send(chunk)  # up to 300, then dropped
        assert s.queued == 300 and s.dropped == 60 and s.queue.qsize() == 5
        for _ in range(4):
            s.sent(s.queue.get_nowait())
        assert flows == [True]  # 60 queued: not yet below 40
        s.sent(s.queue.get_nowait())
        assert flows == [True, False] and s.queued == 0

    asyncio.run(body())


def test_session_credits_the_agents_window_as_it_passes_output_on(monkeypatch: Any) -> None:
    """The agents stop after a window of uncredited output; the session credits every half
    window it passes on to its client (a resume), so a reading client never stalls."""
    from corral.controller import steps

    monkeypatch.setattr(steps, "OUTPUT_CREDIT", 100)
    flows: list[bool] = []

    async def body() -> None:
        s = steps.Session()
        s.flow = lambda step, pause: flows.append(pause)
        s.step = _live_step([])
        chunk = m.Output(task=0, data="A" * 60)
        for _ in range(4):
            s.send(chunk)
        s.sent(s.queue.get_nowait())
        assert flows == []  # 60 passed on
        s.sent(s.queue.get_nowait())
        assert flows == [False] and s.delivered == 0  # 120: a credit
        s.sent(s.queue.get_nowait())
        s.sent(s.queue.get_nowait())
        assert flows == [False, False]

    asyncio.run(body())


def test_agent_pauses_itself_after_a_window_and_a_credit_resumes_it() -> None:
    """agent/tasks.py: past OUTPUT_WINDOW bytes sent and not credited, the step's pipes are
    no longer read; the controller's resume is the credit."""
    from corral.agent import tasks

    sent: list[dict[str, Any]] = []

    async def body() -> None:
        tm = tasks.TaskManager(sent.append)
        step = tasks._Step(job_id=1, step_id=0, kill_wait=1.0, done=asyncio.Event())
        task = tasks._Task(task_id=0, local_id=0)
        tm._steps[(1, 0)] = step
        chunk = b"x" * (1 << 20)
        for _ in range(64):  # bounded: a window is a few of these chunks
            if step.paused:
                break
            tm._send_output(step, task, "stdout", chunk)
        assert step.paused and step.unacked >= tasks.OUTPUT_WINDOW
        assert len(sent) == -(-tasks.OUTPUT_WINDOW // len(tasks._b64(chunk)))
        tm.flow(1, 0, False)
        assert not step.paused and step.unacked == 0

    asyncio.run(body())


def test_agent_drops_a_bad_controller_message_alone(tmp_path: Any) -> None:
    """agent/main.py: every message is decoded with TO_AGENT (task messages by the
    TaskManager first); a bad one, alone or in a batch, is logged and dropped, never raised,
    and the good ones around it are handled."""
    from corral.agent.main import Agent

    async def body() -> None:
        agent = Agent(str(tmp_path), ["node-1"], str(tmp_path / "none.sock"))
        assert agent.tasks._cgroup_config() == (agent.cgroup_root, agent.cgroup_cluster)
        controls: list[tuple[int, dict[str, Any]]] = []

        async def control(job_id: int, op: dict[str, Any]) -> None:
            controls.append((job_id, op))
        agent.control = control  # type: ignore[method-assign]
        for frame in ["{", "[]", '{"type": "ack", "job_id": "7"}', '{"type": "launch"}',
                      '{"type": "launch", "launch": {"job_id": -1}}',
                      '{"type": "kill_tasks", "job_id": 1}', '{"type": "task_flow"}',
                      '{"type": "control", "job_id": 3, "control": {"op": "explode"}}',
                      '{"type": "batch", "messages": 5}', '{"type": "no-such-kind"}',
                      '{"type": "registered", "heartbeat": "soon"}']:
            agent._on_frame(frame)
        assert not agent._registered.is_set() and not agent.launching
        agent._on_frame(json.dumps({"type": "batch", "messages": [
            {"type": "control", "job_id": 3, "control": {"op": "signal", "signal": "x"}},
            {"type": "control", "job_id": 3, "control": {"op": "cancel"}},
            {"type": "registered", "heartbeat": 3.5, "config": {"kill_wait": 2}}]}))
        await asyncio.sleep(0)
        assert controls == [(3, {"op": "cancel"})]
        assert agent._registered.is_set() and agent.heartbeat == 3.5
        assert agent.cluster_config == {"kill_wait": 2}

    asyncio.run(body())


def test_agent_ignores_bad_notifications(tmp_path: Any) -> None:
    """A datagram on the notification socket that is not a StepdExited/StepdStarted is
    logged and ignored; a good one after it is still handled."""
    import socket

    from corral.agent.main import Agent

    async def body() -> None:
        agent = Agent(str(tmp_path), ["node-1"], str(tmp_path / "none.sock"))
        reported: list[int] = []
        agent._report = reported.append  # type: ignore[method-assign]
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        agent._dgram = b
        b.setblocking(False)
        for data in [b"{", b'{"event": "exited", "job_id": "1", "state": "COMPLETED"}',
                     b'{"event": "exited", "job_id": 2, "state": "WHATEVER"}',
                     b'{"event": "started", "job_id": 4, "pid": 0}',
                     m.encode(m.StepdStarted(job_id=5, pid=99)).encode(),
                     m.encode(m.StepdExited(job_id=6, state="FAILED", exit_code=3)).encode()]:
            a.send(data)
        agent._on_notify()
        a.close()
        b.close()
        assert reported == [6]

    asyncio.run(body())
