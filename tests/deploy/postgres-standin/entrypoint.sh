#!/bin/sh
# The official image's contract, shortened: initdb with POSTGRES_* on an empty PGDATA,
# password authentication from other hosts, then the server itself as PID 1 (user
# postgres, by setpriv's exec: it gets the stop signal).
set -eu
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
  user="${POSTGRES_USER:-postgres}"
  printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
  chown postgres /tmp/pwfile
  runuser -u postgres -- initdb -D "$PGDATA" -U "$user" --pwfile=/tmp/pwfile \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
  rm -f /tmp/pwfile
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "${POSTGRES_DB:-$user}" != postgres ]; then
    runuser -u postgres -- postgres --single -D "$PGDATA" postgres >/dev/null <<SQL
CREATE DATABASE "${POSTGRES_DB:-$user}";
SQL
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- "$@" -c listen_addresses='*'
