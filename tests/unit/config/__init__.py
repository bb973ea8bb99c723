"""Unit tests of the configuration: the lakehouse, the groups, and the engines they name."""
