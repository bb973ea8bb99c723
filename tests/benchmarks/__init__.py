"""Leader planning benchmarks; run with `make bench`."""
