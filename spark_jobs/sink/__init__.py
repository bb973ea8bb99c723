"""The sink: its shape, the fenced commits that publish shards and replays, migration, and the Java side."""
