"""The pure core: model, states and policies. No I/O, no clock: every function takes `now`."""
