"""The HTTP server: the API used by the CLI and by agents, metrics, and the control loop task."""
