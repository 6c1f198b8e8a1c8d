"""Public names replaced by an API change, kept for one release: a module's ``__getattr__``
that returns the old name's object with a ``DeprecationWarning`` naming its replacement
(listed in CHANGELOG.md)."""
import sys
import warnings

__all__ = ['module_getattr', 'caller_stacklevel']


def caller_stacklevel():
    """The ``stacklevel`` for a ``warnings.warn`` in the calling function that points at the
    first frame outside this package and MXNet (the user's line, through constructors and
    MXNet's decorators)."""
    frame, level = sys._getframe(2), 2   # pylint: disable=protected-access
    while frame is not None and frame.f_globals.get('__name__', '').split('.')[0] in (
            'gluon_attention', 'mxnet'):
        frame, level = frame.f_back, level + 1
    return level


def module_getattr(module, table):
    """A module-level ``__getattr__`` for ``module`` (its ``__name__``) serving the names of
    ``table``: ``{old name: (replacement, a function returning the object)}``. Other names
    raise AttributeError as usual."""
    def __getattr__(name):
        if name not in table:
            raise AttributeError('module {!r} has no attribute {!r}'.format(module, name))
        replacement, where = table[name]
        warnings.warn('{}.{} is deprecated and will be removed in the next release: use '
                      '{}'.format(module, name, replacement), DeprecationWarning, stacklevel=2)
        return where()
    return __getattr__
