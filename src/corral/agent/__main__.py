import sys

from corral.agent.cli import main

sys.exit(main())
