//! A private PostgreSQL server for one test: Debian's server binaries
//! (`scripts/test` installs the `postgresql` package when they are
//! missing), a fresh cluster in a temporary directory, listening on a Unix
//! socket only, run as an unprivileged user when the tests run as root (the
//! server refuses root). Stopped on drop; a test may stop it and start it
//! again on the same data to stand for a database that went away. Tests
//! read it back with a plain SQL client ([`Postgres::client`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::free_port;

/// One private server.
#[derive(Debug)]
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    run_as: Option<&'static str>,
    /// Also listening on 127.0.0.1 with TLS (`server.crt`, `server.key`).
    tls: bool,
}

/// The directory of the newest installed server's binaries.
fn server_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("PLANB_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| {
            dir.filter_map(|e| Some(e.ok()?.path().join("bin")))
                .collect()
        })
        .unwrap_or_default();
    versions.retain(|bin| bin.join("initdb").exists());
    versions.sort();
    versions.pop().unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install Debian's postgresql package (scripts/test does)"
        )
    })
}

impl Postgres {
    /// A fresh cluster, started; the superuser is `planb`, trusted on the
    /// socket.
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// [`Postgres::start`], also listening on 127.0.0.1 (the port of
    /// [`Postgres::tcp_url`]) with TLS: the certificate chain and the key,
    /// PEM.
    pub fn start_with_tls(certificate: &str, key: &str) -> Postgres {
        Postgres::start_with(Some((certificate, key)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("planb-pg")
            .tempdir()
            .expect("a temporary directory");
        let run_as = running_as_root().then_some("postgres");
        if let Some((certificate, key)) = tls {
            let key_path = dir.path().join("server.key");
            std::fs::write(dir.path().join("server.crt"), certificate).expect("certificate");
            std::fs::write(&key_path, key).expect("key");
            std::fs::set_permissions(
                &key_path,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .expect("chmod the key");
        }
        if let Some(user) = run_as {
            let status = Command::new("chown")
                .args(["-R", user, &dir.path().display().to_string()])
                .status()
                .expect("chown");
            assert!(status.success(), "chown {} to {user}", dir.path().display());
        }
        let postgres = Postgres {
            bin: server_bin(),
            port: free_port(),
            run_as,
            tls: tls.is_some(),
            dir,
        };
        postgres.run(
            "initdb",
            &[
                "-D",
                &postgres.data().display().to_string(),
                "-U",
                "planb",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        postgres.start_again();
        postgres
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The directory of the server's socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A libpq URL for the `postgres` database.
    pub fn url(&self) -> String {
        let host = self.socket_dir().display().to_string().replace('/', "%2F");
        format!("postgresql://planb@{host}:{}/postgres", self.port)
    }

    /// A libpq URL over TCP on 127.0.0.1 (a server started with TLS).
    pub fn tcp_url(&self) -> String {
        format!("postgresql://planb@127.0.0.1:{}/postgres", self.port)
    }

    /// A plain SQL client of the `postgres` database, over the socket; its
    /// connection runs on a task of the caller's runtime.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    }

    /// Starts the server (again) and waits until it takes connections.
    pub fn start_again(&self) {
        let dir = self.socket_dir().display();
        let mut options = format!("-k {dir} -p {} -c fsync=off", self.port);
        if self.tls {
            options.push_str(&format!(
                " -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"
            ));
        } else {
            options.push_str(" -c listen_addresses=");
        }
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
    }

    /// Stops the server (fast: sessions are cut).
    pub fn stop(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        );
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args([
                "-D",
                &self.data().display().to_string(),
                "-m",
                "immediate",
                "stop",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn running_as_root() -> bool {
    // `id -u` keeps this crate free of a libc binding for one call.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
