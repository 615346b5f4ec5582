"""Who runs untrusted code and how: identities, processes, supervision, the agent's environment and clone."""
