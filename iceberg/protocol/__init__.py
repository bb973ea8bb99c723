"""The consumer-group protocol as pure functions: shards, state, leases, liveness, fences, lineage, dead letters.

Nothing here opens a catalog or reads a table (an import-linter contract in pyproject.toml keeps it
so). The Leader (``iceberg/leader.py``) and the Borrower (``spark_jobs/borrower/lease.py``) do the I/O and
ask these modules what to decide, so every decision is unit-tested without a catalog or Spark.
"""
