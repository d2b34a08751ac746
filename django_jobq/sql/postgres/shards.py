"""Statements about a shard database's id ranges (django_jobq.shards): read and set once per
migrate, never on a hot path. A sequence's name comes from the catalogue (pg_get_serial_sequence
returns it quoted), and the bounds are integers the caller computed: nothing a user wrote reaches
the DDL."""

# id_range: a table's id sequence, its bounds and the ids its rows hold.
ID_RANGE = """
SELECT pg_get_serial_sequence(%(table)s, 'id'), s.min_value, s.max_value, s.last_value,
       (SELECT min(id) FROM {table}), (SELECT max(id) FROM {table})
FROM pg_sequences AS s
WHERE format('%%I.%%I', s.schemaname, s.sequencename)::regclass
    = pg_get_serial_sequence(%(table)s, 'id')::regclass
"""

# set_id_range: bound the sequence to [floor, ceiling]; it restarts at the floor only when it has
# not reached it yet (a fresh shard), so an id is never handed out twice.
SET_ID_RANGE = "ALTER SEQUENCE {sequence} MINVALUE {floor} MAXVALUE {ceiling} START WITH {floor}"
RESTART_AT_FLOOR = SET_ID_RANGE + " RESTART WITH {floor}"
