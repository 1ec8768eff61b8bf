"""Python stand-ins for C-implemented builtins and library functions, traced by capture.

`registry` holds the table and the two ways to fill it (`polyfill` for a Python
implementation to inline, `capture_rule` for a symbolic one); one module per
family registers its entries beside their implementations. Importing this
package loads them all.
"""

from . import registry
from .registry import call, capture_rule, entries, family, find, polyfill
from . import iterators, itertools, builtins, functools, operator, collections, sets, tracebacks, numpy, typing_module, warnings_module, copy_module, re_module  # noqa: F401
