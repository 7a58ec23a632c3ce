import sys

from corral.agent.main import main

sys.exit(main())
