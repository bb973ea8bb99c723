"""Lays out the import name ``icegroup`` before setuptools builds; pyproject.toml holds everything else.

The wheel and the editable install are built from ``build/python/icegroup``, links to the four
top-level folders (``infra/package_links.sh``, which ``make`` runs too). A build from a fresh clone
(``pip install .``, ``pip wheel .``) runs it here first, so it never builds a wheel without packages.
"""

import subprocess
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
subprocess.run(["bash", str(ROOT / "infra" / "package_links.sh")], check=True, cwd=ROOT)
setup()
