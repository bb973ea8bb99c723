"""``proc_cpu`` counts an arm's CPU by thread kind, also in a process that outlives the arm's own, as a JVM does."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.benchmarks.proc_cpu import run_arm, thread_kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("C2 CompilerThre", "jit"),
        ("C1 CompilerThre", "jit"),
        ("Executor task l", "tasks"),
        ("GC Thread#0", "gc"),
        ("G1 Conc#0", "gc"),
        ("VM Thread", "jvm rest"),
        ("dispatcher-even", "jvm rest"),
    ],
)
def test_a_jvm_thread_is_told_apart_by_its_name(name: str, kind: str) -> None:
    assert thread_kind(name) == kind


def test_an_arm_counts_its_own_cpu_and_that_of_a_child_that_outlives_it(tmp_path: Path) -> None:
    burn = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass\n"
    child = tmp_path / "child.py"
    arm_alive = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent: time.sleep(0.01)\n"
    child.write_text(arm_alive + burn.format(1.0))  # burns only once the arm has exited
    arm = tmp_path / "arm.py"
    arm.write_text(
        textwrap.dedent(f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, {str(child)!r}], start_new_session=True)
        """)
        + burn.format(0.6)
    )

    run = run_arm([sys.executable, str(arm)], {}, tmp_path / "arm.log")

    assert run.cpu_s["python"] >= 0.5, run
    assert run.cpu_s["jvm rest"] >= 0.6, f"the child's 1 s, after the arm exited (a last read misses 0.2 s): {run}"
    assert run.jvm_outlived_s >= 0.5
    assert run.cpu_s["jit"] == run.cpu_s["tasks"] == 0
    assert run.wall_s >= 0.5
