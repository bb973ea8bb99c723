"""The executor icegroup's jobs run their op with."""

import dagster as dg

ONE_PROCESS = dg.in_process_executor
"""The executor of every one-op job: its op runs in the run's own process.

Dagster's default executor spawns a second interpreter for each step, which imports Dagster and
loads the code location again before the op starts: seconds of a launched Borrower's start, for
a job of one op. In the run's process, a terminated run's interrupt reaches the op itself, which
``canceled_on_interrupt`` turns into a clean stop after the current shard.
"""
