"""`python -m corral.controller`: the controller process (slurmctld's role)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time

from aiohttp import web

from corral import paths
from corral.controller.server import Api
from corral.controller.state import Controller
from corral.model.config import ConfigError, parse_config
from corral.store.sqlite import SqliteStore

log = logging.getLogger("corral.controller")


async def serve(home: str, config_path: str) -> int:
    with open(config_path) as f:
        config = parse_config(f.read())
    for key in sorted(set(config.unknown)):
        log.info("configuration key %s is not used by Corral; ignored", key)
    store = SqliteStore(paths.db_path(home))
    ctl = Controller(config, store, config_path=config_path, home=home)
    ctl.recover()
    stop = asyncio.Event()
    api = Api(ctl, stop.set)
    runner = web.AppRunner(api.app(), access_log=None, handle_signals=False)
    await runner.setup()
    sock_path = paths.socket_path(home)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    site = web.UnixSite(runner, sock_path, backlog=1024)
    await site.start()
    # root's controller serves every user (identity from SO_PEERCRED); a user's only them
    os.chmod(sock_path, 0o666 if os.geteuid() == 0 else 0o600)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    interval = max(1, config.get_int("SchedulerInterval"))

    async def periodic() -> None:
        while True:
            await asyncio.sleep(interval)
            ctl.request_schedule()
            now = time.time()
            ctl.check_time_limits(now)
            ctl.check_node_health(now)
            ctl.expire_finished(now)

    tick = loop.create_task(periodic())
    log.info("controller for cluster %s listening on %s", config.cluster_name, sock_path)
    await stop.wait()
    log.info("controller stopping")
    tick.cancel()
    await ctl.durable()
    await runner.cleanup()
    store.close()
    try:
        os.unlink(sock_path)
    except FileNotFoundError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corral-controller")
    ap.add_argument("--home", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    home = os.path.abspath(args.home) if args.home else paths.corral_home()
    config_path = args.config or paths.config_path(home)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        return asyncio.run(serve(home, config_path))
    except ConfigError as e:
        log.error("configuration error in %s: %s", config_path, e)
        return 1
    except OSError as e:
        log.error("cannot start: %s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
