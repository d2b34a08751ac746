"""`python -m build` makes an sdist and a wheel that install into a fresh virtualenv and work there."""

import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.packaging, pytest.mark.slow, pytest.mark.p1]

# Runs inside the fresh virtualenv, outside this checkout: the installed package must be whole.
SMOKE = """
import importlib.resources, sys
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                    "django.contrib.sessions", "django.contrib.messages", "django_jobq"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}},
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}],
)
django.setup()
import django_jobq
from django.core.checks import run_checks
from django.db.migrations.loader import MigrationLoader
from django.template.loader import get_template

assert "site-packages" in django_jobq.__file__, django_jobq.__file__
package = importlib.resources.files("django_jobq")
assert package.joinpath("py.typed").is_file()
for name in ("dashboard", "requeue", "breadcrumbs", "styles", "job/change_list", "deadjob/change_list"):
    get_template(f"admin/django_jobq/{name}.html")
loader = MigrationLoader(None, ignore_no_migrations=True)
assert ("django_jobq", "0001_initial") in loader.disk_migrations, sorted(loader.disk_migrations)
problems = [m for m in run_checks() if m.id.startswith("jobq.")]  # the admin's own need a full site
assert not problems, problems

@django_jobq.task(name="smoke.add")
def add(a: int, b: int) -> int:
    return a + b
assert add(a=1, b=2) == 3
print("smoke ok", django_jobq.__version__)
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True, capture_output=True
    )
    return out


def test_the_sdist_and_wheel_hold_the_license_templates_migrations_and_py_typed(dist):
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for path in (
        "django_jobq/py.typed",
        "django_jobq/migrations/0001_initial.py",
        "django_jobq/templates/admin/django_jobq/dashboard.html",
        "django_jobq/templates/admin/django_jobq/breadcrumbs.html",
        "django_jobq/admin/jobs.py",
    ):
        assert path in in_wheel and path in in_sdist, path
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in in_wheel)
    assert {"LICENSE", "CHANGELOG.md", "README.md"} <= in_sdist
    assert not any(name.startswith(("tests/", "bench/", "example_project/")) for name in in_wheel | in_sdist)
    metadata = next(n for n in in_wheel if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(metadata).decode()
    for classifier in ("Framework :: Django :: 6.1", "Programming Language :: Python :: 3.13"):
        assert f"Classifier: {classifier}" in text
    assert "License-Expression: MIT" in text


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_each_artifact_installs_into_a_fresh_virtualenv_and_works(dist, kind, tmp_path):
    artifact = next(dist.glob("*.whl" if kind == "wheel" else "*.tar.gz"))
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(artifact)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    smoke = subprocess.run(
        [str(python), "-c", SMOKE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert smoke.returncode == 0, smoke.stderr
    assert smoke.stdout.strip() == "smoke ok 0.1.0"


def test_twine_accepts_the_sdist_and_the_wheel(dist):
    run = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir())],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("PASSED") == 2, run.stdout


def test_check_manifest_finds_the_sdist_and_the_committed_files_agree(tmp_path):
    """On a clone of what is committed (a working tree's new files are not the release's)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: check-manifest compares the sdist with what git tracks")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    run = subprocess.run(
        [sys.executable, "-m", "check_manifest", str(clone)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_pip_install_of_a_checkout_leaves_nothing_in_it(tmp_path):
    """pip builds a directory in place: the build backend must leave the checkout as it was (no
    build/, no *.egg-info). On a clone of what is committed, installed without its dependencies."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the check compares the checkout with what git tracks")
    clone, site = tmp_path / "clone", tmp_path / "site"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site), str(clone)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    assert (site / "django_jobq" / "py.typed").is_file()
    left = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert left.stdout == ""
