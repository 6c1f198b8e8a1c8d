"""float16 data on a CPU through your own hybridized block that holds a library block.

A library block called at the top level takes float16 arrays on a CPU (it computes in float32
and returns float16). Inside your own hybridized block it receives symbols, where that
conversion cannot happen: MXNet 1.9.1 then fails with "MXNetError ... expected float16, got
float32". Cast the inputs to float32 before calling your block (and the outputs back if you
need float16).

    python docs/examples/float16_cpu.py
"""
import mxnet as mx
from mxnet import np, npx

import gluon_attention as ga

npx.set_np()


class Summary(mx.gluon.HybridBlock):
    """A user's block: self-attention, then the mean over the valid positions' outputs."""

    def __init__(self, units=16, heads=4):
        super().__init__()
        with self.name_scope():
            self.attention = ga.MultiHeadAttention(units=units, num_heads=heads)

    def hybrid_forward(self, F, data, valid_length):  # pylint: disable=arguments-differ
        context, _ = self.attention(data, data, data, valid_length)
        return context.mean(axis=1)


def main():
    block = Summary()
    block.initialize()
    block.hybridize()
    data = np.random.normal(size=(2, 5, 16)).astype('float16')
    valid_length = np.array([5, 3], dtype='int32')
    try:
        block(data, valid_length).wait_to_read()
        failed = None
    except mx.base.MXNetError as error:            # float16 into the float32 graph on a CPU
        failed = str(error).splitlines()[0]
    print('float16 into the hybridized block:', failed or 'ran')
    out = block(data.astype('float32'), valid_length)   # the fix: cast to float32 first
    print('float32 inputs:', out.shape, out.dtype, '-> back to', out.astype('float16').dtype)
    return failed, out


if __name__ == '__main__':
    main()
