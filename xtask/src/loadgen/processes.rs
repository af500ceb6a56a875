//! The server processes `bench` measures: loopwatch, the pass-through (decoding or raw) and
//! rotel, each started on a free loopback port, pinned with `taskset` to the CPUs it is
//! given, and killed when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::loadgen::bench::Setup;

/// A started server process; killed when dropped.
pub(crate) struct ServerProcess {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    /// loopwatch's admin listener (`/metrics`); `None` for the other setups.
    pub(crate) admin: Option<SocketAddr>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free right now (bound, then released for the server to take).
fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Programs and paths the setups are started from.
pub(crate) struct Binaries {
    pub(crate) loopwatch: PathBuf,
    pub(crate) loadgen: PathBuf,
    pub(crate) rotel: Option<PathBuf>,
    /// Whether `taskset` pins the servers to their CPUs.
    pub(crate) taskset: bool,
    /// Whether the servers' own output is shown.
    pub(crate) server_logs: bool,
    pub(crate) scratch: Scratch,
}

/// A scratch folder for rotel's pid and log files, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new() -> std::io::Result<Scratch> {
        let path = std::env::temp_dir().join(format!("loopwatch-bench-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Binaries {
    fn command(&self, program: &Path, cpus: &str) -> Command {
        let mut command = if self.taskset && !cpus.is_empty() {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpus).arg(program);
            c
        } else {
            Command::new(program)
        };
        command.stdin(Stdio::null()).env_remove("RUST_LOG");
        if !self.server_logs {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
        command
    }

    /// Starts `setup` forwarding to `sink`, up to 3 attempts (a free port picked here can
    /// be taken by another process before the server binds it).
    pub(crate) fn start(
        &self,
        setup: Setup,
        sink: SocketAddr,
        cpus: &str,
        worker_threads: Option<usize>,
    ) -> anyhow::Result<ServerProcess> {
        let mut attempt = 1;
        loop {
            match self.start_once(setup, sink, cpus, worker_threads) {
                Ok(server) => return Ok(server),
                Err(e) if attempt < 3 => {
                    eprintln!("loadgen: {e:#}; starting it again");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts `setup` forwarding to `sink` and waits until it accepts connections.
    fn start_once(
        &self,
        setup: Setup,
        sink: SocketAddr,
        cpus: &str,
        worker_threads: Option<usize>,
    ) -> anyhow::Result<ServerProcess> {
        let addr = free_port()?;
        let admin = matches!(setup, Setup::Loopwatch)
            .then(free_port)
            .transpose()?;
        let downstream = format!("http://{sink}");
        let mut command = match setup {
            Setup::Loopwatch => {
                let mut c = self.command(&self.loopwatch, cpus);
                let admin = admin.map(|a| a.to_string()).unwrap_or_default();
                c.args(["serve", "--grpc-listen", &addr.to_string()])
                    .args(["--http-listen", "127.0.0.1:0", "--admin-listen", &admin])
                    .args(["--exporter-endpoint", &downstream])
                    .env("LOOPWATCH_DETECTION__FINGERPRINT_KEY", "loopwatch-bench");
                if let Some(n) = worker_threads {
                    c.env("LOOPWATCH_SERVER__WORKER_THREADS", n.to_string());
                }
                c
            }
            Setup::Passthrough | Setup::RawPassthrough => {
                let mut c = self.command(&self.loadgen, cpus);
                c.args(["loadgen", "passthrough", "--listen", &addr.to_string()])
                    .args(["--downstream", &downstream]);
                if setup == Setup::RawPassthrough {
                    c.arg("--raw");
                }
                if let Some(n) = worker_threads {
                    c.args(["--worker-threads", &n.to_string()]);
                }
                c
            }
            Setup::Rotel => {
                let rotel = self.rotel.as_deref().context("no rotel binary")?;
                let mut c = self.command(rotel, cpus);
                let scratch = &self.scratch.0;
                c.args(["start", "--otlp-grpc-endpoint", &addr.to_string()])
                    .args(["--otlp-http-endpoint", &free_port()?.to_string()])
                    .args([
                        "--exporter",
                        "otlp",
                        "--otlp-exporter-endpoint",
                        &downstream,
                    ])
                    .args(["--otlp-exporter-protocol", "grpc"])
                    // Both flags: this rotel version reads only the per-signal one for
                    // traces, and gzip (its default) would cost it CPU the others don't pay.
                    .args(["--otlp-exporter-compression", "none"])
                    .args(["--otlp-exporter-traces-compression", "none"])
                    .arg("--pid-file")
                    .arg(scratch.join(format!("rotel-{}.pid", addr.port())))
                    .arg("--log-file")
                    .arg(scratch.join("rotel.log"));
                c
            }
        };
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", setup.name()))?;
        let mut server = ServerProcess { child, addr, admin };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!("{} exited before listening: {status}", setup.name());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} did not listen on {addr} within 30 s",
                setup.name()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
