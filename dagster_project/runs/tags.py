"""Run tags that tie a Dagster run to its group and its role in it."""

TAG_GROUP = "icegroup/group"
# "borrower" on warm Borrower runs, which the Leader counts before it starts another.
TAG_ROLE = "icegroup/role"
ROLE_BORROWER = "borrower"
# On a run that follows an upstream replay (follow_upstream): the replay's snapshot id on the group's source.
TAG_FOLLOWS = "icegroup/follows"
# "1" on the warm Borrower runs the Leader keeps up idle (the group's warm_borrowers).
TAG_WARM = "icegroup/warm"
# On Borrower runs: the code stamp of the definitions that requested it (``runs/code.py``).
TAG_CODE = "icegroup/code"
