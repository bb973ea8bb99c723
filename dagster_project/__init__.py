"""The Dagster side of icegroup: Leader sensors, Borrower jobs, assets and the ``icegroup`` CLI."""
