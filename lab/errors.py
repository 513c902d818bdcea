"""User-facing errors: raised for mistakes a user can fix, printed as one message without a traceback."""


class LabError(Exception):
    """A problem with the user's input (config, data, checkpoint); the message says what and how to fix it."""


class DataError(LabError):
    """Missing, corrupt or unreadable data."""
