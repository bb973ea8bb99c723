"""Runs of the Dagster instance: the tags that tie a run to its group, their state, and executing one."""
