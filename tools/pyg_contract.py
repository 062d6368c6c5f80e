"""Run PyG's own loader test file against tritongnn's loader.

PyG's ``test/loader/test_neighbor_loader.py`` (from a checkout of
pyg-team/pytorch_geometric at the installed version's tag) is copied with
one change, its import of ``NeighborLoader`` from tritongnn, and run beside
PyG's own ``test/conftest.py`` (its fixtures: ``get_dataset`` and the rest)
and a few lines that open PyG's gates on its own sampling back-ends
(``torch_geometric.typing``'s ``WITH_*`` flags, and ``withPackage`` for
pyg-lib and torch-sparse), so the cases run that PyG would run with them
installed. Extra arguments go to pytest.

    python tools/pyg_contract.py ../pytorch_geometric/test/loader/test_neighbor_loader.py -q
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

CONFTEST = '''
import torch_geometric.typing as typing
import torch_geometric.testing.decorators as decorators

for name in ("WITH_PYG_LIB", "WITH_TORCH_SPARSE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE",
             "WITH_EDGE_TIME_NEIGHBOR_SAMPLE", "WITH_SAMPLED_OP"):
    for module in (typing, decorators):  # (decorators holds its own copies of some)
        if hasattr(module, name):
            setattr(module, name, True)
_has_package = decorators.has_package
decorators.has_package = lambda name: name.split()[0].split(">")[0].split("=")[0] in (
    "pyg_lib", "torch_sparse") or _has_package(name)
'''
IMPORTS = {"from torch_geometric.loader import NeighborLoader": "from tritongnn import NeighborLoader",
           "from torch_geometric.loader import LinkNeighborLoader": "from tritongnn import LinkNeighborLoader"}


def pyg_conftest(test_file: str) -> str:
    """The text of PyG's ``test/conftest.py`` above ``test_file`` in its
    checkout (the fixtures its tests take), or "" where there is none."""
    folder = os.path.dirname(os.path.abspath(test_file))
    for _ in range(2):  # test/loader/x.py -> test/conftest.py
        folder = os.path.dirname(folder)
        path = os.path.join(folder, "conftest.py")
        if os.path.isfile(path):
            return open(path).read() + "\n"
    return ""


def main(argv: list[str]) -> int:
    if not argv or not os.path.isfile(argv[0]):
        print(__doc__)
        return 2
    source = open(argv[0]).read()
    changed = [line for line in IMPORTS if line in source]
    if not changed:
        raise SystemExit(f"{argv[0]} imports no loader this tool knows: {list(IMPORTS)}")
    for line in changed:
        source = source.replace(line, IMPORTS[line])
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "conftest.py"), "w") as f:
            f.write(pyg_conftest(argv[0]) + CONFTEST)
        path = os.path.join(folder, os.path.basename(argv[0]))
        with open(path, "w") as f:
            f.write(source)
        env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
        # run from the folder: its conftest is loaded before PyG's file reads the gates
        return subprocess.call([sys.executable, "-m", "pytest", os.path.basename(path), "-p", "no:cacheprovider",
                                *argv[1:]], env=env, cwd=folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
