"""`python -m runner` is `plan-runner`."""

from runner.drivers.cli.main import run

run()
