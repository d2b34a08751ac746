"""The PostgreSQL engine and its statements, one file per concern (the same names as sql/sqlite/ where both have them)."""
