"""GluonNLP 0.10 models for the benchmarks: built offline, fused by oneDNN, quantized to INT8.

The 0.10 ``BERTModel`` (sequence output only) of a zoo family at given sizes, with random
weights saved and converted into our folder (:func:`gluonnlp_bert`) or loaded from a ``.params``
file that :func:`gluon_attention.convert.to_gluonnlp` wrote (:func:`load_010`); the same graph
after ``optimize_for(backend='MKLDNN')`` (:func:`fuse_010`: 0.10's
``DotProductSelfAttentionCell`` becomes oneDNN's ``_sg_mkldnn_selfatt_qk`` / ``_valatt``) or
quantized by ``quantize_net_v2`` as 0.10's own scripts do (:func:`quantize_010`, with the
calibration thresholds it used: :func:`threshold_coverage`). 0.10 blocks run outside numpy mode
(:func:`legacy`). Glossary: B batch, T sequence length, D hidden size, V vocabulary size.
"""
import contextlib
import json
import os

import mxnet as mx
import numpy as onp

from gluon_attention.convert import ARCHITECTURES, from_gluonnlp, to_gluonnlp

__all__ = ['FUSED_OPS', 'SIZE_KEYS', 'legacy', 'build_010', 'gluonnlp_bert', 'folder_to_010',
           'load_010', 'fused_op_names', 'fuse_010', 'RECIPE_010', 'CLIP_010', 'FUSED_GELU',
           'Collector010', 'quantize_010', 'graph_nodes', 'quantized_counts', 'threshold_names',
           'threshold_coverage', 'legacy_runner', 'nd_inputs']

FUSED_OPS = ('_sg_mkldnn_selfatt_qk', '_sg_mkldnn_selfatt_valatt')
SIZE_KEYS = ('num_layers', 'units', 'hidden_size', 'num_heads', 'max_length')
# GluonNLP 0.10's own INT8 recipe (``calibration()`` of its scripts/bert/finetune_squad.py and
# finetune_classifier.py): quantize_net_v2 with these arguments, the wheel's BertLayerCollector
# (CLIP_010: LayerNorm outputs' min and GELU outputs' max clipped) as the 'customize' collector,
# calibrated on 10 batches of 24 features. Per output channel, MXNet 1.9.1 quantizes the
# interleaved QKV projection too (per tensor its graph fails type inference: uint8 / int8).
RECIPE_010 = dict(quantized_dtype='auto', quantize_mode='smart',
                  quantize_granularity='channel-wise', calib_mode='customize')
CLIP_010 = (-50.0, 10.0)
# MXNet 1.9.1's MKLDNN_QUANTIZE pass fuses the GELU into the dense layer before calibration:
# its output is named after this node, not the ``gelu0_leakyrelu0`` the wheel's rule looks for.
FUSED_GELU = 'sg_mkldnn_fully_connected_eltwise_'
QUANTIZED_OPS = ('_contrib_quantize_v2', '_sg_mkldnn_fully_connected') + FUSED_OPS


@contextlib.contextmanager
def legacy():
    """0.10 blocks run outside numpy mode."""
    with mx.util.np_array(False), mx.util.np_shape(False):
        yield


def build_010(model_name, sizes, vocab_size, dropout=0.0):
    """A 0.10 ``BERTModel`` (sequence output only; no pooler, decoder or classifier) of the
    zoo family ``model_name`` at ``sizes`` (dict of :data:`SIZE_KEYS`), not initialised; build
    it under :func:`legacy`."""
    from gluonnlp.model import bert as gbert  # pylint: disable=import-outside-toplevel
    config = ARCHITECTURES[model_name]
    encoder = gbert.BERTEncoder(dropout=dropout, layer_norm_eps=config['layer_norm_eps'],
                                activation=config['activation'], **sizes)
    return gbert.BERTModel(encoder, vocab_size=vocab_size, token_type_vocab_size=2,
                           units=sizes['units'], embed_size=sizes['units'], use_pooler=False,
                           use_decoder=False, use_classifier=False)


def gluonnlp_bert(model_name, sizes, vocab_size, folder, seed=0):
    """A 0.10 ``BERTModel`` of the zoo family ``model_name`` at ``sizes``, V = ``vocab_size``,
    weights N(0, 0.02) from ``seed``, saved as ``folder``/net.params with its vocabulary and
    converted into ``folder``/ours. Returns the two paths."""
    import gluonnlp as nlp  # pylint: disable=import-outside-toplevel
    words = ['w%d' % i for i in range(vocab_size - 5)]          # + 5 special tokens
    params, vocab_file, ours = ('%s/%s' % (folder, n) for n in ('net.params', 'net.vocab', 'ours'))
    with legacy():
        vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens(words))
        net = build_010(model_name, sizes, len(vocab))
        mx.random.seed(seed)
        net.initialize(mx.init.Normal(0.02))
        ids = mx.nd.ones((1, 4))
        net(ids, ids, mx.nd.array([4]))                          # deferred shapes
        net.save_parameters(params)
    with open(vocab_file, 'w', encoding='utf-8') as out:
        out.write(vocab.to_json())
    from_gluonnlp(params, model_name, vocab_file, ours, sizes=sizes)
    return params, ours


def folder_to_010(model_dir, params):
    """Write the encoder of our model folder ``model_dir`` (a BERT: converted, or saved by
    ``run_squad.py train``, whose QA head is not written) as a bare 0.10 ``BERTModel``
    ``.params`` file ``params`` (:func:`gluon_attention.convert.to_gluonnlp`). Returns the
    arguments of :func:`load_010`: (zoo family, sizes, V, ``params``)."""
    with open(os.path.join(model_dir, 'config.json'), encoding='utf-8') as handle:
        raw = json.load(handle)
    sizes = dict(num_layers=raw['num_hidden_layers'], units=raw['hidden_size'],
                 hidden_size=raw['intermediate_size'], num_heads=raw['num_attention_heads'],
                 max_length=raw['max_position_embeddings'])
    with legacy():
        to_gluonnlp(model_dir, params)
    return raw.get('gluonnlp_model', 'bert_12_768_12'), sizes, raw['vocab_size'], params


def load_010(model_name, sizes, vocab_size, params):
    """:func:`build_010` with the parameters of ``params`` (a bare ``BERTModel`` file)."""
    with legacy():
        net = build_010(model_name, sizes, vocab_size)
        net.load_parameters(params)
    return net


def fused_op_names(net):
    """The oneDNN self-attention operators in ``net``'s partitioned graph (after
    ``optimize_for``), sorted."""
    graph = net._cached_graph[1].tojson()  # pylint: disable=protected-access
    return sorted({name for name in FUSED_OPS if '"%s"' % name in graph})


def fuse_010(net, arrays, static_shape=True):
    """``optimize_for(backend='MKLDNN')`` of the 0.10 model ``net`` on ``arrays`` (mx.nd ids,
    token types, valid lengths, float32); RuntimeError when the self-attention is not fused."""
    with legacy():
        net.optimize_for(*arrays, backend='MKLDNN', static_alloc=True, static_shape=static_shape)
    found = fused_op_names(net)
    if found != sorted(FUSED_OPS):
        raise RuntimeError('optimize_for(backend=MKLDNN) did not fuse the 0.10 '
                           'self-attention: found {}'.format(found))
    return net


class Collector010:
    """The calibration collector of 0.10's recipe: the wheel's
    ``gluonnlp.calibration.BertLayerCollector`` (min and max of every ``*_output``, LayerNorm
    outputs' min clipped at ``clip_min``, GELU outputs' max at ``clip_max``), plus that GELU
    rule under the name MXNet 1.9.1 gives a GELU fused into its dense layer
    (:data:`FUSED_GELU`), which the wheel's rule does not match; ``gelu``: whether the model's
    fused activations are GELUs (not ERNIE's ReLU). ``min_max_dict``: {output name: (min,
    max)}, the thresholds ``quantize_net_v2`` reads."""

    def __init__(self, clip_min, clip_max, gelu=True):
        # pylint: disable-next=import-outside-toplevel
        from gluonnlp.calibration import BertLayerCollector
        self.wheel = BertLayerCollector(clip_min=clip_min, clip_max=clip_max)
        self.min_max_dict = self.wheel.min_max_dict
        self.gelu = gelu

    def collect(self, name, arr):
        """``set_monitor_callback``'s callback: (output name as C string, NDArray handle)."""
        self.wheel.collect(name, arr)
        name = mx.base.py_str(name)
        if self.gelu and FUSED_GELU in name and name in self.min_max_dict:
            low, high = self.min_max_dict[name]
            self.min_max_dict[name] = (low, min(high, self.wheel.clip_max))


def _gelu_010(net):
    """Whether the feed-forward activation of the 0.10 ``BERTModel`` ``net`` is GELU."""
    from gluonnlp.model.block import GELU  # pylint: disable=import-outside-toplevel
    return isinstance(net.encoder.transformer_cells[0].ffn.activation, GELU)


def quantize_010(net, calibration, batch_size, static_shape=True, clip=CLIP_010):
    """The 0.10 model ``net`` quantized as GluonNLP 0.10's own scripts do (:data:`RECIPE_010`:
    ``quantize_net_v2``, oneDNN's ``MKLDNN_QUANTIZE`` pass on a CPU, every layer it can,
    weights per output channel, thresholds from :class:`Collector010` with ``clip`` = (min,
    max)), calibrated on ``calibration`` (ids, token types, valid lengths: NumPy arrays, (N, T),
    (N, T), (N,)) in batches of ``batch_size``, hybridized. Returns (the quantized block, the
    thresholds: {output name: (min, max)})."""
    collector = Collector010(*clip, gelu=_gelu_010(net))
    with legacy():
        net.hybridize(static_alloc=True, static_shape=static_shape)
        net(*[mx.nd.array(x[:batch_size], dtype='float32') for x in calibration])
        data = mx.io.NDArrayIter({'data%d' % i: mx.nd.array(x, dtype='float32')
                                  for i, x in enumerate(calibration)}, batch_size=batch_size)
        quantized = mx.contrib.quantization.quantize_net_v2(
            net, calib_data=data, data_shapes=data.provide_data, exclude_layers=[],
            num_calib_examples=len(calibration[0]), LayerOutputCollector=collector,
            **RECIPE_010)
        quantized.hybridize(static_alloc=True, static_shape=static_shape)
    return quantized, collector.min_max_dict


def graph_nodes(net):
    """The nodes of the cached (partitioned) graph of ``net``."""
    return json.loads(net._cached_graph[1].tojson())['nodes']  # pylint: disable=protected-access


def quantized_counts(net):
    """{'dense': (quantized, all), 'attention': (quantized, all)}: the oneDNN dense layers and
    self-attention products of the partitioned graph of ``net`` (after
    :func:`quantize_010`) that run in INT8."""
    nodes = graph_nodes(net)
    counts = {}
    for kind, ops in (('dense', ('_sg_mkldnn_fully_connected',)), ('attention', FUSED_OPS)):
        found = [n for n in nodes if n['op'] in ops]
        counts[kind] = (sum(n.get('attrs', {}).get('quantized') == 'True' for n in found),
                        len(found))
    return counts


def threshold_names(net):
    """The calibration table's names of the INT8 nodes of ``net``'s graph (after
    :func:`quantize_010`): each ``_contrib_quantize_v2`` node's input (``X_output`` of node
    ``X_output_quantize``) and each quantized dense layer's and self-attention product's output
    (``Y_output`` of node ``quantized_Y``), sorted."""
    names = set()
    for node in graph_nodes(net):
        if node['op'] == QUANTIZED_OPS[0]:
            names.add(node['name'][:-len('_quantize')])
        elif node['op'] in QUANTIZED_OPS and node.get('attrs', {}).get('quantized') == 'True':
            names.add(node['name'][len('quantized_'):] + '_output')
    return sorted(names)


def threshold_coverage(net, thresholds):
    """(INT8 nodes of ``net`` with a threshold in ``thresholds``, all INT8 nodes, the names
    without one) over :func:`threshold_names`."""
    names = threshold_names(net)
    missing = [name for name in names if name not in thresholds]
    return len(names) - len(missing), len(names), missing


def legacy_runner(net, arrays):
    """A callable running the 0.10 block ``net`` on ``arrays`` (mx.nd) outside numpy mode and
    returning its output (B, T, D) float32 mx.nd, waited for."""
    def run():
        with legacy():
            out = net(*arrays)
            out.wait_to_read()
        return out
    return run


def nd_inputs(inputs):
    """NumPy ids, token types, valid lengths -> float32 mx.nd arrays, as 0.10 takes them."""
    with legacy():
        return [mx.nd.array(onp.asarray(x), dtype='float32') for x in inputs]


def main(argv=None):
    """``python -m jobs.bench.gluonnlp010 FOLDER [ZOO_NAME]``: a random 0.10 model of the zoo
    family (default BERT-base) at its zoo size, saved and converted (:func:`gluonnlp_bert`);
    prints the converted folder."""
    import sys  # pylint: disable=import-outside-toplevel
    argv = sys.argv[1:] if argv is None else argv
    name = argv[1] if len(argv) > 1 else 'bert_12_768_12'
    sizes = {k: ARCHITECTURES[name][k] for k in SIZE_KEYS}
    os.makedirs(argv[0], exist_ok=True)
    print(gluonnlp_bert(name, sizes, 30522, argv[0])[1])


if __name__ == '__main__':
    main()
