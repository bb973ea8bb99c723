"""The REST tier: icegroup against a local Iceberg REST catalog server, what only a REST catalog has."""
