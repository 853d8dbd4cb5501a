"""The one error type for bad user input: the CLI turns it into exit code 2 and one line."""


class SpecError(ValueError):
    """Bad input: the message names the problem and the fix, on one line."""
