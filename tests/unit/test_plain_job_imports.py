"""A plain Spark job built from icegroup's settings loads none of pyiceberg, requests or SQLAlchemy's ORM.

The benchmarks' plain jobs (``tests/benchmarks/baselines.py``) start Spark with icegroup's lakehouse
config, as a user's job beside icegroup would. When that config imported pyiceberg, their JVMs
started half a second later than a plain job's, and every ratio over them flattered icegroup.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import repo_root

HEAVY = ("pyiceberg", "requests", "sqlalchemy.orm")


def test_building_a_spark_session_from_icegroups_settings_imports_no_catalog_client() -> None:
    loaded = f"sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {HEAVY!r}))"
    probe = f"import json, sys\nimport tests.benchmarks.baselines\nprint(json.dumps({loaded}))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo_root(), capture_output=True, text=True, timeout=120, check=True
    )

    assert json.loads(done.stdout.splitlines()[-1]) == []
