"""The durable layer of icegroup: catalog config, group config, shard planning, registry and lineage.

Everything here runs on pyiceberg alone, so the Leader can plan and commit without a Spark session.
"""
