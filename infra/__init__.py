"""Setting up and starting the stack: installers, the embedded demo."""
