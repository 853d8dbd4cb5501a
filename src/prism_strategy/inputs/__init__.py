"""The edges that build one Scenario from what the user already has: command-line flags, the
user's script (read, not run), framework configs, a stored run, strategy.toml."""
