"""The folders are layers: no module imports from a layer above it, and the library never imports
the jobs.

Every import counts, at module level or inside a function (a late import is still a
dependency), and a package's ``__init__`` counts as a module of its folder; no module loads one of
the project's modules by name at run time (``importlib.import_module``, ``__import__``), which the
import graph could not see. The library (``gluon_attention``), lowest first: the base modules
(``_checks``, ``_optional``, ``_resources``, ``files``), ``core``, then ``compat``, ``models`` and ``data``
(siblings: none imports another), then ``export`` and ``convert`` (model conversion; siblings), then ``pipelines``. The top-level documented
paths (the package's ``__init__``, ``fused``, ``checks``, ``resources``, ``__main__``) are thin
re-exports and may import anything of the library. The jobs (``jobs/`` at the repository root)
are rooms layered in turn: ``engine``, then ``squad`` and ``nli`` (siblings), then ``bench`` and
``serve`` (siblings); they import the library, never the reverse.
"""
import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY, JOBS = 'gluon_attention', 'jobs'
LAYER = {'_checks': (0,), '_optional': (0,), '_resources': (0,), '_deprecated': (0,), 'hardware': (0,), 'files': (0,),
         'core': (1,), 'compat': (2,), 'models': (2,), 'data': (2,), 'export': (3,), 'convert': (3,), 'pipelines': (4,)}
ROOMS = {'engine': (0,), 'squad': (1,), 'nli': (1,), 'bench': (2,), 'serve': (2,)}
TOP = {'', 'fused', 'checks', 'resources', '__main__'}
DYNAMIC = {'import_module', '__import__'}


def modules(top=None):
    """Dotted name -> path of every module of the library and the jobs (or of ``top`` only); a
    package ``__init__`` is named by its package."""
    out = {}
    for package in ([top] if top else [LIBRARY, JOBS]):
        for path in (ROOT / package).rglob('*.py'):
            parts = list(path.relative_to(ROOT).with_suffix('').parts)
            out['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
    return out


def _resolve(module, is_package, node, known):
    """Modules of ``known`` that one ``import``/``from`` node names. ``from package import
    module`` names the module (the package's ``__init__`` only for a name that is not one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:
        package = module.split('.') if is_package else module.split('.')[:-1]
        base = package[:len(package) - node.level + 1] + (
            node.module.split('.') if node.module else [])
    else:
        base = (node.module or '').split('.')
    stem = '.'.join(base)
    subs = [stem + '.' + alias.name for alias in node.names if stem + '.' + alias.name in known]
    return subs + ([stem] if stem in known and len(subs) < len(node.names) else [])


def import_graph(top=None):
    """Module -> the modules of the project (or of ``top`` only) it imports, at module level or
    inside a function."""
    known = modules(top)
    graph = {}
    for name, path in known.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_resolve(name, path.name == '__init__.py', node, known))
        graph[name] = deps - {name}
    return graph


def _called_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', None)


def dynamic_imports(source):
    """Lines of the ``import_module``/``__import__`` calls in ``source`` that name a project
    module (or a name that is not a string literal)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _called_name(node) in DYNAMIC and node.args):
            continue
        target = node.args[0]
        literal = isinstance(target, ast.Constant) and isinstance(target.value, str)
        if not literal or target.value.startswith((LIBRARY, JOBS, '.')):
            found.append(node.lineno)
    return found


def layer(name):
    """(package, layer...) of a module: (0, ...) in the library, (1, ...) in the jobs; None for
    the library's top-level documented paths and the jobs' own ``__init__``."""
    parts = name.split('.')
    if parts[0] == JOBS:
        return (1,) + ROOMS[parts[1]] if len(parts) > 1 else None
    inner = parts[1] if len(parts) > 1 else ''
    if inner in TOP:
        return None
    return (0,) + LAYER[inner]


def longest_chain(graph):
    """The longest chain of imports (number of modules on it)."""
    @functools.lru_cache(maxsize=None)
    def depth(name):
        return 1 + max((depth(d) for d in graph[name]), default=0)
    return max(depth(n) for n in graph)


def test_every_module_belongs_to_a_layer():
    for name in modules():
        top, inner = (name.split('.') + [''])[:2]
        assert inner in (ROOMS if top == JOBS else LAYER) or inner in ({''} if top == JOBS
                                                                       else TOP), name


def test_no_module_imports_from_its_own_layer_sideways_or_above():
    bad = []
    for name, deps in import_graph().items():
        if layer(name) is None:
            continue
        folder = name.split('.')[:2]
        for dep in deps:
            mine, theirs = layer(name), layer(dep)
            if dep.split('.')[0] == LIBRARY and mine[0] == 1:
                continue                   # the jobs use the library (public modules: below)
            if theirs is None or theirs > mine or (
                    theirs == mine and dep.split('.')[:2] != folder and mine[1:] > (0,)):
                bad.append('{} imports {}'.format(name, dep))
    assert not bad, bad


def test_the_library_never_imports_the_jobs():
    bad = {name: sorted(d for d in deps if d.split('.')[0] == JOBS)
           for name, deps in import_graph().items() if name.split('.')[0] == LIBRARY}
    assert not {k: v for k, v in bad.items() if v}


def test_the_rooms_of_the_jobs_are_layered():
    assert layer('jobs.engine.loop') < layer('jobs.squad.train') == layer('jobs.nli.job') < layer(
        'jobs.bench.qa') == layer('jobs.serve.archive')
    assert layer('gluon_attention.core.cells') < layer('gluon_attention.export.block') < layer(
        'gluon_attention.pipelines.predictor') < layer('jobs.engine.loop')
    graph = import_graph()
    assert 'gluon_attention.pipelines.onnx' in graph['jobs.bench.qa']  # late imports seen
    assert 'gluon_attention.pipelines.predictor' in graph['gluon_attention.pipelines']  # __init__s


def test_no_module_imports_a_project_module_by_name_at_run_time():
    assert dynamic_imports('import importlib\nimportlib.import_module("gluon_attention.core")\n'
                           'f = __import__(name)\nimportlib.util.find_spec("x")\n'
                           'importlib.import_module(".fused", "gluon_attention")\n'
                           'importlib.import_module("jobs.squad")') == [2, 3, 5, 6]
    bad = {name: dynamic_imports(path.read_text(encoding='utf-8'))
           for name, path in modules().items()}
    assert not {k: v for k, v in bad.items() if v}


def test_import_chains_are_short():
    # Counting the imports inside functions and a package's __init__ as a module: 9 in the one
    # package before the jobs left it (tasks.serve -> instance -> archive -> squad.folder ->
    # squad.data -> data.squad -> squad_features -> squad_decode -> _checks). Now, in the
    # library: pipelines -> pipelines.predictor -> models.encoder -> core.cells -> core.backends
    # -> core.functional -> core.masking -> core._ops (8); in the jobs, the library counted
    # as an installed dependency: bench.compare_score -> bench.compare -> squad.loop ->
    # squad.data (4).
    assert longest_chain(import_graph(LIBRARY)) <= 8
    assert longest_chain(import_graph(JOBS)) <= 8


def test_documented_paths_still_work():
    import gluon_attention
    from gluon_attention.data import squad
    fused = gluon_attention.fused
    assert callable(fused.available) and callable(fused.library_path)
    assert callable(squad.read_squad)
    from gluon_attention import export
    assert callable(export.export_block) and callable(export.import_block)
    assert callable(export.run_exported) and callable(export.load)
    from gluon_attention import pipelines
    assert callable(pipelines.QAPredictor.from_folder) and callable(pipelines.load_qa_folder)
