"""Git: the only importer of GitPython for work-branch operations and the session's git evidence."""
