"""Argument checks for code built on the library: the checks its own public functions run.

``fail(expected, **received)`` raises the library's ``ValueError`` (``fail_type``: ``TypeError``),
whose message says what was expected and ends with ``Received: name=value``; the ``check_*``
helpers raise it for one condition each. The jobs and scripts of the repository use these, so
their messages read as the library's. The definitions live in :mod:`gluon_attention._checks`.
"""
from ._checks import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import
from ._checks import __all__  # noqa: F401  the same names, listed once there
