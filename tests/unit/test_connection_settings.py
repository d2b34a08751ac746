"""JOBQ["LISTEN_DATABASE"], ["POOL_MODE"], ["PREPARED_STATEMENTS"] and ["READ_DATABASE"], their checks
(jobq.E007, jobq.E013), the router check (jobq.E008) with django_jobq.routers.JobqRouter, and which
alias the console reads (django_jobq.replica) (no database server needed)."""

import pytest
from django.core.checks import run_checks

from django_jobq.conf import JobqSettings, listen_target
from django_jobq.exceptions import ConfigurationError
from django_jobq.models import Job, Schedule
from django_jobq.replica import read_alias
from django_jobq.routers import JobqRouter

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def _ids(settings, jobq):
    settings.JOBQ = jobq
    return sorted(m.id for m in run_checks() if m.id and m.id.startswith("jobq."))


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("default", "alias"),
        ("postgres://postgres@127.0.0.1:5432/jobq", "dsn"),
        ("host=127.0.0.1 port=5432 dbname=jobq", "dsn"),
    ],
)
def test_listen_database_is_an_alias_or_a_dsn(value, kind):
    assert listen_target(value) == (kind, value)
    assert JobqSettings.from_dict({"LISTEN_DATABASE": value}).listen_database == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nope", r"'nope' is neither a database alias \('default', 'replica'\) nor a DSN"),
        ("host=a dbname", 'not a valid PostgreSQL DSN: missing "=" after "dbname"'),
        ("", "must be a database alias, a PostgreSQL DSN or None"),
        (5432, "must be a database alias, a PostgreSQL DSN or None"),
    ],
)
def test_a_bad_listen_database_is_refused(value, message):
    with pytest.raises(ConfigurationError, match=message):
        JobqSettings.from_dict({"LISTEN_DATABASE": value})


def test_a_bad_dsn_error_does_not_repeat_the_password():
    with pytest.raises(ConfigurationError, match='invalid URI query parameter: "bogus"') as caught:
        JobqSettings.from_dict({"LISTEN_DATABASE": "postgres://u:s3cret@db:5432/app?bogus=1"})
    assert "s3cret" not in str(caught.value)


def test_pool_mode_is_session_or_transaction():
    assert JobqSettings.from_dict({}).pool_mode == "session"
    with pytest.raises(ConfigurationError, match='POOL_MODE"] must be "session" or "transaction"'):
        JobqSettings.from_dict({"POOL_MODE": "statement"})


@pytest.mark.parametrize("listen", [None, "default"])
def test_transaction_pooling_refuses_listen_through_the_pooler(listen):
    with pytest.raises(ConfigurationError, match="LISTEN through a transaction pooler receives nothing"):
        JobqSettings.from_dict({"POOL_MODE": "transaction", "LISTEN_DATABASE": listen})


def test_transaction_pooling_with_a_direct_listen_or_polling_only():
    direct = "postgres://postgres@127.0.0.1:5432/jobq"
    assert JobqSettings.from_dict({"POOL_MODE": "transaction", "LISTEN_DATABASE": direct}).notify
    assert not JobqSettings.from_dict({"POOL_MODE": "transaction", "NOTIFY": False}).notify


def test_prepared_statements_default_follows_the_pool_mode():
    assert JobqSettings.from_dict({}).prepared_statements is True
    assert JobqSettings.from_dict({"POOL_MODE": "transaction", "NOTIFY": False}).prepared_statements is False
    # PgBouncer >= 1.21 with max_prepared_statements: prepared statements on through the pooler.
    on = {"POOL_MODE": "transaction", "NOTIFY": False, "PREPARED_STATEMENTS": True}
    assert JobqSettings.from_dict(on).prepared_statements is True
    assert JobqSettings.from_dict({"PREPARED_STATEMENTS": False}).prepared_statements is False
    with pytest.raises(ConfigurationError, match="PREPARED_STATEMENTS"):
        JobqSettings.from_dict({"PREPARED_STATEMENTS": "yes"})


def test_check_ids_for_connections(settings, monkeypatch):
    assert _ids(settings, {"LISTEN_DATABASE": "nope"}) == ["jobq.E007"]
    assert _ids(settings, {"POOL_MODE": "transaction"}) == ["jobq.E007"]
    assert _ids(settings, {"POOL_MODE": "transaction", "NOTIFY": False}) == []
    assert _ids(settings, {"POOL_MODE": "transaction", "LISTEN_DATABASE": "postgres://db/app"}) == []
    from django.db import connections

    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    ids = _ids(settings, {"LISTEN_DATABASE": "default"})  # LISTEN on a SQLite alias
    assert ids.count("jobq.E007") == 1


class Elsewhere:
    def db_for_read(self, model, **hints):
        return "replica"

    def db_for_write(self, model, **hints):
        return "default"

    def allow_migrate(self, db, app_label, **hints):
        return app_label != "django_jobq"


def test_check_refuses_routers_that_send_jobq_elsewhere(settings):
    settings.DATABASE_ROUTERS = [Elsewhere()]
    messages = [m for m in run_checks() if m.id == "jobq.E008"]
    assert [m.id for m in messages] == ["jobq.E008"]
    assert "reads to 'replica' and writes to 'default'" in messages[0].msg
    assert "do not allow its migrations on 'default'" in messages[0].msg
    assert "django_jobq.routers.JobqRouter" in messages[0].hint


def test_the_router_keeps_jobq_models_on_the_queue_alias(settings):
    settings.JOBQ = {"DATABASE": "queue"}
    router = JobqRouter()
    from django.contrib.auth.models import User

    assert router.db_for_read(Job) == router.db_for_write(Schedule) == "queue"
    assert router.db_for_read(User) is None and router.db_for_write(User) is None
    assert router.allow_migrate("queue", "django_jobq", model_name="job") is True
    assert router.allow_migrate("default", "django_jobq", model_name="job") is False
    assert router.allow_migrate("default", "auth") is None
    assert router.allow_relation(Job(), Job()) is True
    assert router.allow_relation(Job(), User()) is None


def test_with_the_router_the_check_passes(settings):
    settings.DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]
    assert _ids(settings, {}) == []


@pytest.mark.parametrize("value", ["nope", "", 5, "replica\x00", "default; DROP TABLE jobq_job"])
def test_a_read_database_that_is_not_an_alias_is_refused(settings, value):
    with pytest.raises(ConfigurationError, match=r'JOBQ\["READ_DATABASE"\] must be None or an alias'):
        JobqSettings.from_dict({"READ_DATABASE": value})
    assert _ids(settings, {"READ_DATABASE": value}) == ["jobq.E013"]


@pytest.mark.parametrize("value", [-1, "5", True, 86401])
def test_the_lag_warning_is_a_number_of_seconds(value):
    with pytest.raises(ConfigurationError, match="READ_LAG_WARNING_SECONDS"):
        JobqSettings.from_dict({"READ_LAG_WARNING_SECONDS": value})


def test_a_read_database_of_another_kind_is_refused_by_the_check(settings, monkeypatch):
    from django.db import connections

    assert _ids(settings, {"READ_DATABASE": "replica"}) == []
    monkeypatch.setattr(connections["replica"], "vendor", "sqlite")
    assert _ids(settings, {"READ_DATABASE": "replica"}) == ["jobq.E013"]


class ReplicaRouter:
    """Django's primary/replica recipe: reads to "replica", writes and migrations to "default"."""

    def db_for_read(self, model, **hints):
        return "replica"

    def db_for_write(self, model, **hints):
        return "default"

    def allow_migrate(self, db, app_label, **hints):
        return db == "default"


def test_the_read_alias_is_the_setting_then_a_replica_router_then_the_queue_database(settings):
    settings.JOBQ = {}
    assert read_alias() == "default"
    settings.DATABASE_ROUTERS = [ReplicaRouter()]
    assert read_alias() == "replica"  # the router's replica
    assert _ids(settings, {}) == []  # a primary/replica router passes jobq.E008
    settings.JOBQ = {"READ_DATABASE": "default"}
    assert read_alias() == "default"  # the setting wins
    settings.JOBQ = {}
    settings.DATABASE_ROUTERS = [Nowhere()]  # reads to an alias that does not exist: not a replica
    assert read_alias() == "default"


class Nowhere(ReplicaRouter):
    def db_for_read(self, model, **hints):
        return "gone"


def test_a_router_whose_writes_go_elsewhere_gives_no_replica(settings):
    settings.JOBQ = {"DATABASE": "replica"}
    settings.DATABASE_ROUTERS = [ReplicaRouter()]  # writes "default", not JOBQ["DATABASE"]
    assert read_alias() == "replica"
    settings.DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]  # reads and writes on DATABASE
    assert read_alias() == "replica"
