"""The built-in agent on the Anthropic Messages API: its loop, the child that runs it as the agent, its tools, its errors."""
