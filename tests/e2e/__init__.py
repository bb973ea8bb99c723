"""End-to-end tests: the demo and a real Dagster daemon, each in subprocesses."""
