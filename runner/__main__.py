"""`python -m runner` is `plan-runner`."""

import sys

from runner.drivers.cli import main

sys.exit(main())
