//! keel's resource-provider client against a provider nobody here wrote:
//! the Pulumi Python SDK's dynamic provider server (`python -u -m
//! pulumi.dynamic`, what Pulumi's `pulumi-resource-pulumi-python` shim
//! runs), driving a `pulumi-python:dynamic:Resource` whose `__provider` is
//! a provider serialized by the SDK (`tests/python/dynamic-file-provider/
//! serialize.py`) that manages a real local file.
//!
//! The interpreter is `KEEL_PYTHON` (with `pulumi` 3.272.0); the test fails
//! without it rather than skip.

use std::path::Path;
use std::process::Stdio;

use keel::grpc::plugin::client::PluginProvider;
use keel::model::property::Secret;
use keel::model::{PropertyMap, PropertyValue, TypeToken, Urn};
use keel::provider::{DiffKind, Provider, ProviderError, ResourceRequest};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

const DYNAMIC: &str = "pulumi-python:dynamic:Resource";

fn python() -> String {
    std::env::var("KEEL_PYTHON").expect(
        "KEEL_PYTHON must name a Python that can `import pulumi` (pulumi==3.272.0), e.g. /work/venv-pulumi/bin/python; this test does not skip",
    )
}

/// The file provider, serialized by the SDK.
fn serialized_provider() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python/dynamic-file-provider/serialize.py");
    let out = std::process::Command::new(python())
        .arg(&script)
        .output()
        .expect("run serialize.py");
    assert!(
        out.status.success(),
        "serialize.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Starts the dynamic provider server and connects to the port it prints.
async fn start() -> (Child, Channel) {
    let mut child = Command::new(python())
        .args(["-u", "-m", "pulumi.dynamic"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start python -m pulumi.dynamic");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .expect("read the port");
    let port: u16 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("port line {line:?}"));
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the dynamic provider");
    (child, channel)
}

fn s(v: &str) -> PropertyValue {
    PropertyValue::String(v.to_owned())
}

fn inputs(provider: &str, path: &Path, content: &str) -> PropertyMap {
    [
        (
            "__provider".to_owned(),
            PropertyValue::Secret(Secret::plaintext(s(provider))),
        ),
        ("path".to_owned(), s(&path.display().to_string())),
        ("content".to_owned(), s(content)),
    ]
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_provider_manages_a_real_file() {
    let serialized = serialized_provider();
    let (_child, channel) = start().await;
    let p = PluginProvider::connect("pulumi-python", channel, None, None)
        .await
        .expect("connect (Handshake is unimplemented there: not an error)");
    assert!(!p.protocol().handshake);
    assert_eq!(
        p.plugin_name(),
        "plugin pulumi-resource-pulumi-python v0.1.0"
    );
    // CheckConfig is unimplemented: the configuration stands; Configure
    // answers acceptSecrets=false and no preview support.
    p.configure(&PropertyMap::new()).await.expect("configure");
    let proto = p.protocol();
    assert!(
        !proto.accept_secrets && !proto.supports_preview,
        "{proto:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hello.txt");
    let urn = Urn::parse(&format!("urn:pulumi:dev::proj::{DYNAMIC}::f")).unwrap();
    let ty = TypeToken::parse(DYNAMIC).unwrap();
    let v1 = inputs(&serialized, &file, "hello");

    // Check: the secret `__provider` went plain (the server unpickles it)
    // and comes back re-marked secret.
    let checked = p
        .check(ResourceRequest::new(&urn, &ty, "", &v1))
        .await
        .expect("check");
    assert!(matches!(checked["__provider"], PropertyValue::Secret(_)));
    assert_eq!(checked["content"], s("hello"));

    // A preview create is not sent to a plugin without preview support.
    let mut r = ResourceRequest::new(&urn, &ty, "", &checked);
    r.preview = true;
    let preview = p.create(r).await.expect("preview create");
    assert_eq!(preview.outputs, checked);
    assert!(!file.exists(), "a preview created the file");

    let created = p
        .create(ResourceRequest::new(&urn, &ty, "", &checked))
        .await
        .expect("create");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
    assert_eq!(created.id, file.display().to_string());
    assert_eq!(created.outputs["size"], PropertyValue::Number(5.into()));
    assert!(matches!(
        created.outputs["__provider"],
        PropertyValue::Secret(_)
    ));

    let mut r = ResourceRequest::new(&urn, &ty, &created.id, &checked);
    r.old_outputs = Some(&created.outputs);
    let read = p.read(r).await.expect("read").expect("the file exists");
    assert_eq!(read.outputs["content"], s("hello"));

    // Diffs: same, an in-place change, a replacing change.
    let diff = |new: PropertyMap| {
        let p = &p;
        let (urn, ty, created) = (&urn, &ty, &created);
        let checked = checked.clone();
        async move {
            let mut r = ResourceRequest::new(urn, ty, &created.id, &new);
            r.old_inputs = Some(&checked);
            r.old_outputs = Some(&created.outputs);
            p.diff(r).await.expect("diff")
        }
    };
    assert_eq!(diff(checked.clone()).await.kind, DiffKind::Same);
    let v2 = inputs(&serialized, &file, "bye");
    let d = diff(v2.clone()).await;
    assert_eq!(d.kind, DiffKind::Update);
    assert_eq!(d.changed_keys, ["content".to_owned()].into());
    let d = diff(inputs(&serialized, &dir.path().join("other.txt"), "hello")).await;
    assert_eq!(d.kind, DiffKind::Replace);
    assert_eq!(d.replace_keys, ["path".to_owned()].into());

    let mut r = ResourceRequest::new(&urn, &ty, &created.id, &v2);
    r.old_inputs = Some(&checked);
    r.old_outputs = Some(&created.outputs);
    let updated = p.update(r).await.expect("update");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "bye");
    assert_eq!(updated.outputs["size"], PropertyValue::Number(3.into()));

    let mut r = ResourceRequest::new(&urn, &ty, &created.id, &v2);
    r.old_outputs = Some(&updated.outputs);
    p.delete(r).await.expect("delete");
    assert!(!file.exists(), "delete left the file");

    // Gone: read says so.
    let mut r = ResourceRequest::new(&urn, &ty, &created.id, &v2);
    r.old_outputs = Some(&updated.outputs);
    assert_eq!(p.read(r).await.expect("read after delete"), None);

    p.cancel().await.expect("cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_failures_name_the_resource_and_the_plugin() {
    let serialized = serialized_provider();
    let (_child, channel) = start().await;
    let p = PluginProvider::connect("pulumi-python", channel, None, None)
        .await
        .unwrap();
    p.configure(&PropertyMap::new()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let urn = Urn::parse(&format!("urn:pulumi:dev::proj::{DYNAMIC}::bad")).unwrap();
    let ty = TypeToken::parse(DYNAMIC).unwrap();

    let no_path = inputs(&serialized, Path::new(""), "x");
    match p.check(ResourceRequest::new(&urn, &ty, "", &no_path)).await {
        Err(ProviderError::CheckFailed { urn: u, failures }) => {
            assert_eq!(u, urn);
            assert_eq!(failures, vec!["path: a path is required".to_owned()]);
        }
        other => panic!("expected a check failure, got {other:?}"),
    }

    let fail = inputs(&serialized, &dir.path().join("f"), "FAIL");
    let e = p
        .create(ResourceRequest::new(&urn, &ty, "", &fail))
        .await
        .unwrap_err();
    let ProviderError::Failed {
        operation,
        urn: u,
        message,
    } = &e
    else {
        panic!("expected a failure, got {e:?}");
    };
    assert_eq!((*operation, u), ("create", &urn));
    let text = e.to_string();
    assert!(text.contains(urn.as_str()), "{text}");
    assert!(
        message.contains("plugin pulumi-resource-pulumi-python v0.1.0"),
        "{message}"
    );
    assert!(message.contains("asked to fail"), "{message}");
    // The server aborts with UNKNOWN: the object's state is unknown.
    assert!(message.contains("state is unknown"), "{message}");

    // The dynamic provider has no functions.
    let e = p
        .invoke("pulumi-python:dynamic:fn", &PropertyMap::new(), false)
        .await
        .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "Invoke of plugin pulumi-resource-pulumi-python v0.1.0 failed: Unimplemented"
        ),
        "{e}"
    );
}
