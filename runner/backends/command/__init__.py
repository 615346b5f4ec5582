"""Any CLI named by `agent.executable`."""
