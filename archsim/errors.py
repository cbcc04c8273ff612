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


class ProgramFault(SimulationError):
    """The program itself fails at run time: a deadlock on semaphores, an ``SA_MATMUL`` on an
    array without weights, ``max_cycles`` passed.

    For a program the compiler produced this is a simulator bug (the CLI's ``simulating()``
    phase reports it with exit code 3); for a hand-written program (``archsim run --program
    FILE``) it is the author's mistake (one line, exit code 2).
    """


class WorkerDied(ArchsimError):
    """A worker process of a local pool (:mod:`archsim.workers`) ended without a result: killed
    (out of memory, a signal) or unable to start (a script that uses workers without a
    ``if __name__ == "__main__":`` guard, or a script read from standard input). The message
    says so and suggests fewer jobs."""
