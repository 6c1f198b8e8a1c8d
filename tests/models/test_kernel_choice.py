"""The kernel choice of the models (gluon_attention.Kernels): one default everywhere, resolved
once where a model is built and handed down; the deprecated keywords translate into it and
their errors name the keyword the user gave."""
import warnings

import pytest

from gluon_attention.models.encoder import TransformerEncoder


def test_bad_fused_rowwise_is_named_as_fused_rowwise():
    """fused_rowwise='yes' was refused with a message about fused_attention."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        with pytest.raises(TypeError, match=r"Received: fused_rowwise='yes'") as err:
            TransformerEncoder(1, 8, 16, 2, fused_rowwise='yes')
    assert 'fused_attention' not in str(err.value)
