"""The GitHub Actions job: its modes (session, tick, reply, reconcile), the pull request it keeps, its caches and installs."""
