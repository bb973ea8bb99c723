"""Run tags that tie a Dagster run to its group and its role in it."""

TAG_GROUP = "icegroup/group"
# "borrower" on warm Borrower runs, which the Leader counts before it starts another.
TAG_ROLE = "icegroup/role"
ROLE_BORROWER = "borrower"
# On a run that follows an upstream replay (follow_upstream): the replay's snapshot id on the group's source.
TAG_FOLLOWS = "icegroup/follows"
