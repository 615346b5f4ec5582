"""Evidence for the verdict: gates, set-up, the guard around the agent, collecting a session's evidence."""
