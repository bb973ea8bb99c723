"""The scale-out stack tier: distributed faults, shipped code and S3 (`make test-stack`)."""
