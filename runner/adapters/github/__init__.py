"""GitHub over its REST API (PyGithub): dispatch, issues, pull requests, checks, events, permissions."""
