"""Where a sweep writes and whom it talks to, checked before anything is created or started.

A sweep writes to three places (--out, the Optuna storage, the MLflow tracking store) and may join a Ray
cluster. Each is checked here with no side effect: nothing is created, no Ray, no MLflow client, and a
remote address gets a short TCP connect (an HTTP request for a tracking server) with a timeout, so an
unwritable folder or an address nobody answers is an error naming the flag in seconds, not a traceback
after Ray started or a retry loop of minutes that leaves an empty study behind.
"""

from __future__ import annotations

import os
import socket
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.spec.search import SpecError

PROBE_TIMEOUT_S = 3.0
# A study name is a folder under --out and an MLflow experiment: well under any file system's 255 bytes.
MAX_STUDY_NAME = 100
# MLflow retries an unreachable tracking server for minutes by default (7 retries, backoff factor 2,
# 120 s per request); once the server answered the probe, a few short retries are enough, and a record
# that still fails is spooled by the tracker and written later.
MLFLOW_HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
_DB_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}


class DestinationError(SpecError):
    """A destination flag that cannot work; the message names the flag and the fix."""


@dataclass(frozen=True)
class Destinations:
    out: Path
    study_dir: Path
    tracking_uri: str
    storage: str


def check_study_name(name: str) -> None:
    if len(name) > MAX_STUDY_NAME:
        raise DestinationError(
            f"--study: the name is {len(name)} characters long; it names a folder under --out and an "
            f"MLflow experiment, so keep it to {MAX_STUDY_NAME} characters at most"
        )


def resolve(out: str, study: str, tracking_uri: str | None, storage: str | None) -> Destinations:
    out_dir = Path(out).expanduser().resolve()
    return Destinations(
        out=out_dir,
        study_dir=out_dir / study,
        tracking_uri=tracking_uri or f"sqlite:///{out_dir / 'mlflow.db'}",
        storage=storage or f"sqlite:///{out_dir / 'optuna.db'}",
    )


def check_destinations(dest: Destinations, ray_address: str | None) -> None:
    """Raise DestinationError for the first destination that cannot work; create nothing."""
    check_out(dest.out)
    check_storage(dest.storage, dest.out)
    check_tracking(dest.tracking_uri, dest.out)
    if ray_address:
        check_ray_address(ray_address)


def _creatable_dir(path: Path) -> str | None:
    """Why `path` cannot be (or become) a folder this process writes to, or None when it can."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    return None if _writable(probe) else f"{probe} is not writable"


def _writable(folder: Path) -> bool:
    """Whether a file can be made in `folder`: tried, not guessed (root passes every permission check but
    not a read-only mount or /proc); the probe folder is removed at once."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".specsweep-probe-", dir=folder))
    except OSError:
        return False
    return True


def check_out(out: Path) -> None:
    why = _creatable_dir(out)
    if why:
        raise DestinationError(f"--out: {why}; give a folder you can write to (it is created if missing)")


def _sqlite_path(url: str) -> Path | None:
    """The file of a sqlite URL (None for an in-memory database)."""
    rest = url.split(":", 1)[1].removeprefix("///")
    if rest in ("", ":memory:") or rest.startswith(":memory:"):
        return None
    return Path(rest.split("?", 1)[0])


def _check_sqlite(flag: str, url: str, out: Path) -> None:
    db = _sqlite_path(url)
    if db is None:
        return
    if db.exists():
        if not db.is_file():
            raise DestinationError(f"{flag}: {db} is not a file; give a SQLite database file")
        if not os.access(db, os.R_OK | os.W_OK):
            raise DestinationError(f"{flag}: {db} is not writable; give a database file you can write")
    folder = db.parent.resolve()
    if folder == out or out in folder.parents:
        return  # under --out, which is created (check_out saw that it can be)
    if not folder.is_dir():
        raise DestinationError(
            f"{flag}: the folder {folder} does not exist (SQLite does not create it); create it, "
            "or leave the flag out to keep the database under --out"
        )
    if not _writable(folder):
        raise DestinationError(f"{flag}: the folder {folder} is not writable; give a folder you can write to")


def _probe_tcp(flag: str, host: str, port: int, what: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as err:
        raise DestinationError(
            f"{flag}: nothing answers at {host}:{port} within {PROBE_TIMEOUT_S:g} s ({err.strerror or err}); "
            f"start {what} there or fix the address"
        ) from None


def check_storage(url: str, out: Path) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        raise DestinationError(
            f"--storage: {url!r} is not a database URL SQLAlchemy knows; use e.g. sqlite:///PATH/optuna.db "
            "or postgresql://USER@HOST/DB (or leave it out: sqlite under --out)"
        ) from None
    except ImportError as err:
        raise DestinationError(
            f"--storage: the driver for {url.split(':', 1)[0]!r} is not installed ({err})"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _check_sqlite("--storage", url, out)
    elif parsed.host:
        _probe_tcp("--storage", parsed.host, parsed.port or _DB_PORTS.get(backend, 0), "the database")


# The tracking stores this MLflow builds (mlflow.tracking._tracking_service.utils registers them): a
# database (its scheme, or its scheme with a driver: postgresql+psycopg2://), an MLflow server, Databricks.
# A plain path or a file: URI is its filesystem backend, which MLflow 3 refuses unless
# MLFLOW_ALLOW_FILE_STORE is true.
_TRACKING_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
_DATABRICKS = ("databricks", "databricks-uc", "uc")


def _file_store_allowed() -> bool:
    """MLflow's own opt-in to its filesystem backend (its values: true/false/1/0, any case)."""
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")


def check_tracking(uri: str, out: Path) -> None:
    if uri in _DATABRICKS:
        return
    scheme = urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("file:") else ""
    base = scheme.split("+", 1)[0]
    if scheme in ("", "file"):
        if not _file_store_allowed():
            raise DestinationError(
                f"--tracking-uri: {uri!r} is a local path (MLflow's filesystem backend), which this MLflow "
                "refuses; use sqlite:///PATH/mlflow.db (or leave the flag out: sqlite under --out), "
                "http://HOST:PORT of an MLflow server, or set MLFLOW_ALLOW_FILE_STORE=true to keep a folder"
            )
        folder = Path(urlsplit(uri).path if scheme else uri).expanduser()
        why = _creatable_dir(folder)
        if why:
            raise DestinationError(
                f"--tracking-uri: {why}; give a folder you can write to, or a sqlite:/// or http:// URI"
            )
    elif base == "sqlite":
        _check_sqlite("--tracking-uri", uri, out)
    elif scheme in ("http", "https"):
        _probe_tracking_server(uri)
        for key, value in MLFLOW_HTTP_ENV.items():
            os.environ.setdefault(key, value)  # the user's own settings win
    elif base in _TRACKING_DATABASES:
        parsed = urlsplit(uri)
        if parsed.hostname:
            _probe_tcp("--tracking-uri", parsed.hostname, parsed.port or _DB_PORTS[base], "the database")
    elif scheme not in _DATABRICKS:
        raise DestinationError(
            f"--tracking-uri: {uri!r} has a scheme MLflow's tracking store does not know ({scheme}://); use "
            "sqlite:///PATH/mlflow.db, http://HOST:PORT of an MLflow server, or postgresql://, mysql://, "
            "mssql:// of a database (or leave the flag out: sqlite under --out)"
        )


def _probe_tracking_server(uri: str) -> None:
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return  # it answered (a proxy or an older server without /health): it is there
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DestinationError(
            f"--tracking-uri: no MLflow server answers at {uri} within {PROBE_TIMEOUT_S:g} s ({reason}); "
            "start it (mlflow server --host ...) or leave the flag out to keep MLflow under --out"
        ) from None


def check_ray_address(address: str) -> None:
    """`auto` is left to Ray (it fails fast when no cluster runs here); a host:port must answer."""
    if address in ("auto", "local"):
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise DestinationError(
            f"--ray-address: {address!r} is not HOST:PORT, ray://HOST:PORT or auto; "
            "use the address `ray start --head` printed"
        )
    _probe_tcp("--ray-address", host.strip("[]"), int(port), "the Ray head (`ray start --head`)")
