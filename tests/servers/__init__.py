"""Real servers the tests start or steer: a pausable TCP proxy, the local PostgreSQL cluster."""
