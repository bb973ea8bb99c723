"""The kill -9 chaos suite: worker processes killed while a producer appends."""
