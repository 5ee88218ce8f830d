"""Command-line helper shared by the Python benchmarks."""


def take_option(args, name, n):
    """Removes `name` and its n values from args and returns the values (None when absent)."""
    if name not in args:
        return None
    i = args.index(name)
    values = args[i + 1:i + 1 + n]
    del args[i:i + 1 + n]
    return values
