"""``python -m collectors`` runs the node agent."""

import sys

from collectors.cli import main

sys.exit(main())
