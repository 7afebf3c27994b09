"""The one error a collection that cannot be read raises (callers catch it to exit with a message)."""


class DatasetError(ValueError):
    """A collection that cannot be loaded; the message names file, line, id and what was expected."""
