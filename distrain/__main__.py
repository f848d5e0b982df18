"""``python -m distrain``: the same command line as the ``distrain`` console script."""

import sys

from distrain.cli import main

sys.exit(main())
