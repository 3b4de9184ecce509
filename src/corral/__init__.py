"""corral: a workload manager for cloud and cluster compute."""

__version__ = "0.1.0"

# The agent protocol (docs/agent.md, "Versions"): the number goes up when a server and an agent of
# different numbers can no longer work together. An agent tells it at pairing and resuming; the
# server refuses an agent whose number it does not speak. Agents that tell none speak 1.
AGENT_PROTOCOL = 1
# The agent protocols this server speaks, oldest first.
AGENT_PROTOCOLS_SPOKEN = (1,)
# The fields of a work item that an agent acts on and an agent of an older corral would ignore, running
# the job wrongly (docs/agent.md, "Versions"): an agent names those it knows in each work request
# (`knows`), and the server gives it no attempt with one it did not name.
AGENT_KNOWS = ("chdir", "separate_stderr", "script", "signal")
