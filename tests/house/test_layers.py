"""The package's folders are its layers: no module imports from a layer above it.

Every import counts, at module level or inside a function (a late import is still a
dependency), and no module loads one of the package's modules by name at run time
(``importlib.import_module``, ``__import__``), which the import graph could not see. Package
``__init__`` files are excluded (they re-export). Layers, lowest first: the base modules
(``_checks``, ``_resources``), ``core``, then ``compat``, ``models`` and ``data`` (siblings: none
imports another), then ``tasks``, whose rooms are layered in turn: ``engine``, then ``export``,
then ``squad`` and ``nli`` (siblings), then ``bench`` and ``serve`` (siblings). The top-level documented paths
(``fused``, ``export``, ``__main__``) are thin re-exports and may import anything.
"""
import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / 'gluon_attention'
LAYER = {'_checks': (0,), '_resources': (0,), 'hardware': (0,), 'core': (1,), 'compat': (2,), 'models': (2,),
         'data': (2,), 'tasks.engine': (3, 0), 'tasks.export': (3, 1), 'tasks.squad': (3, 2),
         'tasks.nli': (3, 2), 'tasks.bench': (3, 3), 'tasks.serve': (3, 3)}
TOP = {'fused', 'export', '__main__'}
DYNAMIC = {'import_module', '__import__'}


def modules():
    """Dotted name (relative to the package) -> path, package ``__init__`` files excluded."""
    out = {}
    for path in PACKAGE.rglob('*.py'):
        if path.name == '__init__.py':
            continue
        out['.'.join(path.relative_to(PACKAGE).with_suffix('').parts)] = path
    return out


def _resolve(module, node, known):
    """Modules of this package that one ``import``/``from`` node names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.startswith('gluon_attention.')]
        return [n[len('gluon_attention.'):] for n in names if n[len('gluon_attention.'):] in known]
    if node.level == 0:
        if not (node.module or '').startswith('gluon_attention'):
            return []
        base = node.module[len('gluon_attention'):].lstrip('.').split('.') if node.module != 'gluon_attention' else []
    else:
        base = module.split('.')[:-node.level] + (node.module.split('.') if node.module else [])
    out = []
    stem = '.'.join(p for p in base if p)
    if stem in known:
        out.append(stem)
    for alias in node.names:
        full = '.'.join(p for p in base + [alias.name] if p)
        if full in known:
            out.append(full)
    return out


def import_graph():
    """Module -> the package modules it imports, at module level or inside a function."""
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding='utf-8'))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_resolve(name, node, known))
        graph[name] = deps - {name}
    return graph


def _called_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', None)


def dynamic_imports(source):
    """Lines of the ``import_module``/``__import__`` calls in ``source`` that name a package
    module (or a name that is not a string literal)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _called_name(node) in DYNAMIC and node.args):
            continue
        target = node.args[0]
        literal = isinstance(target, ast.Constant) and isinstance(target.value, str)
        if not literal or target.value.startswith(('gluon_attention', '.')):
            found.append(node.lineno)
    return found


def layer(name):
    """(layer, room) of a module; None for the top-level documented paths."""
    parts = name.split('.')
    if parts[0] in TOP:
        return None
    return LAYER.get('.'.join(parts[:2]), LAYER.get(parts[0]))


def longest_chain(graph):
    """The longest chain of imports (number of modules on it)."""
    @functools.lru_cache(maxsize=None)
    def depth(name):
        return 1 + max((depth(d) for d in graph[name]), default=0)
    return max(depth(n) for n in graph)


def test_every_module_belongs_to_a_layer():
    for name in modules():
        assert name.split('.')[0] in TOP or layer(name) is not None, name


def test_no_module_imports_from_its_own_layer_sideways_or_above():
    bad = []
    for name, deps in import_graph().items():
        if layer(name) is None:
            continue
        folder = name.split('.')[:len(layer(name))]
        for dep in deps:
            same_folder = dep.split('.')[:len(layer(dep) or ())] == folder
            if layer(dep) is None or layer(dep) > layer(name) or (
                    layer(dep) == layer(name) and not same_folder and layer(name) > (0,)):
                bad.append('{} imports {}'.format(name, dep))
    assert not bad, bad


def test_the_rooms_of_tasks_are_layered():
    assert layer('tasks.engine.loop') < layer('tasks.export.onnx') < layer(
        'tasks.squad.train') == layer('tasks.nli.job') < layer('tasks.bench.qa')
    graph = import_graph()
    assert 'tasks.squad.onnx_check' in graph['tasks.bench.qa']     # the graph sees late imports


def test_no_module_imports_a_package_module_by_name_at_run_time():
    assert dynamic_imports('import importlib\nimportlib.import_module("gluon_attention.core")\n'
                           'f = __import__(name)\nimportlib.util.find_spec("x")\n'
                           'importlib.import_module(".fused", "gluon_attention")') == [2, 3, 5]
    bad = {name: dynamic_imports(path.read_text(encoding='utf-8'))
           for name, path in modules().items()}
    assert not {k: v for k, v in bad.items() if v}


def test_import_chain_is_short():
    # 10 modules deep counting the imports inside functions before the rooms of tasks; 8 now:
    # tasks.squad.train -> tasks.squad.model -> models.encoder -> core.cells -> core.functional
    # -> core.softmax -> core.masking -> _checks (and tasks.bench.qa -> tasks.squad.onnx_check
    # -> tasks.export.onnx -> tasks.export.onnx_rowwise -> core.fused_rowwise -> core.fused
    # -> core.layout -> _checks)
    assert longest_chain(import_graph()) <= 8


def test_documented_paths_still_work():
    import gluon_attention
    from gluon_attention.data import squad
    assert callable(gluon_attention.fused.available) and callable(gluon_attention.fused.library_path)
    assert callable(squad.read_squad)
    from gluon_attention import export
    assert callable(export.export_block) and callable(export.import_block)
    assert callable(export.run_exported)
