# Starts a private PostgreSQL 15 cluster for keel's tests and exports
# KEEL_TEST_POSTGRES=postgres://postgres@127.0.0.1:PORT/keel_test (and
# KEEL_TEST_PG_BIN, the server binaries, which the restart test uses).
# Source it (`. .ci/postgres.sh` from the repository root): it registers
# an EXIT trap that stops the cluster. Fails when the binaries are missing.
# The cluster lives in target/pg (made anew each time); as root, it runs
# as the `postgres` user (initdb refuses root).
pg_bin="${KEEL_PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$pg_bin/initdb" ] || [ ! -x "$pg_bin/pg_ctl" ]; then
  echo "PostgreSQL server binaries not found in $pg_bin (apt-get install postgresql-15, or set KEEL_PG_BIN)" >&2
  return 1 2>/dev/null || exit 1
fi
pg_dir="$PWD/target/pg"
pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
rm -rf "$pg_dir"
mkdir -p "$pg_dir"
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$pg_dir"
  # A checkout under a directory the postgres user cannot enter (/root):
  # the cluster goes to a temporary directory instead.
  if ! runuser -u postgres -- test -w "$pg_dir"; then
    pg_dir=$(mktemp -d /tmp/keel-pg.XXXXXX)
    chown postgres: "$pg_dir"
  fi
fi
pg_as "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust --no-sync >"$pg_dir/initdb.log"
pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
  -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on" start >/dev/null
keel_pg_stop() { pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true; }
trap keel_pg_stop EXIT
pg_as "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres keel_test
export KEEL_TEST_POSTGRES="postgres://postgres@127.0.0.1:$pg_port/keel_test"
export KEEL_TEST_PG_BIN="$pg_bin"
export KEEL_TEST_PG_DATA="$pg_dir/data"
echo "PostgreSQL on $KEEL_TEST_POSTGRES (data $pg_dir/data)"
