"""`python -m corral.controller`: the controller process (slurmctld's role)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import signal
import ssl
import sys
import time
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from corral import paths
from corral.auth import ConnectionGuard, Verifier
from corral.controller import logsafe, tls
from corral.controller.auth import GUARD, LISTEN, REGISTRY, VERIFIER, Registry, signed_requests
from corral.controller.duties import periodic_duties
from corral.controller.server import Api
from corral.controller.state import Controller
from corral.model.config import ConfigError, parse_config
from corral.store.base import NewerSchema
from corral.store.sqlite import SqliteStore

log = logging.getLogger("corral.controller")

# A connection that has no request in progress for this long is closed (slurm.conf's
# MessageTimeout, default 10 s, as slurmctld bounds a message's round trip).
DEFAULT_IDLE_TIMEOUT = 10
# Open connections per uid on the Unix socket (each srun holds one; root and the
# controller's own user are not limited) and per remote address over TCP (a joined
# machine's agent funnels all its users' commands).
CONNECTIONS_PER_USER = 256
CONNECTIONS_PER_ADDRESS = 1024
OPEN_FILES = 65536


class TLSSite(web.TCPSite):
    """aiohttp's TCPSite, with a bound on the TLS handshake (asyncio's default is 60 s,
    in which a connection that never finishes it holds a descriptor uncounted)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *,
                 ssl_context: ssl.SSLContext, handshake_timeout: float, backlog: int) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, backlog=backlog)
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout)


def raise_open_files_limit(want: int = OPEN_FILES) -> int:
    """As many descriptors as the hard limit allows, up to `want`: the default 1,024
    is what a few users' idle connections once used up."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            pass
    return soft


async def serve(home: str, config_path: str, listen: str | None = None) -> int:
    # The store's writer thread and the event loop share the GIL; a short switch interval
    # keeps an API answer from waiting up to 5 ms behind the writer.
    sys.setswitchinterval(0.0005)
    with open(config_path) as f:
        config = parse_config(f.read())
    for key in sorted(set(config.unknown)):
        log.info("configuration key %s is not used by Corral; ignored", key)
    store = SqliteStore(paths.db_path(home))
    ctl = Controller(config, store, config_path=config_path, home=home)
    ctl.recover()
    from corral.controller import partitions
    partitions.restore(ctl)  # partitions changed at runtime (scontrol update PartitionName=)
    # The recovered state (every job record in memory) lives as long as the controller: out
    # of the cyclic collector's scans, so a pass's allocations do not trigger full
    # collections over it (bench_sched --freeze-gc: ~0.4 s of a 10,000-job pass).  Reference
    # counting still frees what is dropped later.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    api = Api(ctl, stop.set)
    app = api.app()
    # over TCP only agents with the join token and requests they sign get through
    app.middlewares.append(signed_requests)
    ssl_ctx = None
    if listen:
        host, port = tls.parse_listen(listen)
        ssl_ctx = tls.server_context(*tls.ensure_certificate(home, host))
        registry = Registry(store.load_auth(), ctl.writer.auth)  # changes: via the writer
        await ctl.durable()  # the master secret, when this is the first listening start
        app[REGISTRY] = registry
        # nothing signed before this run started passes: a replay cannot outlive a restart
        app[VERIFIER] = Verifier(registry.key_for, not_before=ctl.started)
        app[LISTEN] = {"url": tls.public_url(host, port),
                       "fingerprint": tls.certificate_fingerprint(home)}
    raise_open_files_limit()
    idle = config.get_int("MessageTimeout") or DEFAULT_IDLE_TIMEOUT
    guard = ConnectionGuard(CONNECTIONS_PER_USER, CONNECTIONS_PER_ADDRESS,
                            exempt={"uid:0", f"uid:{os.geteuid()}"})
    app[GUARD] = guard
    # lingering: after refusing a body unread (413), wait this long for the rest, not 10 s
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=idle,
                           lingering_time=1.0)
    await runner.setup()
    assert runner.server is not None
    guard.install(runner.server)
    sock_path = paths.socket_path(home)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    site = web.UnixSite(runner, sock_path, backlog=1024)
    await site.start()
    # root's controller serves every user (identity from SO_PEERCRED); a user's only them
    os.chmod(sock_path, 0o666 if os.geteuid() == 0 else 0o600)
    if listen and ssl_ctx is not None:
        tcp = TLSSite(runner, host, port, ssl_context=ssl_ctx, handshake_timeout=idle,
                      backlog=1024)
        await tcp.start()
        log.info("listening on %s:%d (TLS, certificate %s)", host, port,
                 tls.certificate_fingerprint(home))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async def periodic() -> None:
        last = time.monotonic()
        while True:
            # the interval is read again each second: a reconfigure's applies at once
            left = last + ctl.cadence.params.tick_interval - time.monotonic()
            if left > 0:
                await asyncio.sleep(min(1.0, left))
                continue
            periodic_duties(ctl, time.time())
            last = time.monotonic()

    tick = loop.create_task(periodic())
    log.info("controller for cluster %s listening on %s", config.cluster_name, sock_path)
    await stop.wait()
    log.info("controller stopping")
    tick.cancel()
    ctl.flush_usage(time.time(), force=True)  # fairshare usage is batched: keep the last seconds
    await ctl.durable()
    await runner.cleanup()
    store.close()
    try:
        os.unlink(sock_path)
    except FileNotFoundError:
        pass
    return 0


def _run(coro: Coroutine[Any, Any, int]) -> int:
    """On uvloop: its transports halve the event loop's cost per connection, and every
    sbatch/squeue is one connection (`CORRAL_UVLOOP=0` runs asyncio's own loop)."""
    if os.environ.get("CORRAL_UVLOOP", "1") != "0":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corral-controller")
    ap.add_argument("--home", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--listen", default=None, metavar="HOST:PORT",
                    help="also serve agents and remote CLIs over TCP+TLS (corral join)")
    args = ap.parse_args(argv)
    home = os.path.abspath(args.home) if args.home else paths.corral_home()
    config_path = args.config or paths.config_path(home)
    # The log format names no caller, thread or process: don't gather them for every line
    # (the logging HOWTO's "Optimization"); the controller logs one line per job event.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=fmt, stream=sys.stderr)
    logsafe.install(fmt)  # values from callers cannot forge lines (docs/SECURITY.md)
    try:
        return _run(serve(home, config_path, args.listen))
    except ConfigError as e:
        log.error("configuration error in %s: %s", config_path, e)
        return 1
    except (OSError, ValueError, NewerSchema) as e:
        log.error("cannot start: %s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
