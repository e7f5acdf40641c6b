//! PostgreSQL for the tests of the database backend: a fresh database per
//! test, in the server `KEEL_TEST_POSTGRES` names (`.ci/postgres.sh` starts
//! one), else in a private cluster the test starts from the server
//! binaries (`KEEL_TEST_PG_BIN`, `KEEL_PG_BIN`, else
//! `/usr/lib/postgresql/15/bin`) and stops when dropped. As root, the
//! cluster runs as the `postgres` user (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The server binaries, if installed.
pub fn bin() -> Option<PathBuf> {
    let dir = std::env::var_os("KEEL_TEST_PG_BIN")
        .or_else(|| std::env::var_os("KEEL_PG_BIN"))
        .map_or_else(
            || PathBuf::from("/usr/lib/postgresql/15/bin"),
            PathBuf::from,
        );
    (dir.join("initdb").is_file() && dir.join("pg_ctl").is_file()).then_some(dir)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args` as the cluster's owner.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn run(mut c: Command, what: &str) {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A private PostgreSQL cluster, stopped when dropped.
pub struct Cluster {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    log: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Cluster {
    /// Starts a cluster in a temporary directory (none without binaries).
    pub fn start() -> Option<Self> {
        let bin = bin()?;
        let dir = tempfile::tempdir().expect("temp dir");
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["postgres:", &dir.path().display().to_string()]);
                    c
                },
                "chown the cluster's directory",
            );
        }
        let data = dir.path().join("data");
        let log = dir.path().join("server.log");
        let mut c = as_owner(&bin.join("initdb"));
        c.arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run(c, "initdb");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = Self {
            _dir: dir,
            data,
            bin,
            log,
            port,
        };
        cluster.pg_ctl("start");
        Some(cluster)
    }

    fn pg_ctl(&self, action: &str) {
        let mut c = as_owner(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(&self.data).arg("-l").arg(&self.log).args([
            "-w",
            "-m",
            "fast",
            "-o",
            &format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1",
                self.port,
                self.data.display()
            ),
            action,
        ]);
        run(c, &format!("pg_ctl {action}"));
    }

    /// Restarts the server (every connection is cut).
    pub fn restart(&self) {
        self.pg_ctl("restart");
    }

    /// The URL of its database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut c = as_owner(&self.bin.join("pg_ctl"));
        c.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"]);
        let _ = c.output();
    }
}

/// A fresh database for one test.
pub struct Pg {
    /// Its URL (`--backend`).
    pub url: String,
    /// The private cluster it is in, if any.
    pub cluster: Option<Cluster>,
}

fn createdb(maintenance: &str, name: &str) {
    let program = bin().map_or_else(|| PathBuf::from("createdb"), |b| b.join("createdb"));
    let mut c = Command::new(program);
    c.arg(format!("--maintenance-db={maintenance}")).arg(name);
    run(c, "createdb");
}

impl Pg {
    /// Runs `sql` with `psql` in the database; returns its unaligned
    /// output (a test's change behind keel's back).
    pub fn psql(&self, sql: &str) -> String {
        let program = bin().map_or_else(|| PathBuf::from("psql"), |b| b.join("psql"));
        let o = Command::new(program)
            .args([
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &self.url,
                "-c",
                sql,
            ])
            .output()
            .expect("run psql");
        assert!(
            o.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A new database named after `test`: in `KEEL_TEST_POSTGRES`'s server,
    /// else in a private cluster. `None` (with a message saying why the
    /// test is skipped) only when neither exists.
    pub fn new(test: &str) -> Option<Self> {
        let name = format!("keel_{test}_{}", std::process::id());
        if let Some(url) = std::env::var("KEEL_TEST_POSTGRES")
            .ok()
            .filter(|u| !u.is_empty())
        {
            createdb(&url, &name);
            let (server, _) = url.rsplit_once('/').expect("a database URL");
            return Some(Self {
                url: format!("{server}/{name}"),
                cluster: None,
            });
        }
        Self::private(test)
    }

    /// A new database in a private cluster (a test that restarts the
    /// server); `None` with a message when there are no server binaries.
    pub fn private(test: &str) -> Option<Self> {
        let Some(cluster) = Cluster::start() else {
            eprintln!(
                "SKIPPED {test}: no PostgreSQL server binaries (install postgresql-15, or set KEEL_TEST_PG_BIN) and KEEL_TEST_POSTGRES is unset"
            );
            return None;
        };
        createdb(&cluster.url("postgres"), "keel");
        Some(Self {
            url: cluster.url("keel"),
            cluster: Some(cluster),
        })
    }
}
