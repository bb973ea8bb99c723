"""Unit tests: pure functions and the SQLite-catalog lakehouse, no Spark."""
