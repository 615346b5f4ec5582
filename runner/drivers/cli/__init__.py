"""The `plan-runner` command line: the parser and its commands, the local loop, what a terminal shows."""
