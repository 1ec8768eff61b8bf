"""Symbolic Python values, one module per family (see docs/architecture.md for their order).

Importing the package imports container_methods.py, which fills method_table.py's table
of list, tuple, dict, set and iterator methods that containers.py dispatches through.
"""

from . import container_methods  # noqa: F401
