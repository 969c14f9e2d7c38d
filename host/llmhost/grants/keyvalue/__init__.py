"""Key-value stores (`[key-value.NAME]`): SQLite and Redis backends behind one protocol, with quotas."""
