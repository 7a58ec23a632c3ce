"""The dashboard, `corral why` and the event stream on a real cluster, with real users.

The dashboard is driven by real headless Chromium over the DevTools protocol (Debian's
`chromium`, installed here if missing; the browser tests skip when it cannot be had):
alice's running job shows on the GPUs the controller gave it, with each GPU's utilisation
as the agent sampled it (simulated GPUs), her pending job's reason in words, the idle GPUs
she holds; bob is refused her job's page.  Plain HTTP checks the login token (single use) and
the refusals of cross-site requests (docs/SECURITY.md, "The dashboard").

CORRAL_SCREENSHOT=docs/dashboard.png keeps a screenshot of the cluster page (the README's).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from corral import paths
from corral.web.events_client import events
from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401  (the `users` fixture)

pytestmark = [pytest.mark.slow, needs_test_users]

CONFIG = """\
ClusterName=webtest
KillWait=2
MinJobAge=600
SchedulerInterval=1
JobAcctGatherFrequency=1
NodeName=node-[1-2] CPUs=8 RealMemory=8000 Gres=gpu:4
PartitionName=gpu Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""
# the agents' GPU samples (agent/gpu.py's simulated backend reads sim_gpus.json in the
# cluster's home): what the grid must show as each GPU's utilisation
SIM_UTIL = {("node-1", 0): 87.0, ("node-1", 1): 42.0, ("node-1", 2): 0.0, ("node-1", 3): 0.0,
            ("node-2", 0): 65.0, ("node-2", 1): 9.0, ("node-2", 2): 0.0, ("node-2", 3): 0.0}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run", "--disable-extensions", "--window-size=1400,900"]


def have_chromium() -> bool:
    if os.path.exists(CHROMIUM):
        return True
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    try:
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True,
                       timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    except (OSError, subprocess.TimeoutExpired):
        return False
    return os.path.exists(CHROMIUM)


class Browser:
    """Headless Chromium driven over the DevTools protocol: navigate, evaluate, wait."""

    def __init__(self, profile: Path) -> None:
        self.proc = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.loop = asyncio.new_event_loop()
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.session: aiohttp.ClientSession | None = None
        self.next_id = 0
        try:
            self.loop.run_until_complete(self._connect())
        except BaseException:
            self.close()
            raise

    async def _connect(self) -> None:
        assert self.proc.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = await self.loop.run_in_executor(None, self.proc.stderr.readline)
            if not line and self.proc.poll() is not None:
                raise RuntimeError("chromium exited")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        assert port is not None, "chromium did not open its DevTools port"
        # keep reading its stderr, or a chatty browser blocks on a full pipe
        threading.Thread(target=lambda: [None for _ in self.proc.stderr or ()],
                         daemon=True).start()
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in await r.json() if t["type"] == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                                max_msg_size=64 * 1024 * 1024)

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 30)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(method, **params))

    def go(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def eval(self, expr: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                      awaitPromise=True)
        return r.get("result", {}).get("value")

    def wait(self, expr: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.eval(expr)
            if value:
                return value
            time.sleep(0.2)
        text = self.eval("document.body ? document.body.innerText : ''")
        raise AssertionError(f"timed out waiting for {expr}; page says: {text!r:.2000}")

    def screenshot(self, path: str) -> None:
        import base64

        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if self.session is not None:
                self.loop.run_until_complete(self.session.close())
        finally:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.loop.close()


@pytest.fixture(scope="module")
def web_cluster(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    base = Path(tempfile.mkdtemp(prefix="corral-web-"))
    base.chmod(0o755)  # the users reach the socket
    c = Cluster(base / "c", CONFIG)
    c.home.mkdir()
    (c.home / "sim_gpus.json").write_text(json.dumps([
        {"node": node, "index": i, "util": util, "memory_used": int(util) << 28,
         "memory_total": 80 << 30, "processes": [{"pid": 1}] if util else []}
        for (node, i), util in SIM_UTIL.items()]))
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs(web_cluster: Cluster, users: dict[str, pwd.struct_passwd]  # noqa: F811
         ) -> dict[str, int]:
    """alice: two 3-GPU jobs running (one per node), a 2-GPU one waiting for resources."""
    c, alice = web_cluster, users["corral-alice"]
    out = {}
    for key, gpus, name in (("a", 3, "train-a"), ("b", 3, "train-b"), ("c", 2, "held-back")):
        r = run_as(c, alice, "sbatch", "--parsable", f"--gres=gpu:{gpus}", "-J", name,
                   "-o", f"web-{key}-%j.out", "--wrap", "echo hello from $SLURM_JOB_ID; sleep 300")
        assert r.returncode == 0, r.stderr
        out[key] = int(r.stdout.strip())
        if key != "c":
            c.wait_state(out[key], "RUNNING")
    c.wait_for(lambda: "Resources" in c.ok("squeue", "-h", "-j", str(out["c"]), "-o", "%r"),
               what="the third job to wait for resources")
    yield out
    c.run("scancel", *map(str, out.values()))


def login_url(c: Cluster, user: pwd.struct_passwd) -> str:
    r = run_as(c, user, "corral", "web", "-q")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/login#token=[\w-]+", url), url
    return url


def gpus_of(c: Cluster, job: int) -> tuple[str, list[int]]:
    out = c.ok("scontrol", "-d", "show", "job", str(job))
    m = re.search(r"Nodes=(\S+) .*GRES=gpu:\d+\(IDX:([\d,-]+)\)", out)
    assert m, out
    ids: list[int] = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        ids += range(int(lo), int(hi or lo) + 1)
    return m.group(1), ids


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not have_chromium():
        pytest.skip("Debian's chromium is not installed and cannot be")
    profile = Path(tempfile.mkdtemp(prefix="corral-chromium-"))
    b = Browser(profile)
    try:
        yield b
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)


def test_dashboard_in_chromium(web_cluster: Cluster, jobs: dict[str, int], browser: Browser,
                               users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c, b = web_cluster, browser
    alice, bob = users["corral-alice"], users["corral-bob"]
    b.go(login_url(c, alice))
    b.wait("document.querySelector('#who') && "
           "document.querySelector('#who').textContent === 'corral-alice'")
    # the grid: each running job on exactly the GPUs the controller allocated it
    for key in ("a", "b"):
        node, ids = gpus_of(c, jobs[key])
        cells = b.wait(f"""(() => {{
            const cells = [...document.querySelectorAll('td.gpu[data-job="{jobs[key]}"]')];
            return cells.length ? cells.map(td => [td.dataset.node, +td.dataset.gpu]) : null;
        }})()""")
        assert sorted(map(tuple, cells)) == [(node, i) for i in ids]
        for i in ids:  # each held GPU's utilisation as its agent sampled it
            want = f"{SIM_UTIL[(node, i)]:.0f}%"
            b.wait(f"(document.querySelector('td.gpu[data-node=\"{node}\"]"
                   f"[data-gpu=\"{i}\"]') || {{}}).textContent.includes('{want}')"
                   " || (location.reload(), false)", timeout=40)
    if os.environ.get("CORRAL_SCREENSHOT"):
        b.screenshot(os.environ["CORRAL_SCREENSHOT"])
    # an allocated GPU at 0% with no process is on the idle list
    b.eval("location.hash = '#idle'")
    node, ids = gpus_of(c, jobs["a"])
    idle = [i for i in ids if not SIM_UTIL[(node, i)]]
    assert idle
    b.wait(f"[...document.querySelectorAll('a[href=\"#job/{jobs['a']}\"]')].length"
           f" === {len(idle)}")
    # the queue: the pending job's reason in words, its place in line
    b.eval("location.hash = '#queue'")
    why = b.wait(f"(document.querySelector('td.why[data-job=\"{jobs['c']}\"]') || "
                 "{}).textContent")
    assert "needs 2 GPUs on one node; the most free on any node is 1" in why, why
    assert "(Resources)" in why
    # her own job's page: details and the output tail
    b.eval(f"location.hash = '#job/{jobs['a']}'")
    tail = b.wait("(document.querySelector('pre.tail') || {}).textContent")
    b.wait(f"document.querySelector('pre.tail').textContent.includes('hello from {jobs['a']}')"
           " || (location.reload(), false)")
    assert "train-a" in b.eval("document.querySelector('h1').textContent"), tail
    # live: cancelling the waiting job updates the queue without a reload
    b.eval("location.hash = '#queue'")
    b.wait(f"!!document.querySelector('td.why[data-job=\"{jobs['c']}\"]')")
    b.eval("window.__marker = 1")
    r = run_as(c, alice, "scontrol", "hold", str(jobs["c"]))
    assert r.returncode == 0, r.stderr
    b.wait(f"(document.querySelector('td.why[data-job=\"{jobs['c']}\"]') || {{}})"
           ".textContent.includes('JobHeldUser')", timeout=20)
    assert b.eval("window.__marker") == 1  # the same page: no reload
    run_as(c, alice, "scontrol", "release", str(jobs["c"]))

    # bob: the cluster's shape, not alice's job's details
    b.go(login_url(c, bob))
    b.wait("(document.querySelector('#who') || {}).textContent === 'corral-bob'")
    b.eval(f"location.hash = '#job/{jobs['a']}'")
    refused = b.wait("(document.querySelector('#refused') || {}).textContent")
    assert "Access/permission denied" in refused
    assert "hello from" not in b.eval("document.body.innerText")
    b.eval("location.hash = '#queue'")
    b.wait(f"!!document.querySelector('td.why[data-job=\"{jobs['c']}\"]')")
    text = b.eval("document.querySelector('table.queue tbody').innerText")
    assert "corral-alice" in text and "train-a" not in text and "held-back" not in text


# ---- plain HTTP: tokens, cross-site refusals ----------------------------------------------
def _http(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, Any], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"null")


def test_token_is_single_use_and_cross_site_requests_are_refused(
        web_cluster: Cluster, jobs: dict[str, int],
        users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c, alice, bob = web_cluster, users["corral-alice"], users["corral-bob"]
    url = login_url(c, alice)
    base, _, token = url.partition("/login#token=")
    origin = {"Origin": base}
    # a POST from another site is refused, and does not spend the token
    st, _, body = _http(base + "/login", "POST", {"token": token},
                        {"Origin": "http://evil.example"})
    assert st == 403, body
    st, _, body = _http(base + "/login", "POST", {"token": token},
                        {**origin, "Sec-Fetch-Site": "same-site"})
    assert st == 403, body
    st, headers, body = _http(base + "/login", "POST", {"token": token}, origin)
    assert st == 200 and body["user"] == "corral-alice", body
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
    session = cookie.split(";")[0]
    st, _, body = _http(base + "/login", "POST", "not an object", origin)
    assert st == 401, body
    # spent: the same token again is refused
    st, _, body = _http(base + "/login", "POST", {"token": token}, origin)
    assert st == 401 and "spent or expired" in body["error"]
    # the session works; without it nothing is shown
    st, _, me = _http(base + "/api/me", headers={"Cookie": session})
    assert st == 200 and me["user"] == "corral-alice"
    assert _http(base + "/api/queue")[0] == 401
    # a state-changing POST needs the page's Origin and the session's CSRF token
    assert _http(base + "/logout", "POST", {}, {"Cookie": session,
                                                "Origin": "http://evil.example",
                                                "X-CSRF-Token": me["csrf"]})[0] == 403
    assert _http(base + "/logout", "POST", {}, {"Cookie": session, **origin})[0] == 403
    # a browser's cross-site read, and a rebound host name, are refused
    assert _http(base + "/api/queue", headers={"Cookie": session,
                                               "Sec-Fetch-Site": "cross-site"})[0] == 403
    assert _http(base + "/api/queue", headers={"Cookie": session,
                                               "Host": "attacker.example"})[0] == 421
    assert _http(base + "/api/queue", headers={"Cookie": session})[0] == 200
    # GET changes nothing: /logout is POST only
    assert _http(base + "/logout", headers={"Cookie": session})[0] == 405
    # bob's session: alice's job page refused, her job's row without its details
    bob_url = login_url(c, bob)
    _, bob_headers, _ = _http(base + "/login", "POST",
                              {"token": bob_url.partition("#token=")[2]}, origin)
    bob_session = bob_headers["Set-Cookie"].split(";")[0]
    st, _, body = _http(base + f"/api/job/{jobs['a']}", headers={"Cookie": bob_session})
    assert st == 403 and "hello" not in json.dumps(body)
    st, _, body = _http(base + f"/api/job/{jobs['a']}", headers={"Cookie": session})
    assert st == 200 and body["name"] == "train-a"
    # logged out: the cookie is dead
    assert _http(base + "/logout", "POST", {}, {"Cookie": session, **origin,
                                               "X-CSRF-Token": me["csrf"]})[0] == 200
    assert _http(base + "/api/me", headers={"Cookie": session})[0] == 401


def test_corral_why_prints_the_numbers(web_cluster: Cluster, jobs: dict[str, int],
                                       users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c = web_cluster
    r = run_as(c, users["corral-alice"], "corral", "why", str(jobs["c"]))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"Job {jobs['c']} is PENDING in partition gpu: Resources" in out
    assert "needs 2 GPUs on one node; the most free on any node is 1" in out
    assert re.search(r"requested per node: .*gpus 2", out), out
    assert re.search(r"available per node: .*gpus 1", out), out
    assert "place in line: 1st of 1 pending in partition gpu" in out
    assert "estimated start: " in out
    # squeue's reason stays Slurm's token
    assert c.ok("squeue", "-h", "-j", str(jobs["c"]), "-o", "%r").strip() == "Resources"
    for bad in ("999999", "abc", "7_x"):
        r = c.run("corral", "why", bad)
        assert r.returncode == 1 and "Invalid job id specified" in r.stderr, (bad, r.stderr)
        assert "Traceback" not in r.stderr


def test_event_stream_delivers_a_jobs_transitions_in_order(
        web_cluster: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c, bob = web_cluster, users["corral-bob"]
    sock = paths.socket_path(str(c.home))
    got: list[dict[str, Any]] = []
    ready = threading.Event()

    def listen() -> None:
        for ev in events(nodes=False, hello=True, socket_path=sock, timeout=60):
            if ev["type"] == "hello":
                ready.set()
                continue
            got.append(ev)
            if ev["event"] == "ended":
                return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(20)
    r = run_as(c, bob, "sbatch", "--parsable", "-p", "gpu", "--wrap", "sleep 1")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    t.join(60)
    mine = [(e["event"], e["state"]) for e in got if e["job_id"] == jid]
    assert mine[0] == ("submitted", "PENDING") and mine[-1] == ("ended", "COMPLETED"), mine
    assert ("started", "RUNNING") in mine
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)
    assert all(e["user"] == "corral-bob" for e in got if e["job_id"] == jid)
