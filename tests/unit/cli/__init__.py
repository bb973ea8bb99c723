"""Unit tests of the icegroup command: its verbs, output, exit codes and errors."""
