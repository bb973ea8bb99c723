"""icegroup's tests: unit (no Spark), integration (local Spark), e2e, chaos and benchmarks."""
