"""The wheel, installed the way a user installs it."""
