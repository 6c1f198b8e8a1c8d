"""The package's folders are its layers: no module imports from a layer above it.

Module-level imports only (imports inside functions are deliberate late bindings), package
``__init__`` files excluded (they re-export). Layers, lowest first: the base modules
(``_checks``, ``_resources``), ``core``, then ``compat``, ``models`` and ``data`` (siblings: none
imports another), then ``tasks``. The top-level documented paths (``fused``, ``export``,
``__main__``) are thin re-exports and may import anything.
"""
import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / 'gluon_attention'
LAYER = {'_checks': 0, '_resources': 0, 'core': 1, 'compat': 2, 'models': 2, 'data': 2,
         'tasks': 3}
TOP = {'fused', 'export', '__main__'}


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
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding='utf-8'))
        deps = set()
        for node in tree.body:      # module level only
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_resolve(name, node, known))
        graph[name] = deps - {name}
    return graph


def layer(name):
    head = name.split('.')[0]
    return None if head in TOP else LAYER[head]


def longest_chain(graph):
    """The longest chain of module-level imports (number of modules on it)."""
    @functools.lru_cache(maxsize=None)
    def depth(name):
        return 1 + max((depth(d) for d in graph[name]), default=0)
    return max(depth(n) for n in graph)


def test_every_module_belongs_to_a_layer():
    for name in modules():
        head = name.split('.')[0]
        assert head in LAYER or head in TOP, name


def test_no_module_imports_from_its_own_layer_sideways_or_above():
    bad = []
    for name, deps in import_graph().items():
        if layer(name) is None:
            continue
        for dep in deps:
            same_folder = dep.split('.')[0] == name.split('.')[0]
            if layer(dep) is None or layer(dep) > layer(name) or (
                    layer(dep) == layer(name) and not same_folder and layer(name) > 0):
                bad.append('{} imports {}'.format(name, dep))
    assert not bad, bad


def test_import_chain_is_short():
    # 8 modules deep before the layers (9 with data/__init__); the layers bring it to 7:
    # tasks.squad <- models.encoder <- core.cells <- core.functional <- core.softmax
    # <- core.masking <- _checks
    assert longest_chain(import_graph()) <= 7


def test_documented_paths_still_work():
    import gluon_attention
    from gluon_attention.data import squad
    assert callable(gluon_attention.fused.available) and callable(gluon_attention.fused.library_path)
    assert callable(squad.read_squad)
    from gluon_attention import export
    assert callable(export.export_block)
