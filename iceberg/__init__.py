"""The durable layer of icegroup, on pyiceberg: decisions, what icegroup keeps, config, and each concept's I/O.

``protocol/`` decides, ``store/`` holds every table and property icegroup keeps, ``config/`` reads
the lakehouse and the groups; the modules here read and write around the decisions
(``docs/contributing.md``, "Where things are").
"""
