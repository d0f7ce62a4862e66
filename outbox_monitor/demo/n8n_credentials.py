"""The two credentials the shipped n8n workflows name, generated for one outbox database:
Postgres (from a libpq DSN, or the ``PG*`` variables the shipped credential files read)
and the HTTP Header Auth sent to the downstream; in n8n's plain import format.
"""

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from outbox_monitor.errors import ConfigError

POSTGRES_CREDENTIAL = "Outbox Postgres"
DOWNSTREAM_CREDENTIAL = "Outbox downstream"
POSTGRES_CREDENTIAL_ID = "OutboxPostgres01"
DOWNSTREAM_CREDENTIAL_ID = "OutboxDownstrm01"
"""The ids of the shipped credential files (n8n/credentials), so a re-import replaces them."""
_PLAIN_SSL_MODES = ("disable", "allow", "prefer")
"""libpq modes that accept a plain connection; n8n's credential has no fallback, so: ``disable``."""


def pg_environment(dsn: str) -> dict[str, str]:
    """The libpq variables (``PGHOST``, ``PGPORT``, ``PGDATABASE``, ``PGUSER``,
    ``PGPASSWORD``, ``PGSSLMODE``) the shipped credential files read, for a DSN.

    Missing parts fall back to this process's ``PG*`` variables, then to libpq's defaults.

    Raises:
        ConfigError: the DSN names a Unix socket (n8n connects over TCP only).
    """
    parts = conninfo_to_dict(dsn)

    def part(key: str, variable: str, default: str) -> str:
        return str(parts.get(key) or os.environ.get(variable) or default).split(",")[0]

    host = part("host", "PGHOST", "localhost")
    if host.startswith("/"):
        raise ConfigError(
            f"n8n cannot use the Unix socket {host}",
            hint="Give a DSN with a TCP host, e.g. postgresql://user:pw@127.0.0.1:5432/db.",
        )
    return {
        "PGHOST": host,
        "PGPORT": part("port", "PGPORT", "5432"),
        "PGDATABASE": part("dbname", "PGDATABASE", "postgres"),
        "PGUSER": part("user", "PGUSER", "postgres"),
        "PGPASSWORD": str(parts.get("password") or os.environ.get("PGPASSWORD") or ""),
        "PGSSLMODE": part("sslmode", "PGSSLMODE", "prefer"),
    }


def postgres_credential(dsn: str, *, name: str = POSTGRES_CREDENTIAL) -> dict[str, Any]:
    """The n8n Postgres credential (plain, unencrypted import format) for a libpq DSN.

    Args:
        dsn: ``postgresql://user:password@host:port/db`` or ``key=value`` form; missing
            parts come from ``PG*`` variables (see ``pg_environment``).
        name: the credential's name, which the workflows reference.

    Returns:
        ``{"id", "name", "type": "postgres", "data": {host, port, database, user,
        password, ssl, ...}}`` for ``n8n import:credentials``. n8n has no ``prefer``
        (TLS, else plain): ``disable``/``allow``/``prefer`` give ``disable``, the
        others ``require``.

    Raises:
        ConfigError: the DSN names a Unix socket (n8n connects over TCP only).
    """
    env = pg_environment(dsn)
    return {
        "id": POSTGRES_CREDENTIAL_ID,
        "name": name,
        "type": "postgres",
        "data": {
            "host": env["PGHOST"],
            "port": int(env["PGPORT"]),
            "database": env["PGDATABASE"],
            "user": env["PGUSER"],
            "password": env["PGPASSWORD"],
            "maxConnections": 10,
            "allowUnauthorizedCerts": False,
            "ssl": "disable" if env["PGSSLMODE"] in _PLAIN_SSL_MODES else "require",
            "sshTunnel": False,
        },
    }


def header_credential(
    header: str, value: str, *, name: str = DOWNSTREAM_CREDENTIAL
) -> dict[str, Any]:
    """The n8n HTTP Header Auth credential sent to the downstream (e.g. ``Authorization``)."""
    return {
        "id": DOWNSTREAM_CREDENTIAL_ID,
        "name": name,
        "type": "httpHeaderAuth",
        "data": {"name": header, "value": value},
    }
