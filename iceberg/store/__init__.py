"""Every table and table property icegroup keeps, and the only pyiceberg writes to them."""
