"""``python -m arc_kit`` runs the command line."""

import sys

from arc_kit.cli import main

sys.exit(main())
