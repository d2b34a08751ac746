"""The SQLite engine and its statements, one file per concern (the same names as sql/postgres/ where both have them)."""
