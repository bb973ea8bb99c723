"""Unit tests of the Borrower and the consume loop."""
