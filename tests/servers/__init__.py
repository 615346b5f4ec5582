"""Local, scripted stand-ins for the services plan-runner talks to (real HTTP on 127.0.0.1)."""
