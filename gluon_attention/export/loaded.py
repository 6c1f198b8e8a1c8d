"""The block :func:`~gluon_attention.export.load` returns: a ``SymbolBlock`` that checks each
call's input dtypes against the ones recorded at export.

An exported graph's inputs are declared with the dtypes of ``<prefix>-inputs.json``; MXNet 1.9.1
refuses another dtype only deep in the cached graph ("expected float16, got float32"), so a call
with float16 arrays on a graph exported from float32 calls (or the reverse) is refused here
first, naming the input and the dtype it needs.
"""
import mxnet as mx
import numpy as onp

from .. import _checks

__all__ = ['ExportedBlock']


class ExportedBlock(mx.gluon.SymbolBlock):
    """``SymbolBlock(outputs, inputs)`` whose calls on arrays must match ``input_dtypes``.

    Parameters
    ----------
    outputs, inputs : as for ``mx.gluon.SymbolBlock``
    input_names : list of str
        The inputs' names, in call order, as recorded at export (named in refusals).
    input_dtypes : list of str
        The NumPy dtype name each positional input must have.

    Raises
    ------
    TypeError
        When called: an input array whose dtype differs from the recorded one (e.g. float16 inputs to a
        graph exported from float32 calls).
    """

    def __init__(self, outputs, inputs, input_names, input_dtypes, **kwargs):
        super().__init__(outputs, inputs, **kwargs)
        self._input_spec = list(zip(input_names, input_dtypes))

    def forward(self, x, *args):  # pylint: disable=arguments-differ
        for (name, dtype), array in zip(self._input_spec, (x,) + args):
            if isinstance(array, mx.nd.NDArray) and onp.dtype(array.dtype).name != dtype:
                _checks.fail_type(
                    'input {} of the exported graph must be a {} array, the dtype recorded at '
                    'export (cast it with .astype({!r}), or export from calls of the dtype you '
                    'need)'.format(name, dtype, dtype),
                    **{name + '.dtype': onp.dtype(array.dtype).name})
        return super().forward(x, *args)
