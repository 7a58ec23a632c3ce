"""Time the dashboard's data routes at 10,000 jobs × 1,000 nodes.

    python bench/bench_web.py [--runs N] [--jobs N] [--nodes N] [--chromium]

1,000 nodes × 8 GPUs; 10,000 jobs: half running (one GPU each), half pending with typed
reasons.  For each of the queue (/api/queue?all=1: every job's row, pending ones in line
order with their reason in words and estimated start; /api/queue as the page asks it: the
first 1,000 rows and the caller's own), the cluster grid (/api/cluster) and the
idle GPUs (/api/idle): the time to build the answer (web.views) and to encode it as JSON
(orjson, as the route does), as the controller does on its event loop.  With --chromium
(Debian's chromium): the queue page's rendering in headless Chromium too, from the same
data (fetch, build the table, lay it out), measured in the page with performance.now().

Prints medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from corral import jsonio  # noqa: E402
from corral.controller.harness import FakeClock, HarnessController  # noqa: E402
from corral.controller.identity import Identity  # noqa: E402
from corral.controller.webui import QUEUE_ROWS  # noqa: E402
from corral.model.config import ClusterConfig  # noqa: E402
from corral.model.job import Job, JobState, NodeAlloc  # noqa: E402
from corral.model.node import Node, Partition  # noqa: E402
from corral.model.reasons import PendingReason, ReasonCode  # noqa: E402
from corral.store.memory import MemoryStore  # noqa: E402
from corral.web import views  # noqa: E402

NOW = 1_700_000_000.0
STATIC = Path(views.__file__).parent / "static"


def build(n_nodes: int, n_jobs: int, seed: int = 1) -> HarnessController:
    rng = random.Random(seed)
    names = [f"gpu{i:04d}" for i in range(n_nodes)]
    config = ClusterConfig()
    config.nodes = [Node(name=n, cpus=64, real_memory=512_000, gpus=8, partitions=["gpu"])
                    for n in names]
    config.partitions = [Partition(name="gpu", nodes=list(names), default=True)]
    ctl = HarnessController(config, MemoryStore(), clock=FakeClock(NOW))
    for n in ctl.nodes.values():
        n.responding = n.registered = True
    running = n_jobs // 2
    for jid in range(1, n_jobs + 1):
        user = f"u{rng.randint(1, 500)}"
        if jid <= running:
            node = names[(jid - 1) % n_nodes]
            gpus = ctl.nodes[node].free_gpu_ids[:1]
            job = Job(job_id=jid, name="r", user=user, uid=1001, gid=1001, account="a",
                      partition="gpu", state=JobState.RUNNING, submit_time=NOW - 60,
                      start_time=NOW - 30, alloc=[NodeAlloc(node, 4, 4096, gpus)],
                      nodes=[node], batch_host=node)
            ctl.table.load(job)
            ctl.cluster.charge(job)
        else:
            job = Job(job_id=jid, name="p", user=user, uid=1001, gid=1001, account="a",
                      partition="gpu", state=JobState.PENDING, submit_time=NOW - jid,
                      priority=rng.randint(1, 10_000), gpus_per_node=8,
                      reason=ReasonCode.RESOURCES.value, sched_start=NOW + jid)
            ctl.table.load(job)
            ctl.pending_reasons[jid] = PendingReason(
                ReasonCode.RESOURCES, requested=(("gpus", 8),), available=(("gpus", 3),))
    return ctl


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, out


def bench_routes(ctl: HarnessController, runs: int) -> dict[str, bytes]:
    op = Identity(0, 0, "root", True)
    user = Identity(2000, 2000, "someone", False)  # owns none of them
    routes: dict[str, Callable[[], Any]] = {
        "/api/queue?all=1": lambda: views.queue(ctl, op, NOW),
        "/api/queue (user)": lambda: views.queue(ctl, user, NOW, QUEUE_ROWS),
        "/api/cluster": lambda: views.cluster(ctl, NOW),
        "/api/idle": lambda: views.idle_gpus(ctl, NOW),
    }
    bodies = {}
    for name, fn in routes.items():
        build_ms, data = median_ms(fn, runs)
        enc_ms, body = median_ms(lambda d=data: jsonio.dumps_bytes(d), runs)
        bodies[name] = body
        print(f"  {name:<24} build {build_ms:7.1f} ms  encode {enc_ms:6.1f} ms  "
              f"({len(body) // 1024} KiB)")
    return bodies


def bench_chromium(bodies: dict[str, bytes], runs: int) -> None:
    """The queue's table in headless Chromium: a stub server serves the page's script and
    the data."""
    chromium = shutil.which("chromium")
    if chromium is None:
        print("  chromium: not installed, skipped")
        return
    answers = {"/api/queue": bodies["/api/queue (user)"], "/api/all": bodies["/api/queue?all=1"],
               "/api/me": json.dumps({"user": "root", "uid": 0, "operator": True,
                                      "cluster": "bench", "csrf": "x"}).encode()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path.startswith("/static/"):
                body = (STATIC / path.rsplit("/", 1)[1]).read_bytes()
                kind = "text/javascript" if path.endswith(".js") else "text/css"
            elif path == "/bench":
                body = (STATIC / "index.html").read_bytes().replace(
                    b'<script src="/static/app.js" defer></script>', b"") + BENCH_PAGE
                kind = "text/html"
            elif path in answers:
                body, kind = answers[path], "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="bench-chromium-")
    try:
        for data, what in (("/api/queue", "as shown (1,000 rows)"), ("/api/all", "all rows")):
            chromium_run(chromium, profile, server.server_address[1], data, what, runs)
    finally:
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


def chromium_run(chromium: str, profile: str, port: int, data: str, what: str,
                 runs: int) -> None:
    url = f"http://127.0.0.1:{port}/bench?runs={runs}&data={data}"
    out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", "--no-first-run",
                          f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=300)
    marker = out.stdout.rsplit('id="bench-result">', 1)
    if len(marker) < 2:
        print("  chromium: no result", out.stderr[-500:])
        return
    result = json.loads(marker[1].split("<", 1)[0])
    print(f"  queue page in Chromium, {what}: parse+build+layout median "
          f"{result['median']:.0f} ms ({result['rows']} rows)")


# the page's own script, then a loop timing the queue's table: parse the JSON, build the
# HTML (app.js's queueHtml), put it in the page and lay it out
BENCH_PAGE = b"""<script src="/static/app.js"></script>
<script>
const runs = +new URLSearchParams(location.search).get('runs');
const x = new XMLHttpRequest();
x.open('GET', new URLSearchParams(location.search).get('data'), false);
x.send();
const times = [];
let rows = 0;
for (let i = 0; i < runs; i++) {
  const t = performance.now();
  const q = JSON.parse(x.responseText);
  document.querySelector('#main').innerHTML = queueHtml(q);
  document.body.offsetHeight;  // style and layout, now
  rows = q.jobs.length;
  times.push(performance.now() - t);
}
times.sort((a, b) => a - b);
document.body.insertAdjacentHTML('beforeend', '<pre id="bench-result">' +
  JSON.stringify({median: times[times.length >> 1], rows}) + '</pre>');
</script>"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--chromium", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    ctl = build(args.nodes, args.jobs)
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {args.jobs} jobs "
          f"(built in {time.perf_counter() - t:.1f} s); medians of {args.runs} runs")
    bodies = bench_routes(ctl, args.runs)
    if args.chromium:
        bench_chromium(bodies, args.runs)
    if os.environ.get("BENCH_WEB_DUMP"):
        Path(os.environ["BENCH_WEB_DUMP"]).write_bytes(bodies["/api/queue?all=1"])


if __name__ == "__main__":
    main()
