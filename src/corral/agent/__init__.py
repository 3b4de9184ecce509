"""The corral node agent: `python -m corral.agent`. See docs/agent.md for the protocol and behaviour."""

from corral.agent.agent import Agent, AgentOptions, run_agent

__all__ = ["Agent", "AgentOptions", "run_agent"]
