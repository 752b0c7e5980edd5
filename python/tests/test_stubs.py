"""The type stubs (python/make_stubs.sh) name everything the extension exports."""

import ast

import meganeura as mn
from conftest import REPO

STUBS = REPO / "python" / "meganeura" / "_core"


def stub_names(path):
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_stubs_cover_the_extension():
    for module, stub in [(mn._core, "__init__.pyi"), (mn.nn, "nn.pyi"), (mn.optim, "optim.pyi"),
                         (mn.data, "data.pyi"), (mn.reference, "reference.pyi"),
                         (mn.vision, "vision.pyi"), (mn.distributed, "distributed.pyi"),
                         (mn.lm, "lm.pyi")]:
        public = {n for n in dir(module) if not n.startswith("_")}
        missing = public - stub_names(STUBS / stub)
        assert not missing, f"{stub} lacks {sorted(missing)}: run python/make_stubs.sh"
