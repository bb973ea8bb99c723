"""Unit tests of iceberg/protocol/: the decisions, as pure functions."""
