"""The Borrower: Spark session setup, shard reads, transforms and the fenced sink commit."""
