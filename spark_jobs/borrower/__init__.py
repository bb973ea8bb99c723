"""The Borrower: executing leases shard by shard, warm or one run per lease, redelivery and user errors."""
