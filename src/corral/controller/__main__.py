import sys

from corral.controller.main import main

sys.exit(main())
