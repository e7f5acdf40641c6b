//! Secrets at rest (issue 10) through the `keel` binary and the backend:
//! a passphrase stack keeps its ciphertexts across operations (no churn),
//! refuses a wrong or missing passphrase before anything runs, and stacks
//! of other providers (`service`) round-trip untouched.

mod common;

use common::cli::*;

use keel::model::property::{PropertyValue, Secret};
use keel::model::{Deployment, State, TypeToken, Urn};
use keel::persist::backend::{write_base_with, Backend};
use keel::secrets::key_derivations;
use serde_json::Value;

const PROGRAM: &str = "name: vault\nresources:\n  db:\n    type: \"aws:rds:Instance\"\n    properties: { password: { \"fn::secret\": \"pa55-w0rd-xyz\" }, size: 1 }\n";

/// Every string held under `key` in a JSON document's objects, in order.
fn strings_under(key: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(c)) = m.get(key) {
                out.push(c.clone());
            }
            m.values().for_each(|v| strings_under(key, v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| strings_under(key, v, out)),
        _ => {}
    }
}

/// Every ciphertext in a JSON document, in order.
fn ciphertexts(v: &Value, out: &mut Vec<String>) {
    strings_under("ciphertext", v, out);
}

/// Every plaintext secret in a JSON document, in order.
fn plaintexts(v: &Value, out: &mut Vec<String>) {
    strings_under("plaintext", v, out);
}

fn export(k: &Keel, extra: &[&str]) -> Value {
    let mut args = vec!["stack", "export"];
    args.extend_from_slice(extra);
    serde_json::from_str(&k.ok(&args)).expect("export JSON")
}

#[test]
fn passphrase_stack_no_churn_and_clear_errors() {
    let mut k = Keel::new();
    k.passphrase = Some("s3cure".into());
    let program = k.write("vault.yaml", PROGRAM);
    k.ok(&["up", "--program", &program]);
    let first = export(&k, &[]);
    let mut before = Vec::new();
    ciphertexts(&first, &mut before);
    assert!(!before.is_empty(), "{first}");
    assert!(!first.to_string().contains("pa55-w0rd-xyz"));

    // A second `up` with the same program: the same ciphertexts.
    k.ok(&["up", "--program", &program]);
    let mut after = Vec::new();
    ciphertexts(&export(&k, &[]), &mut after);
    assert_eq!(before, after, "unchanged secrets keep their ciphertexts");

    // --show-secrets shows the plaintext.
    let shown = export(&k, &["--show-secrets"]).to_string();
    assert!(shown.contains("pa55-w0rd-xyz"), "{shown}");

    // A wrong passphrase is refused before anything runs.
    let files = k.files();
    k.passphrase = Some("wrong".into());
    let (_, err) = k.expect(2, &["up", "--program", &program]);
    assert!(err.contains("incorrect passphrase"), "{err}");
    // No passphrase: the stack holds secrets, say which variable to set.
    k.passphrase = None;
    let (_, err) = k.expect(2, &["up", "--program", &program]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    let (_, err) = k.expect(2, &["preview", "--program", &program]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    let (_, err) = k.expect(2, &["stack", "export", "--show-secrets"]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    // The passphrase from a file, with Pulumi's variable name.
    let file = k.write("passphrase.txt", "s3cure\n");
    k.env = vec![("PULUMI_CONFIG_PASSPHRASE_FILE".into(), file)];
    let shown = export(&k, &["--show-secrets"]).to_string();
    assert!(shown.contains("pa55-w0rd-xyz"), "{shown}");
    k.env.clear();
    // Export without --show-secrets needs no passphrase.
    let mut stored = Vec::new();
    ciphertexts(&export(&k, &[]), &mut stored);
    assert_eq!(stored, before);
    // The refused runs changed no state file.
    let (a, b) = (files, k.files());
    for (p, bytes) in &a {
        if p.to_string_lossy().contains("checkpoint.json") {
            assert_eq!(Some(bytes), b.get(p), "{} changed", p.display());
        }
    }
}

#[test]
fn outputs_made_secret_need_a_secrets_provider_before_anything_runs() {
    // No `fn::secret` anywhere: only an output the option makes secret.
    const PROGRAM: &str = "name: vault\nresources:\n  db:\n    type: aws:rds:Instance\n    \
        properties: { engine: pg, token: minted-xyz }\n    \
        options: { additionalSecretOutputs: [token] }\n";
    let mut k = Keel::new();
    let program = k.write("vault.yaml", PROGRAM);
    let (_, err) = k.expect(2, &["up", "--program", &program]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    // Nothing ran: no state, no cloud object (the stack's lock file, empty,
    // is all there is).
    let left: Vec<_> = k
        .files()
        .into_iter()
        .filter(|(_, b)| !b.is_empty())
        .collect();
    assert!(left.is_empty(), "a refused up writes nothing: {left:?}");
    k.passphrase = Some("s3cure".into());
    k.ok(&["up", "--program", &program]);
    let stored = export(&k, &[]);
    let token = &stored["deployment"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["urn"].as_str().unwrap().ends_with("::db"))
        .unwrap()["outputs"]["token"];
    assert!(token["ciphertext"].is_string(), "{token}");
    let on_disk = k.files();
    let state = on_disk
        .iter()
        .filter(|(p, _)| p.to_string_lossy().contains("stacks"))
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .collect::<String>();
    assert!(!state.contains("\"plaintext\""), "{state}");
}

#[test]
fn service_secrets_round_trip_through_import_and_export() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pulumi");
    for (name, stack, encrypted) in [
        ("examples__ec2__stack.json", "test", true),
        ("aws-ts-lambda-efs__stack.json", "dev", false),
    ] {
        let path = fixtures.join(name);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read the fixture {}: {e}", path.display()));
        let original: Value = serde_json::from_slice(&bytes).expect("fixture JSON");
        assert_eq!(
            original["deployment"]["secrets_providers"]["type"], "service",
            "{name}"
        );
        // With a passphrase set, too: the service ciphertexts are untouched.
        for passphrase in [None, Some("pw")] {
            let mut k = Keel::new();
            k.passphrase = passphrase.map(str::to_owned);
            let p = path.to_str().unwrap();
            k.ok(&["stack", "import", "--stack", stack, "--file", p]);
            let back = export(&k, &["--stack", stack]);
            assert_eq!(
                back["deployment"]["secrets_providers"],
                original["deployment"]["secrets_providers"]
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            ciphertexts(&original, &mut a);
            ciphertexts(&back, &mut b);
            assert_eq!(!a.is_empty(), encrypted, "{name}");
            assert_eq!(a, b, "{name}");
            // The export is the file as it was, plus keel's category keys
            // on every resource (Pulumi ignores them).
            let mut back = back;
            for r in back["deployment"]["resources"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                let r = r.as_object_mut().unwrap();
                assert!(
                    r.remove("keelCategory").is_some_and(|c| c.is_string()),
                    "{name}"
                );
                assert!(
                    r.remove("keelComposite").is_some_and(|c| c.is_boolean()),
                    "{name}"
                );
            }
            assert_eq!(back["deployment"], original["deployment"], "{name}");
            // Decrypting them is refused, naming the provider.
            if !encrypted {
                continue;
            }
            let (_, err) = k.expect(2, &["stack", "export", "--stack", stack, "--show-secrets"]);
            assert!(err.contains("`service`"), "{err}");
        }
    }
}

#[test]
fn backend_encrypts_at_rest_and_derives_the_key_once_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path()).with_passphrase(Some("pw".into()));
    let start = key_derivations();
    let open = backend.open("dev", "test").unwrap();
    let mut d = Deployment::default();
    let ty = "pulumi:pulumi:Stack";
    let urn = Urn::parse(&format!("urn:pulumi:dev::proj::{ty}::proj-dev")).unwrap();
    let mut s = State::new(urn, TypeToken::parse(ty).unwrap(), false);
    s.outputs.insert(
        "token".into(),
        PropertyValue::Secret(Secret::plaintext(PropertyValue::String(
            "tok-123456".into(),
        ))),
    );
    d.resources.push(s);
    for _ in 0..3 {
        write_base_with(&open.paths.base, &d, 0, 0, open.counters(), &open.crypter).unwrap();
    }
    assert_eq!(
        key_derivations() - start,
        1,
        "one derivation for the operation"
    );
    let bytes = std::fs::read(&open.paths.base).unwrap();
    let first = String::from_utf8(bytes).unwrap();
    assert!(!first.contains("tok-123456"), "{first}");
    drop(open);

    // The next operation: decrypted in memory, written back unchanged.
    let open = backend.open("dev", "test").unwrap();
    assert_eq!(key_derivations() - start, 2);
    assert_eq!(
        open.deployment.resources[0].outputs["token"],
        d.resources[0].outputs["token"]
    );
    let reread = open.deployment.clone();
    write_base_with(
        &open.paths.base,
        &reread,
        0,
        0,
        open.counters(),
        &open.crypter,
    )
    .unwrap();
    let again = std::fs::read_to_string(&open.paths.base).unwrap();
    assert_eq!(first, again, "no churn");
    drop(open);

    // A wrong passphrase is refused at open.
    let wrong = Backend::new(dir.path()).with_passphrase(Some("nope".into()));
    let err = wrong.open("dev", "test").unwrap_err();
    assert!(err.to_string().contains("incorrect passphrase"), "{err}");
}

fn secret_buckets(n: usize) -> Vec<common::Res> {
    (0..n)
        .map(|i| {
            let mut r = common::bucket(&format!("b{i}"), &[("size", "1")]);
            r.inputs.insert(
                "password".into(),
                PropertyValue::Secret(Secret::plaintext(PropertyValue::String(format!(
                    "hush-{i}-plain"
                )))),
            );
            r
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_writes_no_plaintext_to_journal_or_checkpoint() {
    use keel::engine::{Engine, EngineConfig};
    use keel::persist::backend::PersistenceKind;
    use keel::persist::journal_file::{JournalOptions, JournalPersister};
    use keel::provider::{ProviderRegistry, SimCloud, SimConfig};

    let engine = |cloud: &std::sync::Arc<SimCloud>| {
        Engine::new(
            EngineConfig {
                project: "proj".into(),
                parallel: 2,
                ..EngineConfig::default()
            },
            ProviderRegistry::simulated(cloud.clone()),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path()).with_passphrase(Some("pw".into()));
    let cloud = SimCloud::new(SimConfig::default());

    // Interrupted mid-operation: the journal holds entries, all encrypted.
    let open = backend.open("dev", "keel up").unwrap();
    let persister = JournalPersister::open(
        open.paths.clone(),
        open.seq(),
        JournalOptions::default(),
        open.counters().clone(),
    )
    .unwrap()
    .with_crypter(open.crypter.clone())
    .fail_at(6);
    let _ = engine(&cloud)
        .update(
            open.deployment.clone(),
            common::program(secret_buckets(4)),
            Box::new(persister),
        )
        .await;
    let journal = std::fs::read(&open.paths.journal).unwrap();
    assert!(journal.len() > 100, "the journal holds entries");
    let text = String::from_utf8_lossy(&journal);
    assert!(
        !text.contains("plain") && text.contains("ciphertext"),
        "{text}"
    );
    drop(open);
    let loaded = backend.load("dev").unwrap();
    assert!(loaded.replayed > 0);
    assert!(format!("{:?}", loaded.deployment).contains("hush-"));

    // Complete runs with both persisters: no plaintext anywhere on disk.
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let open = backend.open("dev", "keel up").unwrap();
        let persister = open.persister(kind, JournalOptions::default()).unwrap();
        engine(&cloud)
            .update(
                open.deployment.clone(),
                common::program(secret_buckets(4)),
                persister,
            )
            .await
            .unwrap();
        for path in [&open.paths.base, &open.paths.journal] {
            let bytes = std::fs::read(path).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("plain"),
                "{kind:?}"
            );
        }
        drop(open);
        let loaded = backend.load("dev").unwrap();
        assert_eq!(loaded.deployment.resources.len(), 6, "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_callback_sees_plaintext_and_its_result_is_re_encrypted() {
    use keel::engine::{Engine, EngineConfig};
    use keel::persist::journal_file::JournalOptions;
    use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
    use keel::source::migration::{
        MigrationCallback, StateMigrationArgs, StateMigrationResult, StateMigrations,
    };
    use std::sync::{Arc, Mutex};

    let seen: Arc<Mutex<Option<Value>>> = Arc::default();
    let seen2 = seen.clone();
    // Renames `b0` to `renamed`, keeping everything else.
    let rename = MigrationCallback::sync(move |args: StateMigrationArgs| {
        *seen2.lock().unwrap() = Some(Value::Array(args.old_state.clone()));
        let mut states = args.old_state.clone();
        let Some(old) = states
            .iter()
            .map(|s| s["urn"].as_str().unwrap().to_owned())
            .find(|u| u.ends_with("::b0"))
        else {
            return Ok(None);
        };
        let new = format!("{}::renamed", old.rsplit_once("::").unwrap().0);
        for s in &mut states {
            if s["urn"] == old.as_str() {
                s["urn"] = serde_json::json!(new);
            }
        }
        Ok(Some(StateMigrationResult {
            new_state: Value::Array(states),
            successors: [(old, new)].into_iter().collect(),
        }))
    });
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path()).with_passphrase(Some("pw".into()));
    let cloud = SimCloud::new(SimConfig::default());
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        ProviderRegistry::simulated(cloud.clone()),
    );
    let with_secret = |name: &str| {
        let mut r = common::bucket(name, &[]).parent("app");
        r.inputs.insert(
            "password".into(),
            PropertyValue::Secret(Secret::plaintext(PropertyValue::String(
                "hush-0-plain".into(),
            ))),
        );
        r
    };
    for (v, kind) in [
        (
            vec![common::component("app"), with_secret("b0")],
            keel::persist::backend::PersistenceKind::Journal,
        ),
        (
            vec![
                common::component("app")
                    .with(move |o| o.state_migrations = StateMigrations::new(vec![rename])),
                with_secret("renamed"),
            ],
            keel::persist::backend::PersistenceKind::Checkpoint,
        ),
    ] {
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        engine
            .update(open.deployment.clone(), common::program(v), p)
            .await
            .unwrap();
        for path in [&open.paths.base, &open.paths.journal] {
            let bytes = std::fs::read(path).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains("plain"));
        }
    }
    let envelope = seen.lock().unwrap().clone().expect("the callback ran");
    assert!(
        envelope.to_string().contains("hush-0-plain"),
        "plaintext in the envelope: {envelope}"
    );
    assert!(!envelope.to_string().contains("ciphertext"), "{envelope}");
    let d = backend.load("dev").unwrap().deployment;
    let renamed = d
        .resources
        .iter()
        .find(|s| s.urn.as_str().ends_with("::renamed"))
        .expect("migrated");
    assert_eq!(
        renamed.inputs["password"],
        PropertyValue::Secret(Secret::plaintext(PropertyValue::String(
            "hush-0-plain".into()
        )))
    );
    assert_eq!(cloud.counters().creates, 1, "nothing re-created");
}

#[test]
fn importing_plaintext_secrets_needs_a_passphrase_and_writes_no_plaintext() {
    // Exported by Pulumi with --show-secrets: plaintext secrets.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/pulumi/aws-django-voting-app__export.txt");
    assert!(path.is_file(), "the fixture {} is missing", path.display());
    let p = path.to_str().unwrap();
    let stack = "aws-django-voting-app";
    let mut k = Keel::new();
    let (_, err) = k.expect(2, &["stack", "import", "--stack", stack, "--file", p]);
    assert!(
        err.contains("plaintext secrets") && err.contains("KEEL_CONFIG_PASSPHRASE"),
        "{err}"
    );
    assert!(k.files().is_empty(), "nothing was written");

    // With a passphrase: the file still names Pulumi's `service` provider,
    // which keel cannot encrypt with; keel's passphrase provider takes
    // over and every secret is encrypted at rest.
    let original: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        original["deployment"]["secrets_providers"]["type"],
        "service"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let secrets = text.matches("\"plaintext\"").count();
    assert!(secrets > 0);
    k.passphrase = Some("pw".to_owned());
    k.ok(&["stack", "import", "--stack", stack, "--file", p]);
    for (file, bytes) in k.files() {
        let on_disk = String::from_utf8_lossy(&bytes);
        // (The fixture's secret password is also its plain username, so
        // the value itself may appear; the plaintext form may not.)
        assert!(
            !on_disk.contains("\"plaintext\""),
            "a plaintext secret reached {}",
            file.display()
        );
    }
    k.ok(&["state", "verify", "--stack", stack]);
    let stored = export(&k, &["--stack", stack]);
    assert_eq!(
        stored["deployment"]["secrets_providers"]["type"],
        "passphrase"
    );
    let mut found = Vec::new();
    ciphertexts(&stored, &mut found);
    assert_eq!(found.len(), secrets, "every secret encrypted");
    let shown = export(&k, &["--stack", stack, "--show-secrets"]);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    plaintexts(&original, &mut before);
    plaintexts(&shown, &mut after);
    assert_eq!(before.len(), secrets);
    assert_eq!(after, before, "the secrets read back as imported");

    // Plaintext beside that provider's ciphertexts cannot be put under one
    // key: refused, naming the provider, before anything is written.
    let mut mixed = original.clone();
    let secret = serde_json::json!({
        "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
        "ciphertext": "AAABAE9QYQ5V3U6N4tQdc0eD"
    });
    mixed["deployment"]["resources"][1]["outputs"]["sealed"] = secret;
    let mixed_file = k.write("mixed.json", &mixed.to_string());
    let mut k2 = Keel::new();
    k2.passphrase = Some("pw".to_owned());
    let (_, err) = k2.expect(
        2,
        &["stack", "import", "--stack", stack, "--file", &mixed_file],
    );
    assert!(
        err.contains("`service`") && err.contains("--show-secrets"),
        "{err}"
    );
    assert!(k2.files().is_empty(), "nothing was written");
}

#[test]
fn saved_plans_hold_no_plaintext_secret_and_apply_it() {
    let mut k = Keel::new();
    let program = k.write("vault.yaml", PROGRAM);
    let plan = k.path().join("plan.json");
    let plan = plan.to_str().expect("path");
    // No passphrase: the plan would have to hold the secret in plaintext.
    let (_, err) = k.expect(2, &["preview", "--program", &program, "--save-plan", plan]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    assert!(!std::path::Path::new(plan).exists(), "no plan written");

    // A new stack: the plan names the provider that encrypted it.
    k.passphrase = Some("s3cure".into());
    k.ok(&["preview", "--program", &program, "--save-plan", plan]);
    let text = std::fs::read_to_string(plan).expect("plan");
    assert!(!text.contains("pa55-w0rd-xyz"), "{text}");
    let saved: Value = serde_json::from_str(&text).expect("plan JSON");
    let mut sealed = Vec::new();
    ciphertexts(&saved, &mut sealed);
    assert_eq!(sealed.len(), 1, "{text}");
    assert_eq!(saved["secretsProviders"]["type"], "passphrase");

    // Applying it needs the passphrase, and applies the secret.
    k.passphrase = None;
    let (_, err) = k.expect(2, &["up", "--program", &program, "--plan", plan]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    assert!(!k.backend().join("stacks").exists(), "no stack made");
    k.passphrase = Some("s3cure".into());
    k.ok(&["up", "--program", &program, "--plan", plan]);
    let shown = export(&k, &["--show-secrets"]).to_string();
    assert!(shown.contains("pa55-w0rd-xyz"), "{shown}");
    // The cloud holds it too; `cloud list` shows it masked.
    let db = k
        .cloud()
        .into_iter()
        .find(|o| o["name"] == "db")
        .expect("db");
    assert_eq!(db["properties"]["password"], "[secret]", "{db}");

    // On the existing stack too (its own provider), and a changed secret
    // deviates from the plan.
    k.ok(&["preview", "--program", &program, "--save-plan", plan]);
    assert!(!std::fs::read_to_string(plan)
        .unwrap()
        .contains("pa55-w0rd-xyz"));
    k.ok(&["up", "--program", &program, "--plan", plan]);
    let changed = k.write(
        "changed.yaml",
        &PROGRAM.replace("pa55-w0rd-xyz", "other-pa55"),
    );
    let (_, err) = k.expect(1, &["up", "--program", &changed, "--plan", plan]);
    assert!(err.contains("deviates from the plan"), "{err}");
    assert!(!err.contains("pa55"), "no secret in the error: {err}");
}

#[test]
fn an_edit_adding_a_plaintext_secret_to_a_service_stack_is_encrypted_or_refused() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pulumi");
    // (fixture, stack, whether it holds `service` ciphertexts)
    for (name, stack, encrypted) in [
        ("aws-ts-lambda-efs__stack.json", "dev", false),
        ("examples__ec2__stack.json", "test", true),
    ] {
        let path = fixtures.join(name);
        let p = path.to_str().unwrap();
        let mut k = Keel::new();
        k.passphrase = Some("pw".to_owned());
        k.ok(&["stack", "import", "--stack", stack, "--file", p]);
        let mut state = export(&k, &["--stack", stack]);
        assert_eq!(state["deployment"]["secrets_providers"]["type"], "service");
        let custom = state["deployment"]["resources"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["custom"] == true)
            .expect("a custom resource");
        custom["inputs"]["addedByHand"] = serde_json::json!({
            "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
            "plaintext": "\"Hand-Typed-Secret\"",
        });
        let edited = k.write("edited.json", &state.to_string());
        let before = k.files();
        let o = k
            .command(&["state", "edit", "--stack", stack, "--yes"])
            .env("EDITOR", format!("cp {edited}"))
            .output()
            .unwrap();
        let err = text(&o.stderr);
        if encrypted {
            // The stack keeps `service` ciphertexts: one key is impossible.
            assert_eq!(o.status.code(), Some(2), "{name}: {err}");
            assert!(err.contains("`service`"), "{name}: {err}");
            assert!(k.files() == before, "{name}: nothing written");
            continue;
        }
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        for (file, bytes) in k.files() {
            let on_disk = String::from_utf8_lossy(&bytes);
            assert!(
                !on_disk.contains("Hand-Typed-Secret") && !on_disk.contains("\"plaintext\""),
                "{name}: a plaintext secret reached {}",
                file.display()
            );
        }
        let stored = export(&k, &["--stack", stack]);
        assert_eq!(
            stored["deployment"]["secrets_providers"]["type"],
            "passphrase"
        );
        let shown = k.ok(&["stack", "export", "--stack", stack, "--show-secrets"]);
        assert!(shown.contains("Hand-Typed-Secret"), "{name}");
        k.ok(&["state", "verify", "--stack", stack]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_refuses_plaintext_without_a_secrets_manager() {
    use keel::engine::{Engine, EngineConfig};
    use keel::persist::backend::PersistenceKind;
    use keel::persist::journal_file::JournalOptions;
    use keel::provider::{ProviderRegistry, SimCloud, SimConfig};

    // The CLI refuses a program that creates secrets on a stack without a
    // secrets provider before anything runs; these reach persistence past
    // that check, through the engine's API: secret inputs, and an output
    // the provider makes (`arn`) that becomes a secret only once the
    // create answered, as a real provider's own secret output does.
    for (secret_outputs, kind) in [
        (false, PersistenceKind::Journal),
        (false, PersistenceKind::Checkpoint),
        (true, PersistenceKind::Journal),
        (true, PersistenceKind::Checkpoint),
    ] {
        let case = format!("secret outputs: {secret_outputs}, {kind:?}");
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        let engine = Engine::new(
            EngineConfig {
                project: "proj".into(),
                parallel: 2,
                ..EngineConfig::default()
            },
            ProviderRegistry::simulated(cloud.clone()),
        );
        let program = if secret_outputs {
            (0..3)
                .map(|i| {
                    common::bucket(&format!("b{i}"), &[])
                        .with(|o| o.additional_secret_outputs = vec!["arn".into()])
                })
                .collect()
        } else {
            secret_buckets(3)
        };
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        let err = engine
            .update(open.deployment.clone(), common::program(program), p)
            .await
            .expect_err(&case)
            .to_string();
        assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{case}: {err}");
        assert!(!err.contains("-plain"), "{case}: {err}");
        drop(open);
        for (path, bytes) in files_under(dir.path()) {
            let text = text(&bytes);
            let plain = text.contains("-plain") || text.contains("plaintext");
            assert!(!plain, "{case}: {}: {text}", path.display());
        }

        // What was written loads, and every object the cloud holds is
        // owned: by a state, or (its end never written) by the pending
        // create that began it.
        let d = backend.load("dev").expect(&case).deployment;
        let owned = d
            .resources
            .iter()
            .chain(d.pending_operations.iter().map(|p| &p.resource))
            .filter(|s| s.urn.as_str().contains("Bucket::"))
            .count();
        let created = cloud.counters().creates;
        assert_eq!(owned as u64, created, "{case}");
        // A secret input is refused at the begin record: nothing created.
        assert_eq!(created == 0, !secret_outputs, "{case}");
        // A create whose end was refused names its object, so that the
        // operator can adopt it whatever the provider can look up.
        if secret_outputs {
            let named = cloud
                .objects()
                .iter()
                .any(|o| err.contains(&format!("was created as `{}`", o.id)));
            assert!(named, "{case}: {err}");
            assert!(err.contains("--import-pending-creates"), "{case}: {err}");
        }
    }
}
