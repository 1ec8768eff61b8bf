"""functools (reduce has a handler in values/builtins.py; partial is a PartialValue)."""
