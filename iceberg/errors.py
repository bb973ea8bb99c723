"""Errors that a user can act on: each one names what is wrong and how to fix it."""


class IcegroupError(Exception):
    """Base class for every error icegroup raises on purpose."""


class ConfigError(IcegroupError):
    """A lakehouse or group config field is invalid; the message names the field and the fix."""


class SourceError(IcegroupError):
    """The source table cannot be consumed as configured (missing, non-append snapshot, expired)."""


class RegistryConflict(IcegroupError):
    """Another Leader committed the registry first; this tick's decisions are void."""


class SinkError(IcegroupError):
    """The sink cannot accept a Borrower's output."""
