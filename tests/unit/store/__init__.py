"""Unit tests of iceberg/store/: the tables and properties icegroup keeps, on a real SQLite catalog."""
