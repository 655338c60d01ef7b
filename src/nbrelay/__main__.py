"""`python -m nbrelay` runs the command-line interface."""

import sys

from nbrelay.cli import main

sys.exit(main())
