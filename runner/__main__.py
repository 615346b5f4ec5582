"""`python -m runner` is `plan-runner`."""

import sys

from runner.cli import main

sys.exit(main())
