"""Configuration read from files and the environment: the lakehouse, and the groups' YAML."""
