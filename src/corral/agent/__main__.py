import sys

from corral.agent.spawner import Spawner

# Fork the spawner while this process is still small (before aiohttp is imported).
spawner = Spawner.start()

from corral.agent.main import main  # noqa: E402

sys.exit(main(spawner=spawner))
