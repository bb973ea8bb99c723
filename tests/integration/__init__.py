"""Integration tests on a local Spark session and the test lakehouse."""
