//! Provider plugin processes (`keel::grpc::plugin::host`) with a plugin no
//! one on this project wrote: the Pulumi Python SDK's dynamic provider
//! (`python -m pulumi.dynamic`, started through a wrapper named
//! `pulumi-resource-pulumi-python` as Pulumi's own shim does), found on
//! `PATH` by discovery. And fake plugins (shell scripts) that print
//! garbage, exit at once, or hang: each a clear error, no process left.
//!
//! The interpreter is `KEEL_PYTHON` (`.ci/run` sets it); the test fails
//! when it is unset.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel::grpc::plugin::discovery::{find, DiscoveryEnv, PluginLaunch};
use keel::grpc::plugin::host::{
    Diagnostic, Diagnostics, HostError, HostOptions, PluginProcess, Stream,
};

/// An interpreter that can `import pulumi`.
fn python() -> String {
    let p = std::env::var("KEEL_PYTHON").expect(
        "set KEEL_PYTHON to a Python that can `import pulumi` (e.g. /work/venv-pulumi/bin/python)",
    );
    let ok = std::process::Command::new(&p)
        .args(["-c", "import pulumi.dynamic"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "KEEL_PYTHON={p} cannot `import pulumi.dynamic`");
    p
}

/// An executable script `dir/pulumi-resource-<package>`.
fn plugin_script(dir: &Path, package: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(format!("pulumi-resource-{package}"));
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Discovery over `PATH` = `dir` only.
fn launch(dir: &Path, package: &str) -> PluginLaunch {
    let env = DiscoveryEnv {
        project_dir: Some(dir.to_owned()),
        path: Some(dir.as_os_str().to_owned()),
        ..DiscoveryEnv::default()
    };
    find(&env, package, None).unwrap()
}

/// A diagnostics callback keeping what it gets.
fn collect() -> (Diagnostics, Arc<Mutex<Vec<Diagnostic>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let cb: Diagnostics = Arc::new(move |d| g.lock().unwrap().push(d));
    (cb, got)
}

/// Whether a process runs (not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Whether it is gone, giving a signal already sent time to land (an
/// orphan is killed by the group signal, not waited for by keel).
async fn gone(pid: u32) -> bool {
    for _ in 0..250 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn read_pid(p: &PathBuf) -> u32 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap()
}

/// `PluginInfo` of `pulumirpc` (`version = 1`), for a hand-made call.
#[derive(Clone, PartialEq, prost::Message)]
struct PluginInfo {
    #[prost(string, tag = "1")]
    version: String,
}

#[tokio::test]
async fn the_python_dynamic_provider_starts_answers_and_stops() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let argv = dir.path().join("argv");
    plugin_script(
        dir.path(),
        "pulumi-python",
        &format!(
            "echo \"$@\" > '{}'\nexec '{python}' -u -m pulumi.dynamic \"$@\"",
            argv.display()
        ),
    );
    let l = launch(dir.path(), "pulumi-python");
    let (diag, _) = collect();
    let p = PluginProcess::start_with(&l, Some("127.0.0.1:4711"), diag, HostOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(p.port(), 0);
    let pid = p.pid().unwrap();
    assert!(alive(pid));
    assert!(p.exited().is_none());
    assert_eq!(
        std::fs::read_to_string(&argv).unwrap().trim(),
        "127.0.0.1:4711",
        "the engine address is its argument"
    );

    // A unary call over the channel: GetPluginInfo(Empty).
    let mut client = tonic::client::Grpc::new(p.channel());
    client.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/pulumirpc.ResourceProvider/GetPluginInfo",
    );
    let codec = tonic_prost::ProstCodec::<(), PluginInfo>::default();
    let info = client
        .unary(tonic::Request::new(()), path, codec)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.version, "0.1.0", "pulumi.dynamic's GetPluginInfo");

    let stopped = p.shutdown(Duration::from_secs(10)).await;
    assert!(stopped.status.is_some(), "{stopped:?}");
    assert!(!alive(pid), "shutdown waits for it to be gone");
}

#[tokio::test]
async fn garbage_instead_of_a_port_is_an_error_and_kills_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    plugin_script(
        dir.path(),
        "garbage",
        &format!(
            "echo $$ > '{}'\necho 'oops: not ready' >&2\necho 'hello, engine'\nexec sleep 30",
            pid.display()
        ),
    );
    let (diag, _) = collect();
    let e = PluginProcess::start_with(
        &launch(dir.path(), "garbage"),
        None,
        diag,
        HostOptions::default(),
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, HostError::Garbage { .. }), "{text}");
    assert!(
        text.contains("pulumi-resource-garbage"),
        "names the plugin: {text}"
    );
    assert!(
        text.contains("\"hello, engine\""),
        "what it printed: {text}"
    );
    assert!(text.contains("oops: not ready"), "its stderr: {text}");
    assert!(!alive(read_pid(&pid)), "it was killed and waited for");
}

#[tokio::test]
async fn an_immediate_exit_is_an_error_with_its_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    plugin_script(
        dir.path(),
        "crash",
        &format!(
            "echo $$ > '{}'\necho 'fatal: no credentials found' >&2\nexit 3",
            pid.display()
        ),
    );
    let (diag, got) = collect();
    let e = PluginProcess::start_with(
        &launch(dir.path(), "crash"),
        None,
        diag,
        HostOptions::default(),
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, HostError::Exited { .. }), "{text}");
    assert!(text.contains("pulumi-resource-crash"), "{text}");
    assert!(text.contains("exit status 3"), "{text}");
    assert!(text.contains("fatal: no credentials found"), "{text}");
    assert!(!alive(read_pid(&pid)));
    // Its stderr reached the diagnostics too.
    let got = got.lock().unwrap();
    assert!(
        got.iter().any(|d| d.stream == Stream::Stderr
            && d.package == "crash"
            && d.line == "fatal: no credentials found"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_plugin_that_prints_nothing_is_killed_with_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let child = dir.path().join("child");
    plugin_script(
        dir.path(),
        "hang",
        &format!(
            "echo $$ > '{}'\nsleep 30 &\necho $! > '{}'\necho 'warming up' >&2\nexec sleep 30",
            pid.display(),
            child.display()
        ),
    );
    let (diag, _) = collect();
    let options = HostOptions {
        port_timeout: Duration::from_secs(1),
        ..HostOptions::default()
    };
    let e = PluginProcess::start_with(&launch(dir.path(), "hang"), None, diag, options)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, HostError::NoPort { .. }), "{text}");
    assert!(text.contains("pulumi-resource-hang"), "{text}");
    assert!(text.contains("printed no port within 1s"), "{text}");
    assert!(text.contains("warming up"), "{text}");
    assert!(
        !alive(read_pid(&pid)),
        "the plugin was killed and waited for"
    );
    assert!(
        gone(read_pid(&child)).await,
        "what it started was killed too"
    );
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    plugin_script(dir.path(), "gone", "exit 0");
    let mut l = launch(dir.path(), "gone");
    l.program = dir.path().join("no-such-program");
    let (diag, _) = collect();
    let e = PluginProcess::start_with(&l, None, diag, HostOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, HostError::Spawn { .. }), "{e}");
    assert!(e.to_string().contains("no-such-program"), "{e}");
}

#[tokio::test]
async fn a_plugin_that_ignores_interrupts_is_killed_after_the_grace_period() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    // SIGINT ignored from the start: Python then installs no handler.
    plugin_script(
        dir.path(),
        "pulumi-python",
        &format!("trap '' INT\nexec '{python}' -u -m pulumi.dynamic"),
    );
    let (diag, _) = collect();
    let p = PluginProcess::start_with(
        &launch(dir.path(), "pulumi-python"),
        None,
        diag,
        HostOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let pid = p.pid().unwrap();
    let stopped = p.shutdown(Duration::from_millis(200)).await;
    assert!(stopped.killed, "{stopped:?}");
    // Killed by shutdown itself (SIGKILL), and waited for.
    assert!(
        stopped.status.is_some_and(|s| s.code().is_none()),
        "{stopped:?}"
    );
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_python_source_plugin_runs_with_its_runtime() {
    let python = python();
    let project = tempfile::tempdir().unwrap();
    let plugin = project.path().join("plugins/dyn");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("PulumiPlugin.yaml"), "runtime: python\n").unwrap();
    std::fs::write(
        plugin.join("__main__.py"),
        "import runpy\nrunpy.run_module('pulumi.dynamic', run_name='__main__')\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join("Pulumi.yaml"),
        "name: p\nruntime: python\nplugins:\n  providers:\n    - name: dyn\n      path: plugins/dyn\n",
    )
    .unwrap();
    let env = DiscoveryEnv {
        python_cmd: Some(python.into()),
        ..DiscoveryEnv::from_process(Some(project.path()))
    };
    let l = find(&env, "dyn", None).unwrap();
    let (diag, _) = collect();
    let p = PluginProcess::start_with(&l, None, diag, HostOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(p.exited().is_none());
    let pid = p.pid().unwrap();
    p.shutdown(Duration::from_secs(10)).await;
    assert!(!alive(pid));
}

#[tokio::test]
async fn secrets_it_prints_are_masked_in_errors_and_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    plugin_script(
        dir.path(),
        "leaky",
        "echo \"token=$LEAKY_TOKEN\" >&2\necho \"port $LEAKY_TOKEN\"\nexit 1",
    );
    let mut l = launch(dir.path(), "leaky");
    l.env.push(("LEAKY_TOKEN".into(), "hunter2-s3cr3t".into()));
    let (diag, got) = collect();
    let options = HostOptions {
        redact: vec!["hunter2-s3cr3t".into()],
        ..HostOptions::default()
    };
    let e = PluginProcess::start_with(&l, None, diag, options)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, HostError::Garbage { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("\"port [secret]\""), "{text}");
    assert!(text.contains("token=[secret]"), "{text}");
    let got = got.lock().unwrap();
    assert!(got.iter().any(|d| d.line == "token=[secret]"), "{got:?}");
    assert!(got.iter().all(|d| !d.line.contains("hunter2")), "{got:?}");
}
