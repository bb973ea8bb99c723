"""Tests of the documentation: the site builds strictly, and the console examples still have their shape."""
