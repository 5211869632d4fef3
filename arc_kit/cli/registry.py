"""The table of ``arc-kit``'s sub-commands: each command module registers its commands here as it is imported.

It knows a command's name, its one-line help and the function that sets up its parser; it knows nothing of
what the commands do, nor of the top parser that lists them (``cli.build_parser``).
"""

from __future__ import annotations

COMMANDS = {}


def command(name: str, help_text: str):
    """Register ``function(parser)`` as the argument setup of a sub-command; it returns the runner, which returns
    the exit status (None: 0)."""
    def register(setup):
        COMMANDS[name] = (help_text, setup)
        return setup
    return register
