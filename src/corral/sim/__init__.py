"""The simulator: the core's reconcile pass over an in-memory world, a virtual clock and the `sim`
cloud. It holds no policy of its own (docs/simulator.md)."""
