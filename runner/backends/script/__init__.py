"""A scripted stand-in agent (demo, tests): the backend and the child process that plays the script."""
