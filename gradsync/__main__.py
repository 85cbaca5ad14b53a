"""``python -m gradsync``: the command line, for launchers that start modules (torchrun -m)."""

import sys

from gradsync.cli import main

sys.exit(main())
