"""Run tags that tie a Dagster run to its group, lease, epoch and attempt."""

TAG_GROUP = "icegroup/group"
TAG_LEASE = "icegroup/lease"
TAG_EPOCH = "icegroup/epoch"
TAG_ATTEMPT = "icegroup/attempt"
