"""Error types of the ``archsim`` package.

Each is raised where the fault is found and turned into a one-line message by the CLI.
"""


class ArchsimError(Exception):
    """Base of every user-facing error raised by ``archsim`` (config, simulation, CLI input)."""


class ConfigError(ArchsimError):
    """A configuration file, preset name or ``--set`` override is invalid.

    The message names the file (or preset / override), the key, and the allowed values.
    """


class SimulationError(ArchsimError):
    """The simulated machine cannot run the given program (deadlock, capacity, bad address)."""
