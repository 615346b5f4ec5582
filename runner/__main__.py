"""`python -m runner` is `plan-runner`."""

from runner.drivers.cli import run

run()
