"""The Slurm commands' wall time against Python's own start (issue #19), in one run.

    python bench/bench_commands.py [--bin DIR] [--before DIR] [--runs N] [--quick]
                                   [--only commands|curve|polling]

Prints: the interpreter's floor (`python -I -S -c pass`, the interpreter the commands in
DIR run: DIR/python), each hot command's median wall time, its difference from the
floor, and its CPU time (user + system) over the floor's, on an idle 4-node cluster —
as typed (its common form answered by cli/hot.py, sbatch's by cli/sbatch_hot.py) and as
the full command (a variable of its own set, which makes them decline); `squeue` at 0,
2,000, 10,000 and 50,000 queued jobs; and
the polling load: a scheduling pass and a submission with and without 16 clients asking
the controller in a loop for what a plain `squeue` asks (10,000 jobs): its text, printed
by the controller once per change (controller/answers.py), or with --before's
interpreter running the bench, the job table that older Corral sent.  With
BENCH_PYSPY=FILE (and py-spy installed beside this interpreter) the polled controller is
sampled for 15 s into FILE (py-spy's raw format: one stack and its count a line).

DIR defaults to this interpreter's bin directory.  --before DIR2 also times the commands
installed in DIR2 (an older Corral), run by run alongside, in a column of its own (and
DIR2's squeue beside DIR's on the curve).  Measure an installed copy (`pip install
.` into a fresh venv) rather than an editable checkout: an editable install's launchers
fall back to a plain `python` start (launchers/corral-launch).  Commands alternate run by
run, so a busy machine slows them alike; the medians still move with the machine's load,
so compare figures from one run only.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from _cluster import BenchCluster, bench_cluster, submit_body  # noqa: E402

QUICK = "--quick" in sys.argv


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


BIN = os.path.abspath(_arg("--bin", os.path.dirname(sys.executable)))
RUNS = int(_arg("--runs", "9" if QUICK else "31"))
PYTHON = os.path.join(BIN, "python")
BEFORE = os.path.abspath(_arg("--before", "")) if "--before" in sys.argv else None


def _wall(argv: list[str], env: dict[str, str], cwd: str) -> float:
    return _timed(argv, env, cwd)[0]


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the command and what it ran)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def _request(sock_path: str, method: str, path: str, body: bytes = b"") -> bytes:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: c\r\nConnection: close\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    chunks = []
    while chunk := s.recv(1 << 20):
        chunks.append(chunk)
    s.close()
    data = b"".join(chunks)
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        raise RuntimeError(data[:300])
    return data


def fill_held(c: BenchCluster, n: int) -> None:
    """n held jobs through the API, 8 submitters."""
    import json

    body = json.dumps(submit_body(held=True)).encode()
    sock_path = os.path.join(c.home, "corral.sock")

    def worker(count: int) -> None:
        for _ in range(count):
            _request(sock_path, "POST", "/v1/jobs", body)

    threads = [threading.Thread(target=worker, args=(n // 8 + (i < n % 8),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# A variable of the command's own, which no Corral command reads: its common form then
# runs the full command (cli/hot.py declines), for the "full" column.
FULL_ENV = {"sbatch": "SBATCH_BENCH_FULL", "squeue": "SQUEUE_BENCH_FULL",
            "sinfo": "SINFO_BENCH_FULL", "scontrol": "SCONTROL_BENCH_FULL",
            "sacct": "SACCT_BENCH_FULL", "scancel": "SCANCEL_BENCH_FULL"}


JOB_SCRIPT = ("#!/bin/bash\n#SBATCH --nodes=1 --ntasks=2 --cpus-per-task=2\n"
              "#SBATCH --gres=gpu:1 -p debug\n#SBATCH --export=ALL  # as tools write them\n"
              "srun hostname\n")


def bench_commands(c: BenchCluster) -> None:
    env = dict(c.env, PATH=BIN + os.pathsep + c.env["PATH"])
    c.run(os.path.join(BIN, "sbatch"), "-H", "--wrap", "true")  # job 1 for show/sacct
    commands: dict[str, list[str]] = {
        "floor: python -I -S -c pass": [PYTHON, "-I", "-S", "-c", "pass"],
        "python -c pass (with site)": [PYTHON, "-c", "pass"],
        "squeue (the held jobs above)": ["squeue"],
        "sinfo": ["sinfo"],
        "scontrol show job 1": ["scontrol", "show", "job", "1"],
        "scontrol show node node-1": ["scontrol", "show", "node", "node-1"],
        "sacct -j 1": ["sacct", "-j", "1"],
        "scancel 999999 (no such job)": ["scancel", "999999"],
        # last, then a pause: each submission sets the controller to work for a while (its
        # commit, a scheduling pass), and the other commands are timed on an idle cluster
        "sbatch -H --wrap true": ["sbatch", "-H", "--wrap", "true"],
        # a script with #SBATCH lines and the options tools pass (snakemake, submitit)
        "sbatch --parsable -H … job.sh": ["sbatch", "--parsable", "-H", "-J", "bench", "-t",
                                           "10", "--mem=1G", "-o", "out-%j.txt", "job.sh"],
    }
    with open(os.path.join(c.work, "job.sh"), "w") as f:
        f.write(JOB_SCRIPT)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    full: dict[str, list[tuple[float, float]]] = {k: [] for k in commands
                                                  if commands[k][0] != PYTHON}
    before: dict[str, list[tuple[float, float]]] = {k: [] for k in full}
    import json

    sock_path = os.path.join(c.home, "corral.sock")
    held_body = json.dumps(submit_body(held=True)).encode()
    posts: list[float] = []
    for _ in range(RUNS):
        for name, argv in commands.items():
            cmd = argv if argv[0] == PYTHON else [os.path.join(BIN, argv[0]), *argv[1:]]
            samples[name].append(_timed(cmd, env, c.work))
            if name in full:
                full[name].append(_timed(cmd, dict(env, **{FULL_ENV[argv[0]]: "1"}), c.work))
            if BEFORE is not None and name in before:
                before[name].append(_timed([os.path.join(BEFORE, argv[0]), *argv[1:]], env,
                                           c.work))
        # the controller's share of a submission: the request alone, from this process
        t0 = time.perf_counter()
        _request(sock_path, "POST", "/v1/jobs", held_body)
        posts.append(time.perf_counter() - t0)
        time.sleep(0.3)
    floor = statistics.median(w for w, _ in samples["floor: python -I -S -c pass"])
    floor_cpu = statistics.median(u for _, u in samples["floor: python -I -S -c pass"])

    def cells(s: list[tuple[float, float]]) -> str:
        wall, cpu = statistics.median(w for w, _ in s), statistics.median(u for _, u in s)
        return f"{_ms(wall)} {_ms(wall - floor)} {_ms(cpu - floor_cpu)}"

    print(f"\nCommands on an idle 4-node cluster (median of {RUNS}, commands from {BIN}); "
          "each: wall, wall - floor, CPU - floor (user + system)")
    print(f"{'':34s} {'now':>32s} {'full command':>32s}"
          f"{'':1s}{'before' if BEFORE is not None else '':>32s}")
    for name, s in samples.items():
        row = f"{name:34s} {cells(s)}"
        if full.get(name):
            row += f"  {cells(full[name])}"
        if before.get(name):
            row += f"  {cells(before[name])}"
        print(row)
    print("  (full command: the same argv with a variable of its own set, so that its common "
          "form is not answered by cli/hot.py")
    if BEFORE is not None:
        print(f"   before: commands from {BEFORE})")
    else:
        print("   )")
    print(f"The controller's share of a submission (POST /v1/jobs from the bench's process, "
          f"the rounds above): {_ms(statistics.median(posts))}")


def squeue_path(c: BenchCluster) -> str:
    """The request a plain `squeue` makes (captured from the command's own code, so an
    older Corral's interpreter running this bench asks what its squeue asks)."""
    os.environ["CORRAL_HOME"] = c.home
    from corral.cli import client, squeue

    seen: list[str] = []
    real = client.request

    def capture(method: str, path: str, body: object = None, **kw: object) -> object:
        seen.append(path)
        return real(method, path, body, **kw)  # type: ignore[arg-type]

    client.request = capture  # type: ignore[assignment]
    try:
        with open(os.devnull, "w") as null:
            out, sys.stdout = sys.stdout, null
            try:
                squeue._main([])
            finally:
                sys.stdout = out
    finally:
        client.request = real  # type: ignore[assignment]
    return next(p for p in seen if p.startswith("/v1/jobs"))


def bench_squeue_curve(c: BenchCluster, sizes: tuple[int, ...], header: bool = True) -> None:
    env = dict(c.env, PATH=BIN + os.pathsep + c.env["PATH"])
    squeue = os.path.join(BIN, "squeue")
    floor_cmd = [PYTHON, "-I", "-S", "-c", "pass"]
    if header:
        print(f"\nsqueue against the queue's length (median of {max(5, RUNS // 3)})")
    have = len(c.api("GET", "/v1/jobs", None)["jobs"])
    for n in sizes:
        if n > have:
            fill_held(c, n - have)
            have = n
        sq, fl, old, whole = [], [], [], []
        for _ in range(max(5, RUNS // 3)):
            sq.append(_wall([squeue], env, c.work))
            fl.append(_wall(floor_cmd, env, c.work))
            whole.append(_wall([squeue], dict(env, **{FULL_ENV["squeue"]: "1"}), c.work))
            if BEFORE is not None:
                old.append(_wall([os.path.join(BEFORE, "squeue")], env, c.work))
        d = statistics.median(sq) - statistics.median(fl)
        line = (f"  {n:6d} jobs: squeue {_ms(statistics.median(sq))}, floor "
                f"{_ms(statistics.median(fl))}, difference {_ms(d)}; the full command "
                f"{_ms(statistics.median(whole) - statistics.median(fl))} over the floor")
        if old:
            line += (f"; before {_ms(statistics.median(old))}, difference "
                     f"{_ms(statistics.median(old) - statistics.median(fl))}")
        print(line)


def _diag(sock_path: str) -> dict[str, object]:
    import json

    data = _request(sock_path, "GET", "/v1/diag")
    return json.loads(data.partition(b"\r\n\r\n")[2])  # type: ignore[no-any-return]


def _submit_and_pass(sock_path: str, body: bytes, rounds: int) -> tuple[float, float]:
    """Median submission round trip and median scheduling pass over `rounds` submissions."""
    submits, passes = [], []
    for _ in range(rounds):
        before = _diag(sock_path)["sched_passes"]
        t0 = time.perf_counter()
        _request(sock_path, "POST", "/v1/jobs", body)
        submits.append(time.perf_counter() - t0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            d = _diag(sock_path)
            if d["sched_passes"] != before:
                passes.append(float(d["last_sched_seconds"]))  # type: ignore[arg-type]
                break
            time.sleep(0.005)
        time.sleep(0.02)
    return statistics.median(submits), statistics.median(passes) if passes else float("nan")


def bench_polling_load(c: BenchCluster, n_jobs: int = 10_000, clients: int = 16) -> None:
    import json

    have = len(c.api("GET", "/v1/jobs", None)["jobs"])
    if have < n_jobs:
        fill_held(c, n_jobs - have)
    sock_path = os.path.join(c.home, "corral.sock")
    path = squeue_path(c)
    body = json.dumps(submit_body(held=False)).encode()
    rounds = 9 if QUICK else 25
    quiet_submit, quiet_pass = _submit_and_pass(sock_path, body, rounds)
    stop = threading.Event()
    answered = [0]

    def poller() -> None:
        while not stop.is_set():
            _request(sock_path, "GET", path)
            answered[0] += 1

    threads = [threading.Thread(target=poller, daemon=True) for _ in range(clients)]
    pid = c.controller_pid()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(1.0)
    # nothing submitted meanwhile: what an answer costs alone (MAX_AGE_S rebuilds and
    # the periodic pass included), against what it costs with submissions changing it
    cpu0, t1, answered0 = _cpu_seconds(pid), time.perf_counter(), answered[0]
    time.sleep(3.0)
    alone = _cpu_seconds(pid) - cpu0
    alone_rate = (answered[0] - answered0) / (time.perf_counter() - t1)
    alone_per_answer = alone / max(1, answered[0] - answered0)
    spy = None
    if os.environ.get("BENCH_PYSPY"):  # a profile of the polled controller, for study
        spy = subprocess.Popen([os.path.join(BIN, "py-spy"), "record", "-p", str(pid), "-r", "200",
                                "-f", "raw", "-o", os.environ["BENCH_PYSPY"], "-d", "15"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu0, t1, answered0 = _cpu_seconds(pid), time.perf_counter(), answered[0]
    busy_submit, busy_pass = _submit_and_pass(sock_path, body, rounds)
    cpu = (_cpu_seconds(pid) - cpu0) / (time.perf_counter() - t1)
    per_answer = (_cpu_seconds(pid) - cpu0) / max(1, answered[0] - answered0)
    if spy is not None:
        spy.wait()
    stop.set()
    for t in threads:
        t.join()
    rate = answered[0] / (time.perf_counter() - t0)
    print(f"\nPolling load: {clients} clients asking what a plain squeue asks, in a loop "
          f"({n_jobs} jobs; {rate:.0f} answers/s)")
    print(f"  submission round trip: {_ms(quiet_submit)} quiet, {_ms(busy_submit)} polled "
          f"({(busy_submit / quiet_submit - 1) * 100:+.0f} %)")
    print(f"  scheduling pass:       {_ms(quiet_pass)} quiet, {_ms(busy_pass)} polled "
          f"({(busy_pass / quiet_pass - 1) * 100:+.0f} %)")
    print(f"  the controller, polled: {cpu * 100:.0f} % of a CPU (all its threads), "
          f"{_ms(per_answer)} of CPU per answer, submissions included")
    print(f"  with no submissions:    {alone_rate:.0f} answers/s, "
          f"{_ms(alone_per_answer)} of controller CPU per answer")


def _cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system, all its threads (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    print(f"Corral's commands on {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}{' (quick)' if QUICK else ''}")
    only = _arg("--only", "")
    if only in ("", "commands"):
        with bench_cluster() as c:
            bench_commands(c)
    if only in ("", "curve"):
        with bench_cluster() as c:
            bench_squeue_curve(c, (0, 2000, 10_000))
            if not QUICK:
                bench_squeue_curve(c, (50_000,), header=False)
    if only in ("", "polling"):
        # the controller is the one this interpreter runs (`corral up` from its bin)
        with bench_cluster() as c:
            bench_polling_load(c)


if __name__ == "__main__":
    main()
