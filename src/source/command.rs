//! External-program migration callbacks (`cli.md` §3, `command:
//! [argv...]`).
//!
//! The program gets `{"urn": ..., "oldState": [...]}` (the callback's
//! arguments, `migrations.md` §4.1) on its stdin and prints, on its
//! stdout, `null` for no change or `{"newState": [...], "successors":
//! {...}}` (`successors` may be absent or `null`). Whatever it writes to
//! stderr is kept (its last 2 KiB) for error messages.
//!
//! A non-zero exit, a death by signal, output that is not one of those two
//! shapes, a failure to start the program or to read its output, and (when
//! the callback has its own deadline, [`CommandCallback::timeout`]) running
//! past it are errors; each message names the command and carries its exit
//! status and the end of its stderr. The engine reports them as
//! `callback-failed`. A program that exits without reading all of its input
//! is not an error by itself (a callback printing `null` need not read).
//!
//! The program runs in its own process group, which is killed (with
//! whatever the program started) when the program exits, when the
//! callback's future is dropped, and when its own deadline passes. Error
//! messages quote its output with the secrets it was given (and, when it
//! printed JSON, returned) replaced by `[secret]`
//! ([`super::migration::Redactor`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::migration::{
    CallbackResult, MigrationCallback, Redactor, StateMigrationArgs, StateMigrationResult,
};

/// How much of the end of the program's stderr error messages carry.
pub const STDERR_TAIL: usize = 2048;

/// How much of unparsable stdout an error message quotes.
const STDOUT_HEAD: usize = 512;

/// A callback that runs an external program.
///
/// ```
/// use keel::source::command::CommandCallback;
/// let cb = CommandCallback::new(vec!["python3".into(), "split.py".into()])
///     .in_dir("migrations")
///     .callback();
/// # drop(cb);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandCallback {
    argv: Vec<String>,
    dir: Option<PathBuf>,
    timeout: Option<Duration>,
}

/// A callback running `argv` (the program, then its arguments) in the
/// current directory, with no deadline of its own (the caller's timeout,
/// [`MigrationCallback::call`], applies).
pub fn command(argv: Vec<String>) -> MigrationCallback {
    CommandCallback::new(argv).callback()
}

impl CommandCallback {
    /// A callback running `argv`: the program (found on `PATH` unless it
    /// contains a `/`), then its arguments.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            dir: None,
            timeout: None,
        }
    }

    /// Runs the program in `dir`: a relative program path (one containing
    /// a `/`) and relative paths among the arguments resolve against it.
    /// Program files pass their own directory.
    pub fn in_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Kills the program and fails when it has not answered within
    /// `timeout`, with the end of its stderr in the message. Give the
    /// caller's timeout ([`super::migration::StateMigrations::timeout`]) a
    /// little more, so this deadline, with the better message, passes
    /// first.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The argv.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The directory it runs in (`None`: the current one).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The callback.
    pub fn callback(self) -> MigrationCallback {
        let this = Arc::new(self);
        MigrationCallback::new_async(move |args| {
            let this = this.clone();
            async move { this.run(args).await }
        })
    }

    /// The command line as a person reads it.
    fn display(&self) -> String {
        self.argv
            .iter()
            .map(|a| {
                if a.is_empty() || a.chars().any(|c| c.is_whitespace() || c == '"') {
                    format!("{a:?}")
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program to start: relative paths with a `/` resolve against the
    /// directory.
    fn program(&self) -> Option<PathBuf> {
        let first = self.argv.first()?;
        let p = Path::new(first);
        Some(match &self.dir {
            Some(d) if p.is_relative() && first.contains('/') => d.join(p),
            _ => p.to_owned(),
        })
    }

    /// Runs the program once with `args`.
    ///
    /// # Errors
    /// As the module docs say: a message naming the command, with its exit
    /// status and the end of its stderr.
    ///
    /// # Cancel safety
    /// Dropping the future kills the program.
    pub async fn run(&self, args: StateMigrationArgs) -> CallbackResult {
        let shown = self.display();
        let fail =
            |what: &str| -> super::ProgramError { format!("the command `{shown}` {what}").into() };
        let Some(program) = self.program() else {
            return Err(fail("is empty: give the program and its arguments"));
        };
        let input = serde_json::to_value(&args)
            .and_then(|v| serde_json::to_vec(&v).map(|bytes| (v, bytes)))
            .map_err(|e| fail(&format!("could not be given its input: {e}")));
        let (input, mut redactor) = match input {
            Ok((v, bytes)) => {
                let mut r = Redactor::default();
                r.collect(&v);
                (bytes, r)
            }
            Err(e) => return Err(e),
        };
        let mut cmd = supervised(&program);
        cmd.args(&self.argv[1..]);
        if let Some(d) = &self.dir {
            cmd.current_dir(d);
        }
        let mut child = cmd.spawn().map_err(|e| {
            let dir = self
                .dir
                .as_ref()
                .map(|d| format!(" (in {})", d.display()))
                .unwrap_or_default();
            fail(&format!("could not start{dir}: {e}"))
        })?;
        let group = Group(child.id());
        let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(fail("could not be connected to pipes"));
        };
        let write = async move {
            let r = match stdin.write_all(&input).await {
                Ok(()) => stdin.shutdown().await,
                Err(e) => Err(e),
            };
            drop(stdin);
            match r {
                // The program exited (or closed stdin) without reading
                // everything: its exit status and output decide.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other,
            }
        };
        let read_out = async move {
            let mut buf = Vec::new();
            stdout.read_to_end(&mut buf).await.map(|_| buf)
        };
        let mut err_buf = Vec::with_capacity(STDERR_TAIL * 2);
        let read_err = tail(&mut stderr, &mut err_buf, STDERR_TAIL);
        let talk = async {
            // Once the program exits, whatever it started is killed: its
            // output pipes close and the callback is over.
            let exited = async {
                let status = child.wait().await;
                group.kill();
                status
            };
            let (w, out, err, status) = tokio::join!(write, read_out, read_err, exited);
            (w, out, err, status)
        };
        let (w, out, err, status) = match self.timeout {
            None => talk.await,
            Some(t) => match tokio::time::timeout(t, talk).await {
                Ok(r) => r,
                Err(_) => {
                    // `talk` (which borrowed the child) is gone: kill it
                    // now rather than on drop, so it is dead when we answer.
                    group.kill();
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    return Err(fail(&format!(
                        "did not answer within {t:?} and was killed{}",
                        Stderr(&err_buf, &redactor)
                    )));
                }
            },
        };
        if let Err(e) = err {
            err_buf.extend_from_slice(format!("\n(reading stderr failed: {e})").as_bytes());
        }
        // Conservatively, the secrets of what it printed too.
        if let Ok(v) = out
            .as_deref()
            .map_err(|_| ())
            .and_then(|o| serde_json::from_slice::<Value>(o).map_err(|_| ()))
        {
            redactor.collect(&v);
        }
        let stderr = Stderr(&err_buf, &redactor);
        let status = match status {
            Ok(s) => s,
            Err(e) => return Err(fail(&format!("could not be waited for: {e}{stderr}"))),
        };
        let st = Status(status);
        if !status.success() {
            return Err(fail(&format!("failed: {st}{stderr}")));
        }
        if let Err(e) = w {
            return Err(fail(&format!(
                "could not be given its input: {e} ({st}){stderr}"
            )));
        }
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                return Err(fail(&format!(
                    "printed output that could not be read: {e} ({st}){stderr}"
                )))
            }
        };
        parse_output(&out, &redactor).map_err(|why| fail(&format!("{why} ({st}){stderr}")))
    }
}

/// Reads `r` to its end into `buf`, keeping the last `keep` bytes (so
/// what was read so far survives the future being dropped).
async fn tail<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<()> {
    let mut chunk = [0u8; 8192];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > keep * 2 {
            buf.drain(..buf.len() - keep);
        }
    }
}

/// The last `keep` bytes of `buf`.
fn last(buf: &[u8], keep: usize) -> &[u8] {
    &buf[buf.len().saturating_sub(keep)..]
}

/// Kills the program's process group (the program and what it started)
/// when dropped, and on [`Group::kill`]: on every way out of a run.
struct Group(Option<u32>);

impl Group {
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .0
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH: nothing is left.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An exit status as a person reads it.
struct Status(ExitStatus);

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(code) = self.0.code() {
            return write!(f, "exit status {code}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let Some(sig) = self.0.signal() {
                return write!(f, "killed by signal {sig}");
            }
        }
        write!(f, "{}", self.0)
    }
}

/// The end of stderr, as a message suffix: each line indented behind
/// `| `, ending with a line break so that what follows stands apart. The
/// callback's secrets are redacted; when the start was cut, as much as the
/// longest secret is dropped there too (a partial secret could stand at
/// the cut).
struct Stderr<'a>(&'a [u8], &'a Redactor);

impl fmt::Display for Stderr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `tail` drains down to exactly STDERR_TAIL bytes: that many may
        // be the end of more.
        let cut = self.0.len() >= STDERR_TAIL;
        let tail = last(self.0, STDERR_TAIL);
        let tail = if cut {
            &tail[self.1.longest().min(tail.len())..]
        } else {
            tail
        };
        let text = self.1.redact(&String::from_utf8_lossy(tail));
        let text = text.trim_end();
        if text.is_empty() {
            return f.write_str("; its stderr was empty");
        }
        if cut {
            write!(f, "; the end of its stderr (last {STDERR_TAIL} bytes):")?;
        } else {
            f.write_str("; its stderr:")?;
        }
        for line in text.lines() {
            write!(f, "\n  | {line}")?;
        }
        f.write_str("\n")
    }
}

/// Reads the program's stdout.
fn parse_output(out: &[u8], redactor: &Redactor) -> Result<Option<StateMigrationResult>, String> {
    let head = || {
        // Redacted whole, then cut (a cut cannot leave part of a secret).
        let text = redactor.redact(&String::from_utf8_lossy(out));
        let mut end = text.len().min(STDOUT_HEAD);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{:?}", &text[..end])
    };
    if out.iter().all(u8::is_ascii_whitespace) {
        return Err(
            "printed nothing on stdout (expected `null` or {\"newState\": [...], \"successors\": {...}})"
                .into(),
        );
    }
    let v: Value = serde_json::from_slice(out)
        .map_err(|e| format!("printed invalid JSON on stdout ({e}): {}", head()))?;
    let obj = match v {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        other => {
            return Err(format!(
                "printed {} on stdout; expected `null` or {{\"newState\": [...], \"successors\": {{...}}}}",
                kind(&other)
            ))
        }
    };
    if let Some(k) = obj
        .keys()
        .find(|k| k.as_str() != "newState" && k.as_str() != "successors")
    {
        return Err(format!(
            "printed an object with the unknown key `{k}` (expected newState and successors)"
        ));
    }
    let Some(new_state) = obj.get("newState").cloned() else {
        return Err("printed an object without `newState` (print `null` for no change)".into());
    };
    let successors = match obj.get("successors") {
        None | Some(Value::Null) => Default::default(),
        Some(s) => serde_json::from_value(s.clone()).map_err(|e| {
            format!("printed `successors` that is not an object of URN strings: {e}")
        })?,
    };
    Ok(Some(StateMigrationResult {
        new_state,
        successors,
    }))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A child process keel supervises (a migration callback, a provider
/// plugin): stdin, stdout and stderr piped, killed when dropped, and in its
/// own process group, so that what it starts dies with it.
pub(crate) fn supervised(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    cmd
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::model::Urn;

    const ROOT: &str = "urn:pulumi:dev::p::x:y:App::app";
    const OLD: &str = "urn:pulumi:dev::p::x:y:App$x:y:B::old";

    fn args() -> StateMigrationArgs {
        StateMigrationArgs {
            urn: Urn::parse(ROOT).unwrap(),
            old_state: vec![
                json!({"urn": ROOT, "custom": false, "type": "x:y:App"}),
                json!({"urn": OLD, "custom": true, "id": "i", "type": "x:y:B", "parent": ROOT}),
            ],
        }
    }

    fn script(dir: &Path, name: &str, body: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    }

    fn sh(body: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), body.into()]
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn null_is_no_change_without_reading_the_input() {
        let cb = command(sh("echo null"));
        assert_eq!(cb.call(args(), LONG).await, Ok(None));
        // A large input the program never reads.
        let mut a = args();
        let big = "x".repeat(1 << 20);
        a.old_state[1]["outputs"] = json!({ "big": big });
        assert_eq!(cb.call(a, LONG).await, Ok(None));
        let cb = command(sh("cat >/dev/null; echo ' null '"));
        assert_eq!(cb.call(args(), LONG).await, Ok(None));
    }

    #[tokio::test]
    async fn a_python_rename() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "rename.py",
            r#"
import json, sys
args = json.load(sys.stdin)
states = args["oldState"]
old = [s["urn"] for s in states if s["urn"].endswith("::old")]
if not old:
    print("null")
    sys.exit(0)
new = old[0].rsplit("::", 1)[0] + "::new"
for s in states:
    if s["urn"] == old[0]:
        s["urn"] = new
print(json.dumps({"newState": states, "successors": {old[0]: new}}))
"#,
        );
        // A relative script path resolves in the callback's directory.
        let cb = CommandCallback::new(vec!["python3".into(), "rename.py".into()])
            .in_dir(dir.path())
            .callback();
        let r = cb.call(args(), LONG).await.unwrap().unwrap();
        let new = "urn:pulumi:dev::p::x:y:App$x:y:B::new";
        assert_eq!(r.successors, [(OLD.to_owned(), new.to_owned())].into());
        assert_eq!(r.new_state[1]["urn"], json!(new));
        assert_eq!(r.new_state[1]["id"], json!("i"));
        // Idempotent: its own output gives `null`.
        let again = StateMigrationArgs {
            urn: Urn::parse(ROOT).unwrap(),
            old_state: r.new_state.as_array().unwrap().clone(),
        };
        assert_eq!(cb.call(again, LONG).await, Ok(None));
    }

    #[tokio::test]
    async fn relative_program_paths_resolve_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let p = script(
            &dir.path().join("bin"),
            "m.sh",
            "#!/bin/sh\ncat >/dev/null\necho null\n",
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let cb = CommandCallback::new(vec!["bin/m.sh".into()])
            .in_dir(dir.path())
            .callback();
        assert_eq!(cb.call(args(), LONG).await, Ok(None));
        let cb = command(vec!["./no-such-program".into()]);
        let e = cb.call(args(), LONG).await.unwrap_err();
        assert!(e.contains("could not start"), "{e}");
        let e = command(vec![]).call(args(), LONG).await.unwrap_err();
        assert!(e.contains("is empty"), "{e}");
    }

    #[tokio::test]
    async fn no_part_of_a_secret_survives_where_stderr_is_cut() {
        use crate::model::property::{SIG_KEY, SIG_SECRET};
        const SECRET: &str = "0123456789abcdefghijKLMNOPQRSTUVWXYZ-end";
        let mut a = args();
        a.old_state[1]["inputs"] =
            json!({"pw": {SIG_KEY: SIG_SECRET, "plaintext": format!("\"{SECRET}\"")}});
        // The kept tail starts 10 bytes before the secret's end.
        let filler = STDERR_TAIL - 10;
        let body = format!(
            "head -c 3000 /dev/zero | tr '\\0' x >&2; printf %s {SECRET} >&2; \
             head -c {filler} /dev/zero | tr '\\0' y >&2; exit 1"
        );
        let e = command(sh(&body)).call(a, LONG).await.unwrap_err();
        assert!(e.contains("the end of its stderr"), "{e}");
        assert!(e.contains("yyyy"), "{e}");
        assert!(!e.contains("XYZ-end"), "{e}");
    }

    #[tokio::test]
    async fn a_failure_carries_the_status_and_the_end_of_stderr() {
        let cb = command(sh(
            "cat >/dev/null; i=0; while [ $i -lt 400 ]; do echo \"noise line $i\" >&2; i=$((i+1)); done; echo 'the real problem' >&2; exit 3",
        ));
        let e = cb.call(args(), LONG).await.unwrap_err();
        assert!(e.contains("exit status 3"), "{e}");
        assert!(e.contains("the real problem"), "{e}");
        assert!(e.contains("the end of its stderr"), "{e}");
        assert!(!e.contains("noise line 0\n"), "only the tail: {e}");
        assert!(e.len() < STDERR_TAIL + 1200, "{} bytes", e.len());
        let e = command(sh("echo oops >&2; exit 1"))
            .call(args(), LONG)
            .await
            .unwrap_err();
        assert!(e.contains("exit status 1") && e.contains("oops"), "{e}");
    }

    #[tokio::test]
    async fn garbage_and_wrong_shapes_are_errors() {
        for (body, want) in [
            ("echo 'this is not json'; echo warn >&2", "invalid JSON"),
            ("true", "printed nothing"),
            ("echo '[1, 2]'", "an array"),
            ("echo '{\"newstate\": []}'", "unknown key `newstate`"),
            ("echo '{\"successors\": {}}'", "without `newState`"),
            (
                "echo '{\"newState\": [], \"successors\": [1]}'",
                "not an object",
            ),
        ] {
            let e = command(sh(body)).call(args(), LONG).await.unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
            assert!(e.contains("exit status 0"), "{body}: {e}");
        }
        let e = command(sh("echo 'not json'; echo 'my warning' >&2"))
            .call(args(), LONG)
            .await
            .unwrap_err();
        assert!(
            e.contains("my warning") && e.contains("\"not json\\n\""),
            "{e}"
        );
        let r = command(sh("echo '{\"newState\": [], \"successors\": null}'"))
            .call(args(), LONG)
            .await
            .unwrap()
            .unwrap();
        assert!(r.successors.is_empty());
    }

    #[tokio::test]
    async fn its_own_deadline_kills_it_with_the_stderr_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let body = format!(
            "echo $$ > {}; echo 'working on it' >&2; exec sleep 30",
            pid.display()
        );
        let cb = CommandCallback::new(sh(&body))
            .timeout(Duration::from_millis(300))
            .callback();
        // The message and the dead process prove the deadline fired (the
        // program sleeps 30 s).
        let e = cb.call(args(), LONG).await.unwrap_err();
        assert!(
            e.contains("did not answer within") && e.contains("killed"),
            "{e}"
        );
        assert!(e.contains("working on it"), "the stderr so far: {e}");
        let pid = std::fs::read_to_string(&pid).unwrap();
        assert!(!alive(pid.trim()), "the program was killed");
    }

    #[tokio::test]
    async fn dropping_the_future_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let body = format!("echo $$ > {}; exec sleep 30", pid.display());
        let cb = CommandCallback::new(sh(&body));
        let run = cb.run(args());
        let _ = tokio::time::timeout(Duration::from_millis(300), run).await;
        let pid = std::fs::read_to_string(&pid).unwrap();
        // The kill is sent on drop; give the OS a moment to deliver it.
        let mut dead = false;
        for _ in 0..50 {
            if !alive(pid.trim()) {
                dead = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(dead, "the program was killed");
    }

    /// Whether a process runs (not a zombie).
    fn alive(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }
}
