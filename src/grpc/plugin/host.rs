//! A provider plugin's process: start it, read its port, connect, stop it
//! (`../shared/spec/providers.md` §1 "Port", "Connect", §9).
//!
//! [`PluginProcess::start`] runs a [`PluginLaunch`] in its own process
//! group (unix), with the engine address as its last argument, as Pulumi
//! does. The plugin must print its port as the first line of its stdout;
//! keel reads that line byte by byte (nothing after it is consumed), drops
//! the .NET progress sequences Pulumi drops, and wants a number in
//! 1..65535. A plugin that prints something else, exits first, or prints
//! nothing within the timeout is killed (with everything it started) and
//! is an error naming the plugin, what it printed and the end of its
//! stderr. Then keel connects a [`Channel`] to `127.0.0.1:<port>`,
//! retrying briefly while the server comes up.
//!
//! Everything the plugin prints afterwards (stdout after the port, stderr
//! from the start) goes line by line to the diagnostics callback; the last
//! stderr lines are kept for errors about the process (only when the
//! process failed). They are the plugin's own output, which may echo the
//! secrets it was given: the texts in [`HostOptions::redact`] (and
//! [`PluginProcess::redact_also`]) are masked in all of it.
//!
//! [`PluginProcess::shutdown`] stops it as Pulumi's host does: close the
//! connection, interrupt the process group, wait up to a grace period,
//! then kill the group. Dropping a [`PluginProcess`] kills the group.

use std::collections::VecDeque;
use std::fmt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use super::discovery::PluginLaunch;
use crate::locks::MutexExt;
use crate::source::migration::Redactor;

/// How many stderr lines errors keep.
const STDERR_LINES: usize = 20;
/// The longest first line read looking for the port.
const PORT_LINE_MAX: usize = 4096;
/// How long keel waits for a killed plugin to be gone, and for its output
/// to end, before reporting.
const REAP: Duration = Duration::from_secs(5);

/// Which output a diagnostic line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Stdout, after the port line.
    Stdout,
    /// Stderr.
    Stderr,
}

/// One line a plugin printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The plugin's package.
    pub package: String,
    /// Where it printed it.
    pub stream: Stream,
    /// The line, without its line break (invalid UTF-8 replaced).
    pub line: String,
}

/// Where a plugin's output lines go.
pub type Diagnostics = Arc<dyn Fn(Diagnostic) + Send + Sync>;

/// Timeouts and secrets of [`PluginProcess::start_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// How long the plugin has to print its port.
    pub port_timeout: Duration,
    /// How long keel tries to connect to the port.
    pub connect_timeout: Duration,
    /// Texts masked as `[secret]` in everything the plugin prints, before
    /// it reaches the diagnostics or an error (the plaintexts of the
    /// secrets it is given, e.g. in its environment; more can be added
    /// later with [`PluginProcess::redact_also`]).
    pub redact: Vec<String>,
}

impl Default for HostOptions {
    /// A minute for the port (interpreted plugins start slowly on a busy
    /// machine), ten seconds to connect (Pulumi's
    /// `pluginRPCConnectionTimeout`).
    fn default() -> Self {
        Self {
            port_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            redact: Vec::new(),
        }
    }
}

/// The last stderr lines, as a message suffix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StderrTail(pub Vec<String>);

impl fmt::Display for StderrTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("; its stderr was empty");
        }
        f.write_str("; the end of its stderr:")?;
        for line in &self.0 {
            write!(f, "\n  | {line}")?;
        }
        Ok(())
    }
}

/// Why a plugin could not be started.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The program could not be run.
    #[error("could not start {plugin} (`{program}`): {source}")]
    Spawn {
        /// The plugin.
        plugin: String,
        /// The program run.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No port line in time.
    #[error("{plugin} printed no port within {timeout:?} and was killed{}{stderr}", printed_suffix(.printed))]
    NoPort {
        /// The plugin.
        plugin: String,
        /// The timeout.
        timeout: Duration,
        /// What it printed on stdout so far.
        printed: String,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// A first line that is not a port.
    #[error("{plugin} printed {printed:?} where its port should be (a number in 1..65535) and was killed{stderr}")]
    Garbage {
        /// The plugin.
        plugin: String,
        /// The line.
        printed: String,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The plugin exited (or closed its stdout) before printing its port,
    /// or before keel could connect.
    #[error("{plugin} exited prematurely ({status}){}{stderr}", printed_suffix(.printed))]
    Exited {
        /// The plugin.
        plugin: String,
        /// Its exit status, as a person reads it.
        status: String,
        /// What it printed on stdout before its port, if anything.
        printed: String,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The port did not accept a connection in time.
    #[error("could not connect to {plugin} at 127.0.0.1:{port} within {timeout:?}: {message}")]
    Connect {
        /// The plugin.
        plugin: String,
        /// The port it printed.
        port: u16,
        /// The timeout.
        timeout: Duration,
        /// The last connection error.
        message: String,
    },
    /// Its stdout could not be read.
    #[error("could not read the port of {plugin}: {source}")]
    Read {
        /// The plugin.
        plugin: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn printed_suffix(printed: &str) -> String {
    if printed.is_empty() {
        String::new()
    } else {
        format!("; its stdout so far: {printed:?}")
    }
}

/// An exit status as a person reads it.
pub fn describe_status(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("killed by signal {sig}");
        }
    }
    status.to_string()
}

/// The process group and the child's killer, shared with the task that
/// waits for the child.
struct Group {
    pid: Option<u32>,
    /// The child was reaped: its pid may be reused, no group signal is
    /// sent any more.
    reaped: Mutex<bool>,
    /// Asks the waiting task to kill the child itself.
    kill: Notify,
}

impl Group {
    /// Sends `sig` to the process group (unix; nothing once reaped).
    #[cfg(unix)]
    fn signal(&self, sig: rustix::process::Signal) {
        let reaped = self.reaped.locked();
        if *reaped {
            return;
        }
        if let Some(pid) = self
            .pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH: nothing is left.
            let _ = rustix::process::kill_process_group(pid, sig);
        }
    }

    /// Kills the plugin and what it started.
    fn kill(&self) {
        #[cfg(unix)]
        self.signal(rustix::process::Signal::KILL);
        self.kill.notify_one();
    }

    /// Asks the plugin to stop (SIGINT to the group; elsewhere a kill).
    fn interrupt(&self) {
        #[cfg(unix)]
        self.signal(rustix::process::Signal::INT);
        #[cfg(not(unix))]
        self.kill.notify_one();
    }
}

/// A running provider plugin.
pub struct PluginProcess {
    plugin: String,
    package: String,
    pid: Option<u32>,
    port: u16,
    channel: Option<Channel>,
    group: Arc<Group>,
    exit: watch::Receiver<Option<ExitStatus>>,
    tail: Arc<Mutex<VecDeque<String>>>,
    redact: Arc<Mutex<Redactor>>,
    readers: Vec<JoinHandle<()>>,
    /// Held open, never written (as Pulumi does).
    _stdin: Option<ChildStdin>,
}

impl fmt::Debug for PluginProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginProcess")
            .field("plugin", &self.plugin)
            .field("pid", &self.pid)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// How a plugin ended under [`PluginProcess::shutdown`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Its exit status (`None`: it could not be waited for).
    pub status: Option<ExitStatus>,
    /// It did not stop within the grace period and was killed.
    pub killed: bool,
}

impl PluginProcess {
    /// Starts `launch` with the default [`HostOptions`]; see the module
    /// docs. `engine_address` (`127.0.0.1:<port>` of keel's `Engine`
    /// service) is passed as the last argument when given.
    ///
    /// # Errors
    /// [`HostError`]; no process is left behind.
    pub async fn start(
        launch: &PluginLaunch,
        engine_address: Option<&str>,
        diagnostics: impl Fn(Diagnostic) + Send + Sync + 'static,
    ) -> Result<Self, HostError> {
        Self::start_with(
            launch,
            engine_address,
            Arc::new(diagnostics),
            HostOptions::default(),
        )
        .await
    }

    /// [`PluginProcess::start`] with explicit timeouts.
    ///
    /// # Errors
    /// [`HostError`]; no process is left behind.
    pub async fn start_with(
        launch: &PluginLaunch,
        engine_address: Option<&str>,
        diagnostics: Diagnostics,
        options: HostOptions,
    ) -> Result<Self, HostError> {
        Self::start_redacting(launch, engine_address, diagnostics, options, Arc::default()).await
    }

    /// [`PluginProcess::start_with`], its printed lines also masked with
    /// every text `redact` holds when a line is printed: the caller shares
    /// it and adds the secrets it sends as it goes (no line printed after
    /// a secret was added can show it).
    ///
    /// # Errors
    /// [`HostError`]; no process is left behind.
    pub async fn start_redacting(
        launch: &PluginLaunch,
        engine_address: Option<&str>,
        diagnostics: Diagnostics,
        options: HostOptions,
        redact: Arc<Mutex<Redactor>>,
    ) -> Result<Self, HostError> {
        let plugin = launch.describe();
        let mut cmd = crate::source::command::supervised(&launch.program);
        cmd.args(&launch.args)
            .args(engine_address)
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        if let Some(d) = &launch.dir {
            cmd.current_dir(d);
        }
        let mut child = cmd.spawn().map_err(|source| HostError::Spawn {
            plugin: plugin.clone(),
            program: launch.program.display().to_string(),
            source,
        })?;
        let pid = child.id();
        let group = Arc::new(Group {
            pid,
            reaped: Mutex::new(false),
            kill: Notify::new(),
        });
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (exit_tx, exit) = watch::channel(None);
        {
            let group = Arc::clone(&group);
            tokio::spawn(async move {
                let status = tokio::select! {
                    s = child.wait() => s,
                    () = group.kill.notified() => {
                        let _ = child.start_kill();
                        child.wait().await
                    }
                };
                // What it started goes with it; then its pid is free.
                #[cfg(unix)]
                group.signal(rustix::process::Signal::KILL);
                *group.reaped.locked() = true;
                let _ = exit_tx.send(Some(status.unwrap_or_else(failed_wait)));
            });
        }
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let mut me = Self {
            plugin,
            package: launch.package.clone(),
            pid,
            port: 0,
            channel: None,
            group,
            exit,
            tail,
            redact,
            readers: Vec::new(),
            _stdin: stdin,
        };
        me.redact_also(options.redact.iter().cloned());
        if let Some(err) = stderr {
            let h = me.forward(err, Stream::Stderr, Arc::clone(&diagnostics));
            me.readers.push(h);
        }
        let Some(mut stdout) = stdout else {
            return Err(me
                .fail(|plugin, stderr| HostError::Read {
                    plugin,
                    source: std::io::Error::other(format!("no stdout pipe{stderr}")),
                })
                .await);
        };
        let mut printed = Vec::new();
        let read =
            tokio::time::timeout(options.port_timeout, first_line(&mut stdout, &mut printed)).await;
        let port = match read {
            Err(_) => {
                let shown = me.masked(&lossy(&printed));
                let timeout = options.port_timeout;
                return Err(me
                    .fail(|plugin, stderr| HostError::NoPort {
                        plugin,
                        timeout,
                        printed: shown,
                        stderr,
                    })
                    .await);
            }
            Ok(Err(source)) => {
                return Err(me
                    .fail(|plugin, _| HostError::Read { plugin, source })
                    .await)
            }
            // End of stdout before a line break: it exited (or closed
            // stdout, which is as good as dead to keel).
            Ok(Ok(false)) => {
                let shown = me.masked(&lossy(&printed));
                let status = me.wait_exit(REAP).await;
                return Err(me
                    .fail(|plugin, stderr| HostError::Exited {
                        plugin,
                        status: status
                            .as_ref()
                            .map_or_else(|| "it closed its stdout".to_owned(), describe_status),
                        printed: shown,
                        stderr,
                    })
                    .await);
            }
            Ok(Ok(true)) => match parse_port(&printed) {
                Some(p) => p,
                None => {
                    let shown = me.masked(lossy(&printed).trim_end());
                    return Err(me
                        .fail(|plugin, stderr| HostError::Garbage {
                            plugin,
                            printed: shown,
                            stderr,
                        })
                        .await);
                }
            },
        };
        me.port = port;
        let h = me.forward(stdout, Stream::Stdout, diagnostics);
        me.readers.push(h);
        me.channel = Some(me.connect(options.connect_timeout).await?);
        Ok(me)
    }

    /// Forwards `r`'s lines to the diagnostics (stderr: also to the tail).
    fn forward<R: AsyncRead + Unpin + Send + 'static>(
        &self,
        r: R,
        stream: Stream,
        diagnostics: Diagnostics,
    ) -> JoinHandle<()> {
        let tail = Arc::clone(&self.tail);
        let redact = Arc::clone(&self.redact);
        let package = self.package.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let line = redact
                    .locked()
                    .redact(lossy(&buf).trim_end_matches(['\n', '\r']));
                if stream == Stream::Stderr {
                    let mut t = tail.locked();
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.clone());
                }
                diagnostics(Diagnostic {
                    package: package.clone(),
                    stream,
                    line,
                });
            }
        })
    }

    /// Connects to the port, retrying until `timeout`; an exit meanwhile
    /// is [`HostError::Exited`].
    async fn connect(&mut self, timeout: Duration) -> Result<Channel, HostError> {
        let port = self.port;
        let endpoint = match Endpoint::from_shared(format!("http://127.0.0.1:{port}")) {
            Ok(e) => e.connect_timeout(Duration::from_secs(1)),
            Err(e) => {
                let message = e.to_string();
                return Err(self
                    .fail(|plugin, _| HostError::Connect {
                        plugin,
                        port,
                        timeout,
                        message,
                    })
                    .await);
            }
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let message = match endpoint.connect().await {
                Ok(c) => return Ok(c),
                Err(e) => e.to_string(),
            };
            if let Some(status) = self.exited() {
                return Err(self
                    .fail(|plugin, stderr| HostError::Exited {
                        plugin,
                        status: describe_status(&status),
                        printed: String::new(),
                        stderr,
                    })
                    .await);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self
                    .fail(|plugin, _| HostError::Connect {
                        plugin,
                        port,
                        timeout,
                        message,
                    })
                    .await);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the plugin, waits for it and its output to end, and builds the
    /// error from the plugin's name and the end of its stderr.
    async fn fail(&mut self, make: impl FnOnce(String, StderrTail) -> HostError) -> HostError {
        self.group.kill();
        let _ = self.wait_exit(REAP).await;
        for h in self.readers.drain(..) {
            let _ = tokio::time::timeout(REAP, h).await;
        }
        make(self.plugin.clone(), self.stderr_tail())
    }

    /// Waits up to `timeout` for the process to exit.
    async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut rx = self.exit.clone();
        let r = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match r {
            Ok(Ok(s)) => *s,
            _ => None,
        }
    }

    /// Masks `texts` too in what it prints from now on (e.g. the secrets
    /// of the configuration sent to it).
    pub fn redact_also(&self, texts: impl IntoIterator<Item = String>) {
        self.redact.locked().add_texts(texts);
    }

    fn masked(&self, text: &str) -> String {
        self.redact.locked().redact(text)
    }

    /// The plugin as errors name it (`pulumi-resource-aws v6.1.0 from ...`).
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Its process id (the process group's id on unix).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The port it printed.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection to it (a cheap clone).
    ///
    /// # Panics
    /// Never: a started process always has one until
    /// [`PluginProcess::shutdown`], which consumes it.
    pub fn channel(&self) -> Channel {
        self.channel
            .clone()
            .expect("a started plugin has a channel until shutdown")
    }

    /// Its exit status, once it has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// The last lines it printed on stderr.
    pub fn stderr_tail(&self) -> StderrTail {
        StderrTail(self.tail.locked().iter().cloned().collect())
    }

    /// If it has exited: the error saying so, with its status and the end
    /// of its stderr (for a call that failed because the plugin is gone).
    pub fn exit_error(&self) -> Option<HostError> {
        self.exited().map(|status| HostError::Exited {
            plugin: self.plugin.clone(),
            status: describe_status(&status),
            printed: String::new(),
            stderr: self.stderr_tail(),
        })
    }

    /// Stops it: closes keel's connection, interrupts its process group,
    /// waits up to `grace`, then kills the group. The caller sends
    /// `Cancel` first if it wants the plugin to know (spec §9).
    ///
    /// Every line it printed has reached the diagnostics when this returns
    /// (its output is read to the end, for up to 5 s after the exit).
    pub async fn shutdown(mut self, grace: Duration) -> Stopped {
        let stopped = self.stop(grace).await;
        for reader in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(REAP, reader).await;
        }
        stopped
    }

    async fn stop(&mut self, grace: Duration) -> Stopped {
        self.channel = None;
        if let Some(status) = self.exited() {
            return Stopped {
                status: Some(status),
                killed: false,
            };
        }
        self.group.interrupt();
        if let Some(status) = self.wait_exit(grace).await {
            return Stopped {
                status: Some(status),
                killed: false,
            };
        }
        self.group.kill();
        let status = self.wait_exit(REAP).await;
        Stopped {
            status,
            killed: true,
        }
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.group.kill();
    }
}

/// A status for a child that could not be waited for (it was killed and
/// is gone; the OS error is not worth more).
fn failed_wait(_: std::io::Error) -> ExitStatus {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus::from_raw(9)
    }
    #[cfg(not(unix))]
    {
        ExitStatus::default()
    }
}

/// Reads stdout one byte at a time up to the first line break (so that
/// nothing after it is consumed), into `buf` (at most
/// [`PORT_LINE_MAX`] bytes). `Ok(true)`: a line; `Ok(false)`: end of
/// stdout first; a line too long counts as a line (garbage).
async fn first_line(r: &mut ChildStdout, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    loop {
        let mut b = [0u8; 1];
        if r.read(&mut b).await? == 0 {
            return Ok(false);
        }
        if b[0] == b'\n' {
            return Ok(true);
        }
        buf.push(b[0]);
        if buf.len() >= PORT_LINE_MAX {
            return Ok(true);
        }
    }
}

/// The port in a first line: .NET's progress sequences removed, spaces
/// and `\r` trimmed, a number in 1..65535.
fn parse_port(line: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(line).ok()?;
    let text = text
        .replace("\x1b]9;4;3;\x1b\\", "")
        .replace("\x1b]9;4;0;\x1b\\", "");
    let port: u16 = text.trim().parse().ok()?;
    (port != 0).then_some(port)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_as_pulumi_parses_them() {
        assert_eq!(parse_port(b"12345"), Some(12345));
        assert_eq!(parse_port(b" 80\r"), Some(80));
        assert_eq!(
            parse_port(b"\x1b]9;4;3;\x1b\\4242\x1b]9;4;0;\x1b\\"),
            Some(4242)
        );
        for bad in [&b"0"[..], b"65536", b"-1", b"port 80", b"", b"\xff"] {
            assert_eq!(parse_port(bad), None, "{bad:?}");
        }
    }
}
