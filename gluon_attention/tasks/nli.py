"""The NLI job: decomposable attention on SNLI (batches in, logits out, export and reload)."""
import warnings

import mxnet as mx
import numpy as onp

__all__ = ['predict_logits', 'export_and_reload']


def _to_mx(batch, ctx):
    """The four model inputs of a :class:`~gluon_attention.data.snli.Batch` on ``ctx`` (int32)."""
    return [mx.np.array(x, dtype='int32', ctx=ctx) for x in batch[:4]]


def predict_logits(model, batches, num_examples, ctx=None):
    """Logits for a whole data set, in data-set order.

    Parameters
    ----------
    model : DecomposableAttention or SymbolBlock
        Called positionally with (premise, hypothesis, premise_valid_length,
        hypothesis_valid_length).
    batches : iterable of :class:`~gluon_attention.data.snli.Batch`
    num_examples : int
        N, the size of the data set the batches cover.
    ctx : mx.Context, optional (default CPU)

    Returns
    -------
    ndarray
        float32 (N, num_classes) NumPy logits; row i belongs to example i.
    """
    ctx = ctx or mx.cpu()
    out = None
    for batch in batches:
        logits = model(*_to_mx(batch, ctx)).asnumpy()
        if out is None:
            out = onp.zeros((num_examples, logits.shape[1]), dtype=onp.float32)
        out[batch.index] = logits
    return out


def export_and_reload(model, prefix, batches, ctx=None):
    """Hybridize, export to ``prefix-symbol.json`` / ``prefix-0000.params``, reload, compare.

    Parameters
    ----------
    model : DecomposableAttention
        Initialized; it is hybridized here (no static shapes, so any B and lengths work).
    prefix : str
        Output path prefix.
    batches : list of :class:`~gluon_attention.data.snli.Batch`
        Inputs for the parity check (the first one also builds the graph).
    ctx : mx.Context, optional

    Returns
    -------
    (SymbolBlock, float)
        The reloaded block (inputs ``data0..data3`` = premise, hypothesis, premise_valid_length,
        hypothesis_valid_length) and the largest absolute logit difference over ``batches``.
    """
    ctx = ctx or mx.cpu()
    model.hybridize()
    model(*_to_mx(batches[0], ctx))
    model.export(prefix)
    with warnings.catch_warnings():   # the int32 id inputs have no declared dtype in the json
        warnings.simplefilter('ignore', UserWarning)
        reloaded = mx.gluon.SymbolBlock.imports(
            prefix + '-symbol.json', ['data0', 'data1', 'data2', 'data3'],
            prefix + '-0000.params', ctx=ctx)
    diff = 0.0
    for batch in batches:
        inputs = _to_mx(batch, ctx)
        delta = onp.abs(model(*inputs).asnumpy() - reloaded(*inputs).asnumpy())
        diff = max(diff, float(delta.max()))
    return reloaded, diff
