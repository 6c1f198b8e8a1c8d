"""The optional dependencies of the library, imported where they are used.

``import gluon_attention`` needs numpy and mxnet only; reading or writing a model folder needs
the ``hf`` extra (``safetensors`` for the weights, ``tokenizers`` for the tokenizer). A missing
one raises ``ImportError`` saying which extra installs it, instead of a bare
``ModuleNotFoundError`` from deep inside a call.
"""
import importlib.util

__all__ = ['require', 'EXTRAS']

#: package -> (the setup.py extra that installs it, what the library uses it for)
EXTRAS = {
    'safetensors': ('hf', "a model folder's weights (.safetensors files)"),
    'tokenizers': ('hf', "a model folder's tokenizer (tokenizer.json, vocab.txt)"),
}


def require(package):
    """Check that ``package`` (a key of :data:`EXTRAS`) is installed, before a lazy import of it.

    Raises
    ------
    ImportError
        ``package`` is not installed; the message names the extra to install, e.g.
        ``pip install 'gluon_attention[hf]'``. (A package that is installed but fails to
        import raises its own error at the import that follows.)
    """
    extra, purpose = EXTRAS[package]
    if importlib.util.find_spec(package) is None:
        raise ImportError("{} is needed for {} and is not installed: pip install "
                          "'gluon_attention[{}]'. Received: missing module={!r}".format(
                              package, purpose, extra, package))
