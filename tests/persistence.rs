//! Crash-safe persistence: journal and full-checkpoint round trips through
//! the real engine, torn tails and corruption, injected write failures,
//! the stack lock, and `kill -9` at seeded points of a run's progress.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel::engine::{Engine, EngineConfig, EngineError, Outcome};
use keel::model::integrity::verify;
use keel::model::snapshot::OperationType;
use keel::model::snapshot::PendingOperation;
use keel::model::step::share;
use keel::model::{Deployment, State};
use keel::persist::backend::{write_base, Backend, BackendError, PersistenceKind};
use keel::persist::checkpoint_file::CheckpointPersister;
use keel::persist::fs::LockError;
use keel::persist::journal::{encode, ChangeRecord, Entry, JournalError, Ref};
use keel::persist::journal_file::{JournalOptions, JournalPersister};
use keel::persist::{Change, Mutation, Persister, SnapshotBuilder};
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};

const STACK: &str = "dev";

fn engine(cloud: &Arc<SimCloud>, parallel: usize, pending_window: usize) -> Engine {
    Engine::new(
        EngineConfig {
            project: "proj".into(),
            parallel,
            pending_window,
            ..EngineConfig::default()
        },
        ProviderRegistry::simulated(cloud.clone()),
    )
}

fn many(n: usize) -> Vec<Res> {
    (0..n)
        .map(|i| {
            let r = bucket(&format!("b{i}"), &[("size", "1")]);
            if i % 3 == 2 {
                r.dep(&format!("b{}", i - 1))
            } else {
                r
            }
        })
        .collect()
}

/// Runs an update on the stack in `backend` with the given persister kind,
/// optionally failing the persister's `fail_at`th save.
async fn up(
    backend: &Backend,
    cloud: &Arc<SimCloud>,
    resources: Vec<Res>,
    kind: PersistenceKind,
    fail_at: Option<u64>,
) -> Result<Outcome, EngineError> {
    up_inner(backend, cloud, resources, kind, fail_at, 8, 0).await
}

/// [`up`] running at most `parallel` provider operations at once, with at
/// most `window` (0: `parallel`) begun ahead of their calls.
async fn up_with(
    backend: &Backend,
    cloud: &Arc<SimCloud>,
    resources: Vec<Res>,
    kind: PersistenceKind,
    parallel: usize,
    window: usize,
) -> Result<Outcome, EngineError> {
    up_inner(backend, cloud, resources, kind, None, parallel, window).await
}

async fn up_inner(
    backend: &Backend,
    cloud: &Arc<SimCloud>,
    resources: Vec<Res>,
    kind: PersistenceKind,
    fail_at: Option<u64>,
    parallel: usize,
    window: usize,
) -> Result<Outcome, EngineError> {
    let open = backend.open(STACK, "keel up").unwrap();
    let persister: Box<dyn Persister> = match (kind, fail_at) {
        (k, None) => open.persister(k, JournalOptions::default()).unwrap(),
        (PersistenceKind::Journal, Some(n)) => {
            Box::new(journal_persister(&open, JournalOptions::default()).fail_at(n))
        }
        (PersistenceKind::Checkpoint, Some(n)) => Box::new(
            CheckpointPersister::new(open.paths.clone(), open.seq(), open.counters().clone())
                .fail_at(n),
        ),
    };
    engine(cloud, parallel, window)
        .update(open.deployment.clone(), program(resources), persister)
        .await
}

fn json(resources: &[State]) -> serde_json::Value {
    serde_json::to_value(resources).unwrap()
}

fn names(d: &Deployment) -> Vec<String> {
    let mut v: Vec<String> = d.resources.iter().map(|s| s.urn.to_string()).collect();
    v.sort();
    v
}

/// Every object in the cloud is in the state or listed as pending.
fn nothing_forgotten(d: &Deployment, cloud: &SimCloud) {
    for obj in cloud.objects() {
        let known = d
            .resources
            .iter()
            .any(|s| s.urn.as_str() == obj.urn && s.id == obj.id)
            || d.pending_operations
                .iter()
                .any(|p| p.resource.urn.as_str() == obj.urn);
        assert!(
            known,
            "object {} ({}) is in the cloud but neither in the state nor pending",
            obj.id, obj.urn
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_persisters_round_trip_through_reopen() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        let o = up(&backend, &cloud, many(20), kind, None).await.unwrap();
        assert!(
            o.fsyncs > 0 && o.bytes_written > 0,
            "{kind:?}: {} fsyncs",
            o.fsyncs
        );
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&o.snapshot.resources),
            "{kind:?}"
        );
        assert_eq!(
            names(&loaded.deployment).len(),
            22,
            "stack, provider, 20 buckets"
        );
        // The journal was compacted into the base.
        let journal = std::fs::metadata(backend.paths(STACK).journal)
            .map(|m| m.len())
            .unwrap_or(0);
        assert_eq!(journal, 0, "{kind:?}");
        // A second run changes some and deletes some.
        let mut v2 = many(10);
        v2[0] = bucket("b0", &[("size", "2")]);
        let o2 = up(&backend, &cloud, v2, kind, None).await.unwrap();
        assert_eq!(o2.summary.count(keel::StepKind::Update), 1);
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&o2.snapshot.resources),
            "{kind:?}"
        );
        assert!(
            backend
                .paths(STACK)
                .base
                .with_extension("json.bak")
                .exists(),
            "{kind:?}: backup kept"
        );
    }
}

/// Writes `n` creates to the stack's journal through the real persister,
/// without the final compaction (as a killed process leaves it).
fn journal_with_creates(backend: &Backend, n: usize) -> Vec<State> {
    let open = backend.open(STACK, "test").unwrap();
    let mut base = open.deployment.clone();
    let olds = SnapshotBuilder::share_resources(&mut base);
    let mut builder = SnapshotBuilder::new(base, olds);
    let mut p = journal_persister(&open, JournalOptions::default());
    (0..n)
        .map(|i| persist_create(&mut p, &mut builder, &format!("c{i}")))
        .collect()
}

/// The stack's journal persister, as `open` left the stack.
fn journal_persister(
    open: &keel::persist::backend::OpenStack,
    options: JournalOptions,
) -> JournalPersister {
    JournalPersister::open(
        open.paths.clone(),
        open.seq(),
        options,
        open.counters().clone(),
    )
    .unwrap()
}

/// Applies and persists the create of a component `name`, waiting until
/// it is durable; returns the state written.
fn persist_create(p: &mut dyn Persister, builder: &mut SnapshotBuilder, name: &str) -> State {
    let s = State::new(
        keel::model::Urn::parse(&format!("urn:pulumi:dev::proj::{COMP}::{name}")).unwrap(),
        ty(COMP),
        false,
    );
    let m = Mutation::Apply(Change::Write {
        old: None,
        new: share(s.clone()),
        mark_old_delete: false,
    });
    builder.apply(&m);
    let (tx, rx) = std::sync::mpsc::channel();
    p.persist(&m, builder, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap().unwrap();
    s
}

/// A journal that outgrows its size limit is compacted by the persister's
/// upkeep, which the persister actor runs on the blocking capacity before
/// the next mutation; `persist` itself only encodes and hands the record
/// to the writer thread, so the actor calls it in place.
#[test]
fn a_journal_past_its_limit_compacts_in_upkeep_before_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let open = backend.open(STACK, "test").unwrap();
    let mut base = open.deployment.clone();
    let olds = SnapshotBuilder::share_resources(&mut base);
    let mut builder = SnapshotBuilder::new(base, olds);
    let options = JournalOptions {
        compact_bytes: 1 << 10,
        ..JournalOptions::default()
    };
    let mut p = journal_persister(&open, options);
    assert!(!p.persist_may_block());
    let journal = backend.paths(STACK).journal;
    let mut states = Vec::new();
    let mut compactions = 0;
    for i in 0..40 {
        if p.upkeep_due() {
            let before = std::fs::metadata(&journal).unwrap().len();
            assert!(before > 1 << 10, "due only past the limit ({before} bytes)");
            p.upkeep(&mut builder);
            compactions += 1;
            assert!(!p.upkeep_due());
            assert_eq!(
                std::fs::metadata(&journal).unwrap().len(),
                0,
                "a fresh journal"
            );
            let loaded = backend.load(STACK).unwrap();
            assert!(
                json(&loaded.deployment.resources) == json(&states),
                "the base holds all"
            );
        }
        states.push(persist_create(&mut p, &mut builder, &format!("u{i}")));
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&states),
            "after record {i}"
        );
    }
    assert!(compactions >= 3, "{compactions} compactions");
    // The end's compaction supersedes one still put off.
    let d = p.finish(&mut builder).unwrap();
    assert!(!p.upkeep_due());
    assert!(json(&d.resources) == json(&states));
    drop(p);
    drop(open);
    assert!(json(&backend.load(STACK).unwrap().deployment.resources) == json(&states));
}

/// A `keep` costs the file journal nothing until something else is
/// written: then its record goes out first, in sequence, naming the base
/// state it kept, and a journal cut off there reloads to every state.
#[test]
fn keep_records_wait_for_the_next_write_and_go_out_ahead_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let journal = backend.paths(STACK).journal;
    // Three states in the base.
    {
        let open = backend.open(STACK, "test").unwrap();
        let mut base = open.deployment.clone();
        let olds = SnapshotBuilder::share_resources(&mut base);
        let mut builder = SnapshotBuilder::new(base, olds);
        let mut p = journal_persister(&open, JournalOptions::default());
        for name in ["k0", "k1", "k2"] {
            persist_create(&mut p, &mut builder, name);
        }
        p.finish(&mut builder).unwrap();
    }
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    let open = backend.open(STACK, "test").unwrap();
    let mut base = open.deployment.clone();
    let olds = SnapshotBuilder::share_resources(&mut base);
    assert_eq!(olds.len(), 3);
    let mut builder = SnapshotBuilder::new(base, olds.clone());
    let mut p = journal_persister(&open, JournalOptions::default());
    for old in [&olds[2], &olds[0]] {
        let m = Mutation::Apply(Change::Keep { old: old.clone() });
        builder.apply(&m);
        let (tx, rx) = std::sync::mpsc::channel();
        p.persist(&m, &mut builder, Box::new(move |r| tx.send(r).unwrap()));
        rx.recv().unwrap().unwrap();
    }
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len(),
        0,
        "keeps alone write nothing"
    );
    persist_create(&mut p, &mut builder, "late");
    let records = keel::persist::journal::decode(&std::fs::read(&journal).unwrap())
        .unwrap()
        .records;
    let shapes: Vec<(u64, Option<Ref>)> = records
        .iter()
        .map(|r| match &r.entry {
            Entry::Success {
                seq,
                change: ChangeRecord::Keep { old },
                ..
            } => (*seq, Some(*old)),
            Entry::Success {
                seq,
                change: ChangeRecord::Write { .. },
                ..
            } => (*seq, None),
            other => panic!("unexpected record {other:?}"),
        })
        .collect();
    let first = shapes[0].0;
    assert_eq!(
        shapes,
        [
            (first, Some(Ref::Base(2))),
            (first + 1, Some(Ref::Base(0))),
            (first + 2, None)
        ]
    );
    // Killed here: the journal replays onto the base.
    drop(p);
    drop(open);
    let loaded = backend.load(STACK).unwrap();
    let mut want: Vec<String> = ["k0", "k1", "k2", "late"]
        .iter()
        .map(|n| format!("urn:pulumi:dev::proj::{COMP}::{n}"))
        .collect();
    want.sort();
    assert_eq!(names(&loaded.deployment), want);
}

fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut starts = Vec::new();
    while at + 8 <= bytes.len() {
        starts.push(at);
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    starts
}

#[test]
fn torn_tails_are_cut_and_middle_corruption_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let states = journal_with_creates(&backend, 6);
    let journal = backend.paths(STACK).journal;
    let good = std::fs::read(&journal).unwrap();
    let starts = record_starts(&good);
    assert_eq!(starts.len(), 6);

    // What a crash can leave of an append: a prefix of a record, or zeros
    // where the data never reached the disk.
    for tail in [&good[starts[1]..starts[1] + 11], &[0u8; 512][..]] {
        std::fs::write(&journal, [&good[..], tail].concat()).unwrap();
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&states),
            "every whole record is kept"
        );
        assert!(
            loaded.warnings.iter().any(|w| w.contains("torn")),
            "{:?}",
            loaded.warnings
        );
    }
    // Opening for an operation cuts the tail for good.
    drop(backend.open(STACK, "test").unwrap());
    assert!(json(&backend.load(STACK).unwrap().deployment.resources) == json(&states));

    let mut bad = good.clone();
    bad[starts[2] + 20] ^= 0x01;
    std::fs::write(&journal, &bad).unwrap();
    match backend.load(STACK) {
        Err(BackendError::Journal {
            source: JournalError::Corrupt { offset, .. },
            ..
        }) => assert_eq!(offset, starts[2] as u64),
        other => panic!("expected corruption at {}, got {other:?}", starts[2]),
    }
    let e = backend.load(STACK).unwrap_err().to_string();
    assert!(e.contains(&format!("offset {}", starts[2])), "{e}");
}

/// The files of the stack, for "nothing changed" checks.
fn stack_files(backend: &Backend) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(backend.paths(STACK).dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("lock"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Asserts that the stack refuses to load and to open with an error naming
/// `file` (and containing `also`), and that its files did not change.
fn refused(backend: &Backend, file: &Path, also: &str) {
    let before = stack_files(backend);
    let e = backend.load(STACK).map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains(&file.display().to_string()) && e.contains(also),
        "the error names {} and says `{also}`: {e}",
        file.display()
    );
    let e = backend
        .open(STACK, "keel up")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&file.display().to_string()), "{e}");
    assert!(stack_files(backend) == before, "refusing changed the files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_no_torn_write_can_leave_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    up(&backend, &cloud, many(6), PersistenceKind::Journal, None)
        .await
        .unwrap();
    let journal = backend.paths(STACK).journal;
    // Random bytes in place of the journal (xorshift, fixed seed): not a
    // torn write at offset 0, which would read the stack as its base.
    let mut x: u64 = 0x0dd_ba11_cafe_f00d;
    let random: Vec<u8> = (0..2048)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&journal, &random).unwrap();
    refused(&backend, &journal, "offset 0");

    // Garbage after whole records, and a header claiming more than any
    // record keel writes, at the end of the file.
    let good = {
        std::fs::write(&journal, b"").unwrap();
        drop(backend.open(STACK, "test").unwrap());
        journal_with_creates(&backend, 3);
        std::fs::read(&journal).unwrap()
    };
    let mut huge = u32::MAX.to_le_bytes().to_vec();
    huge.extend(b"\0\0\0\0{\"kind\":");
    for tail in [&b"\x00garbage\xff"[..], &huge[..]] {
        std::fs::write(&journal, [&good[..], tail].concat()).unwrap();
        refused(&backend, &journal, &format!("offset {}", good.len()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_base_checkpoint_is_refused_not_read_as_an_empty_stack() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        up(&backend, &cloud, many(4), kind, None).await.unwrap();
        up(&backend, &cloud, many(5), kind, None).await.unwrap();
        let paths = backend.paths(STACK);
        std::fs::remove_file(&paths.base).unwrap();
        refused(&backend, &paths.base, "checkpoint.json.bak");
        assert_eq!(cloud.objects().len(), 5, "{kind:?}");
    }
    // Without the backup, a journal that follows a base gives it away.
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    up(&backend, &cloud, many(3), PersistenceKind::Journal, None)
        .await
        .unwrap();
    journal_with_creates(&backend, 2);
    let paths = backend.paths(STACK);
    std::fs::remove_file(&paths.base).unwrap();
    let _ = std::fs::remove_file(paths.base.with_extension("json.bak"));
    refused(&backend, &paths.base, "journal.log");
}

#[test]
fn errors_reading_a_checkpoint_or_journal_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    journal_with_creates(&backend, 2);
    drop(backend.open(STACK, "test").unwrap());
    let paths = backend.paths(STACK);
    let good_base = std::fs::read(&paths.base).unwrap();
    std::fs::write(&paths.base, b"{\"version\": 3, \"deployment\": [").unwrap();
    refused(&backend, &paths.base, "");
    // A journal entry that does not apply to the base names the journal.
    std::fs::write(&paths.base, good_base).unwrap();
    let entry = Entry::Success {
        seq: 99,
        op: 0,
        change: ChangeRecord::Remove { old: Ref::Base(42) },
    };
    std::fs::write(&paths.journal, encode(&entry)).unwrap();
    refused(&backend, &paths.journal, "seq 99");
}

/// Writes `d` as the stack's base, as a killed operation can leave it.
fn leave(backend: &Backend, d: &Deployment) {
    let paths = backend.paths(STACK);
    write_base(&paths.base, d, 0, 0, &Default::default()).unwrap();
    std::fs::write(&paths.journal, b"").unwrap();
}

fn pending(resource: &State, ty: OperationType) -> PendingOperation {
    let mut p = PendingOperation::default();
    p.resource = resource.clone();
    p.ty = ty;
    p
}

/// Bucket `a` named `name` (a change of name replaces it) and bucket `b`,
/// which depends on it.
fn a_and_dependent(name: &str) -> Vec<Res> {
    vec![
        bucket("a", &[("name", name)]),
        bucket("b", &[("size", "1")]).dep("a"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_create_replacement_is_adopted_not_leaked() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(Crash::Replace.config());
        up(&backend, &cloud, a_and_dependent("x"), kind, None)
            .await
            .unwrap();
        // Killed after the replacement of `a` was made, before it was
        // recorded: the create is pending, the old `a` still live.
        let mut d = backend.load(STACK).unwrap().deployment;
        let old = d
            .resources
            .iter()
            .find(|s| s.urn.name() == "a")
            .unwrap()
            .clone();
        let mut new = old.clone();
        new.id = String::new();
        new.inputs = props(&[("name", "y")]);
        let made = cloud
            .objects()
            .into_iter()
            .find(|o| o.urn == old.urn.as_str())
            .unwrap();
        cloud.insert_object(keel::provider::sim::SimObject {
            id: format!("{}-replacement", made.id),
            inputs: new.inputs.clone(),
            ..made
        });
        d.pending_operations = vec![pending(&new, OperationType::Creating)];
        leave(&backend, &d);

        up(&backend, &cloud, a_and_dependent("y"), kind, None)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let state = backend.load(STACK).unwrap().deployment;
        assert_eq!(cloud.objects().len(), 2, "{kind:?}: {:?}", cloud.objects());
        nothing_forgotten(&state, &cloud);
        let a = state
            .resources
            .iter()
            .find(|s| s.urn.name() == "a")
            .unwrap();
        assert_eq!(
            a.id,
            format!("{}-replacement", made.id),
            "{kind:?}: adopted, not made again"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_delete_before_replace_leaves_a_stack_that_saves() {
    for kind in [PersistenceKind::Checkpoint, PersistenceKind::Journal] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(Crash::DeleteBeforeReplace.config());
        up(&backend, &cloud, a_and_dependent("x"), kind, None)
            .await
            .unwrap();
        // Killed during the delete of `a` (its dependent `b` deleted first
        // and pending its replacement), after the object was deleted.
        let mut d = backend.load(STACK).unwrap().deployment;
        for s in &mut d.resources {
            if s.urn.name() == "b" {
                s.pending_replacement = true;
                cloud.remove_object(&s.id);
            }
        }
        let a = d
            .resources
            .iter()
            .find(|s| s.urn.name() == "a")
            .unwrap()
            .clone();
        cloud.remove_object(&a.id);
        d.pending_operations = vec![pending(&a, OperationType::Deleting)];
        leave(&backend, &d);

        up(&backend, &cloud, a_and_dependent("y"), kind, None)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: the next update failed: {e}"));
        let state = backend.load(STACK).unwrap().deployment;
        verify(&state).unwrap();
        assert_eq!(cloud.objects().len(), 2, "{kind:?}");
        nothing_forgotten(&state, &cloud);
        assert!(state.resources.iter().all(|s| !s.pending_replacement));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_pending_operations_make_one_warning_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    up(&backend, &cloud, many(3), PersistenceKind::Journal, None)
        .await
        .unwrap();
    let mut d = backend.load(STACK).unwrap().deployment;
    let template = d
        .resources
        .iter()
        .find(|s| s.urn.name() == "b0")
        .unwrap()
        .clone();
    d.pending_operations = (0..2000)
        .map(|i| {
            let mut s = template.clone();
            s.urn =
                keel::model::Urn::parse(&template.urn.as_str().replace("::b0", &format!("::n{i}")))
                    .unwrap();
            s.id = String::new();
            pending(&s, OperationType::Creating)
        })
        .collect();
    leave(&backend, &d);

    let loaded = backend.load(STACK).unwrap();
    assert_eq!(loaded.warnings.len(), 1, "{:?}", &loaded.warnings[..3]);
    let w = &loaded.warnings[0];
    assert!(
        w.contains("2000 pending operations")
            && w.contains("::n0")
            && w.contains("1997 more")
            && w.contains("keel refresh"),
        "{w}"
    );
    // The update resolving them says so in one line too.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            events: keel::events::EventSink::new(tx),
            ..EngineConfig::default()
        },
        ProviderRegistry::simulated(cloud.clone()),
    );
    let open = backend.open(STACK, "keel up").unwrap();
    let p = open
        .persister(PersistenceKind::Journal, JournalOptions::default())
        .unwrap();
    engine
        .update(open.deployment.clone(), program(many(3)), p)
        .await
        .unwrap();
    drop(engine);
    let mut warnings = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let keel::events::EngineEvent::Diagnostic {
            severity, message, ..
        } = e
        {
            if severity == "warning" {
                warnings.push(message);
            }
        }
    }
    assert_eq!(
        warnings.len(),
        1,
        "{:?}",
        &warnings[..warnings.len().min(3)]
    );
    assert!(
        warnings[0].contains("2000 interrupted operations") && warnings[0].contains("1997 more"),
        "{}",
        warnings[0]
    );
    assert!(backend.load(STACK).unwrap().warnings.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_write_failure_fails_the_operation_and_keeps_the_last_good_state() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        let v1 = up(&backend, &cloud, many(5), kind, None).await.unwrap();
        let e = match up(&backend, &cloud, many(12), kind, Some(4)).await {
            Err(EngineError::Failed(o)) => o,
            other => panic!("{kind:?}: expected a failure, got {other:?}"),
        };
        let text = format!("{:?}", e.summary);
        assert!(text.contains("injected failure"), "{kind:?}: {text}");
        let loaded = backend.load(STACK).unwrap();
        verify(&loaded.deployment).unwrap();
        for s in &v1.snapshot.resources {
            assert!(
                loaded.deployment.resources.iter().any(|r| r.urn == s.urn),
                "{kind:?}: lost {}",
                s.urn
            );
        }
        nothing_forgotten(&loaded.deployment, &cloud);
        // The next update converges.
        up(&backend, &cloud, many(12), kind, None).await.unwrap();
        assert_eq!(cloud.objects().len(), 12, "{kind:?}");
    }
}

#[test]
fn a_second_operation_fails_at_once_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let first = backend.open(STACK, "keel up --program a.yaml").unwrap();
    // `first` holds the lock in this thread: an open that waited for it
    // would never return.
    match backend.open(STACK, "keel up") {
        Err(BackendError::Locked(LockError::Held(h))) => {
            assert_eq!(h.pid, std::process::id());
            assert_eq!(h.command, "keel up --program a.yaml");
            let e = BackendError::Locked(LockError::Held(h)).to_string();
            assert!(
                e.contains("locked") && e.contains("pid") && e.contains("a.yaml"),
                "{e}"
            );
        }
        other => panic!("expected the lock error, got {other:?}"),
    }
    drop(first);
    backend.open(STACK, "keel up").unwrap();
}

const CRASH_RESOURCES: usize = 240;
const REPLACED: usize = 60;

/// What a crash round runs: the stack before, and the update killed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Crash {
    /// 240 creates on an empty stack.
    Creates,
    /// 60 create-before-delete replacements.
    Replace,
    /// 60 delete-before-replace replacements, every third resource
    /// depending on the one before (its dependent is deleted first).
    DeleteBeforeReplace,
}

impl Crash {
    fn parse(s: &str) -> Self {
        [Self::Creates, Self::Replace, Self::DeleteBeforeReplace]
            .into_iter()
            .find(|c| format!("{c:?}") == s)
            .unwrap()
    }

    fn config(self) -> SimConfig {
        let mut c = SimConfig {
            latency: Duration::from_millis(3),
            record_calls: false,
            ..SimConfig::default()
        };
        c.replace_on_change.insert("name".into());
        if self == Self::DeleteBeforeReplace {
            c.delete_before_replace_types.insert(BUCKET.into());
        }
        c
    }

    fn program(self, version: &str) -> Vec<Res> {
        if self == Self::Creates {
            return many(CRASH_RESOURCES);
        }
        (0..REPLACED)
            .map(|i| {
                let r = bucket(&format!("b{i}"), &[("name", version)]);
                if i % 3 == 2 {
                    r.dep(&format!("b{}", i - 1))
                } else {
                    r
                }
            })
            .collect()
    }

    fn objects(self) -> usize {
        match self {
            Self::Creates => CRASH_RESOURCES,
            _ => REPLACED,
        }
    }

    /// The physical operations of the update killed: a create per
    /// resource, or a create and a delete per replacement. Each that ends
    /// appends one record to the cloud's file.
    fn operations(self) -> u64 {
        match self {
            Self::Creates => CRASH_RESOURCES as u64,
            _ => 2 * REPLACED as u64,
        }
    }
}

/// The child side of the crash tests: runs one update and is killed.
/// [`kill_rounds`] starts the calling kill test again in a child process
/// with `KEEL_CRASH_DIR` set; that run of the test is this child (see
/// [`as_crash_child`]).
async fn crash_child(dir: PathBuf) {
    let env = |k: &str| std::env::var(k).unwrap();
    let crash = Crash::parse(&env("KEEL_CRASH"));
    let kind: PersistenceKind = env("KEEL_CRASH_PERSISTENCE").parse().unwrap();
    let parallel: usize = env("KEEL_CRASH_PARALLEL").parse().unwrap();
    let window: usize = env("KEEL_CRASH_WINDOW").parse().unwrap();
    let backend = Backend::new(&dir);
    let cloud = SimCloud::load(&dir.join("cloud.json"), crash.config()).unwrap();
    cloud.autosave_to(dir.join("cloud.json"));
    // The run's last operation never ends: the child is killed mid-run.
    cloud.hold_from(crash.operations() - 1);
    std::fs::write(dir.join("started"), b"").unwrap();
    let _ = up_with(&backend, &cloud, crash.program("y"), kind, parallel, window).await;
    std::fs::write(dir.join("finished"), b"").unwrap();
}

/// When this process is a kill test's child (`KEEL_CRASH_DIR` set), runs
/// the child's update (never returning normally: it is killed) and
/// returns true.
async fn as_crash_child() -> bool {
    match std::env::var_os("KEEL_CRASH_DIR") {
        Some(dir) => {
            crash_child(PathBuf::from(dir)).await;
            true
        }
        None => false,
    }
}

/// How long a child may take to reach a kill point (a guard against a
/// child that hangs, not a measurement).
const KILL_POINT_LIMIT: Duration = Duration::from_secs(300);

/// Polls every millisecond until `ready` holds, failing with `what` if the
/// child exits first or [`KILL_POINT_LIMIT`] passes.
fn wait_until(child: &mut std::process::Child, what: &str, mut ready: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited ({status}) before {what}");
        }
        assert!(
            start.elapsed() < KILL_POINT_LIMIT,
            "no {what} within {KILL_POINT_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The complete records in the simulated cloud's file (its lines after the
/// header; 0 when it does not exist).
fn cloud_records(path: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    lines.saturating_sub(1)
}

/// Kills a child running `crash` in each of `rounds` rounds, at a seeded
/// point of its progress: once the cloud's file shows that `k` of its
/// operations ended (`k` from 0 to all but the last, which the child holds
/// in flight forever), so every kill lands mid-run. Then checks what it
/// left: the stack loads and passes integrity, every cloud object is in
/// the state or pending, at most the engine's pending-operation window of
/// operations are pending (`window`, or the default when 0; at least
/// `parallel`), and the next update (same program) succeeds with exactly one object per
/// resource and nothing unowned.
async fn kill_rounds(
    test: &str,
    crash: Crash,
    kind: PersistenceKind,
    parallel: usize,
    window: usize,
    rounds: usize,
) {
    let exe = std::env::current_exe().unwrap();
    let mut rng: u64 = 0x5eed_1234_abcd_0001;
    for round in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let progress = rng % crash.operations();
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud_file = dir.path().join("cloud.json");
        if crash != Crash::Creates {
            let cloud = SimCloud::new(crash.config());
            cloud.autosave_to(&cloud_file);
            up(&backend, &cloud, crash.program("x"), kind, None)
                .await
                .unwrap();
        }
        let before = cloud_records(&cloud_file);
        let mut child = std::process::Command::new(&exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env("KEEL_CRASH_DIR", dir.path())
            .env("KEEL_CRASH", format!("{crash:?}"))
            .env(
                "KEEL_CRASH_PERSISTENCE",
                match kind {
                    PersistenceKind::Journal => "journal",
                    PersistenceKind::Checkpoint => "checkpoint",
                },
            )
            .env("KEEL_CRASH_PARALLEL", parallel.to_string())
            .env("KEEL_CRASH_WINDOW", window.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = dir.path().join("started");
        wait_until(&mut child, "it started", || started.exists());
        wait_until(&mut child, &format!("{progress} operations ended"), || {
            cloud_records(&cloud_file) >= before + progress
        });
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let at = format!(
            "{crash:?} {kind:?} round {round} (killed once {progress} operations had ended)"
        );
        assert!(
            !dir.path().join("finished").exists(),
            "{at}: the run finished though its last operation is held"
        );

        let loaded = backend
            .load(STACK)
            .unwrap_or_else(|e| panic!("{at}: reopening failed: {e}"));
        verify(&loaded.deployment).unwrap();
        let cloud = SimCloud::load(&dir.path().join("cloud.json"), crash.config()).unwrap();
        nothing_forgotten(&loaded.deployment, &cloud);
        let pending = &loaded.deployment.pending_operations;
        let bound = engine(&cloud, parallel, window).pending_window();
        assert!(
            pending.len() <= bound,
            "{at}: {} operations pending with --parallel {parallel}, window {window}",
            pending.len()
        );
        for p in pending {
            assert!(matches!(
                p.ty,
                OperationType::Creating | OperationType::Updating | OperationType::Deleting
            ));
        }

        // The next update converges with no duplicate or unowned objects.
        cloud.autosave_to(dir.path().join("cloud.json"));
        up(&backend, &cloud, crash.program("y"), kind, None)
            .await
            .unwrap_or_else(|e| panic!("{at}: the next update failed: {e}"));
        let objects = cloud.objects();
        let mut urns: Vec<&str> = objects.iter().map(|o| o.urn.as_str()).collect();
        urns.sort_unstable();
        urns.dedup();
        assert_eq!(
            (objects.len(), urns.len()),
            (crash.objects(), crash.objects()),
            "{at}: objects and distinct URNs in the cloud (duplicates, leaks or losses)"
        );
        let state = backend.load(STACK).unwrap().deployment;
        assert!(state.pending_operations.is_empty(), "{at}");
        nothing_forgotten(&state, &cloud);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_any_instant_forgets_nothing() {
    if as_crash_child().await {
        return;
    }
    kill_rounds(
        "kill_9_at_any_instant_forgets_nothing",
        Crash::Creates,
        PersistenceKind::Journal,
        8,
        0,
        20,
    )
    .await;
}

/// With the window at the pool size (`pending_window` = `parallel`), a
/// crash leaves at most `parallel` operations pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_leaves_at_most_parallel_operations_pending() {
    if as_crash_child().await {
        return;
    }
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        kill_rounds(
            "kill_9_leaves_at_most_parallel_operations_pending",
            Crash::Creates,
            kind,
            2,
            2,
            6,
        )
        .await;
    }
}

/// With a pending-operation window larger than the pool, begins are
/// durable ahead of their calls, and a crash leaves at most the window
/// pending (the invariant in ARCHITECTURE.md), never every chain waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_leaves_at_most_the_window_of_operations_pending() {
    if as_crash_child().await {
        return;
    }
    kill_rounds(
        "kill_9_leaves_at_most_the_window_of_operations_pending",
        Crash::Creates,
        PersistenceKind::Journal,
        2,
        6,
        6,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_create_before_delete_replacements_leaks_no_object() {
    if as_crash_child().await {
        return;
    }
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        kill_rounds(
            "kill_9_during_create_before_delete_replacements_leaks_no_object",
            Crash::Replace,
            kind,
            8,
            0,
            10,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_delete_before_replace_leaves_a_stack_the_next_update_saves() {
    if as_crash_child().await {
        return;
    }
    for kind in [PersistenceKind::Checkpoint, PersistenceKind::Journal] {
        kill_rounds(
            "kill_9_during_delete_before_replace_leaves_a_stack_the_next_update_saves",
            Crash::DeleteBeforeReplace,
            kind,
            8,
            0,
            10,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_in_the_middle_of_an_operation_keep_the_state_replayable() {
    let options = JournalOptions {
        compact_bytes: 4 << 10,
        ..JournalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    // A whole run with many compactions: the persisted state is the outcome.
    let open = backend.open(STACK, "keel up").unwrap();
    let p = open
        .persister(PersistenceKind::Journal, options.clone())
        .unwrap();
    let o = engine(&cloud, 8, 0)
        .update(open.deployment.clone(), program(many(60)), p)
        .await
        .unwrap();
    drop(open);
    let loaded = backend.load(STACK).unwrap();
    assert!(json(&loaded.deployment.resources) == json(&o.snapshot.resources));

    // A run that fails partway, after several compactions: what is on disk
    // replays, passes integrity and forgets nothing.
    let open = backend.open(STACK, "keel up").unwrap();
    let p = Box::new(journal_persister(&open, options).fail_at(90));
    let mut v2 = many(60);
    v2.extend((60..120).map(|i| bucket(&format!("b{i}"), &[("size", "2")]).dep("b0")));
    let r = engine(&cloud, 8, 0)
        .update(open.deployment.clone(), program(v2), p)
        .await;
    assert!(matches!(r, Err(EngineError::Failed(_))), "{r:?}");
    drop(open);
    let loaded = backend.load(STACK).unwrap();
    verify(&loaded.deployment).unwrap();
    nothing_forgotten(&loaded.deployment, &cloud);
}

/// Recovery that adopts an interrupted create adds a state to the prior
/// list: the journal of the operation names states by their position in
/// it, so that list must become the persisted base first, or a run that
/// dies before its final compaction leaves a journal naming a state the
/// base does not have (found by the lifecycle fuzzer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_prior_list_is_the_base_the_journal_names() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    let v = || {
        vec![
            bucket("a", &[("size", "1")]),
            bucket("b", &[("size", "1")]),
            bucket("d", &[("size", "1")]),
        ]
    };
    up(
        &backend,
        &cloud,
        v()[..2].to_vec(),
        PersistenceKind::Journal,
        None,
    )
    .await
    .unwrap();
    // Killed after `d`'s object was made, before its create was recorded.
    let mut d = backend.load(STACK).unwrap().deployment;
    let mut lost = d
        .resources
        .iter()
        .find(|s| s.urn.name() == "b")
        .unwrap()
        .clone();
    lost.urn = keel::model::Urn::parse(&lost.urn.as_str().replace("::b", "::d")).unwrap();
    lost.id = String::new();
    let made = cloud.objects().into_iter().find(|o| o.name == "b").unwrap();
    cloud.insert_object(keel::provider::sim::SimObject {
        id: "d-made".into(),
        name: "d".into(),
        urn: lost.urn.as_str().to_owned(),
        ..made
    });
    d.pending_operations = vec![pending(&lost, OperationType::Creating)];
    leave(&backend, &d);
    // The next update adopts `d` and then dies before its final compaction
    // (every save after the fourth fails).
    let _ = up(&backend, &cloud, v(), PersistenceKind::Journal, Some(5)).await;
    let loaded = backend
        .load(STACK)
        .unwrap_or_else(|e| panic!("the stack no longer loads: {e}"));
    keel::model::integrity::verify(&loaded.deployment).unwrap();
    assert!(loaded.deployment.resources.iter().any(|s| s.id == "d-made"));
}

/// A same step's `keep` record is not awaited (nothing depends on its
/// durability), but a failure to write it still fails the operation: the
/// error is named at its end, whichever save of the no-op fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_keep_record_of_a_no_op_fails_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    let o = up(&backend, &cloud, many(5), PersistenceKind::Journal, None)
        .await
        .unwrap();
    // Stack, provider and five buckets: seven same steps, seven saves.
    for n in 1..=7 {
        let r = engine(&cloud, 8, 0)
            .update(
                o.snapshot.clone(),
                program(many(5)),
                Box::new(keel::persist::MemoryPersister::failing_at(n)),
            )
            .await;
        match r {
            Err(EngineError::Failed(out)) => {
                assert_eq!(out.summary.count(keel::StepKind::Same), 7, "save #{n}");
                assert!(
                    out.summary
                        .errors
                        .iter()
                        .any(|e| e.contains(&format!("injected failure of save #{n}"))),
                    "save #{n}: {:?}",
                    out.summary.errors
                );
            }
            other => panic!("save #{n}: the no-op succeeded: {other:?}"),
        }
    }
    // Nothing failing: the same no-op succeeds.
    let r = engine(&cloud, 8, 0)
        .update(
            o.snapshot.clone(),
            program(many(5)),
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    assert_eq!(r.summary.count(keel::StepKind::Same), 7);
}

/// A no-op (every step `same`, nothing else changed) writes nothing: the
/// base checkpoint is already the result, so it is neither rewritten nor
/// followed by journal records (no byte, no fsync), with either persister.
/// A later update that changes something journals against that base, and
/// replays onto it after a crash before its compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_rewrites_nothing_and_later_updates_replay_onto_its_base() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        up(&backend, &cloud, many(20), kind, None).await.unwrap();
        let before = stack_files(&backend);
        let base = backend.paths(STACK).base;
        let modified = std::fs::metadata(&base).unwrap().modified().unwrap();
        // The program registers in another order than the base holds.
        let mut reordered = many(20);
        reordered.swap(0, 1);
        let o = up(&backend, &cloud, reordered, kind, None).await.unwrap();
        assert_eq!(o.summary.count(keel::StepKind::Same), 22, "{kind:?}");
        assert_eq!(
            (o.bytes_written, o.fsyncs),
            (0, 0),
            "{kind:?}: a no-op writes nothing"
        );
        assert!(stack_files(&backend) == before, "{kind:?}: files unchanged");
        assert_eq!(
            std::fs::metadata(&base).unwrap().modified().unwrap(),
            modified,
            "{kind:?}: the base was not rewritten"
        );
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&o.snapshot.resources),
            "{kind:?}: the no-op's result is the base"
        );
        verify(&loaded.deployment).unwrap();

        // An update that changes one bucket and adds one: written as usual.
        let mut v2 = many(21);
        v2[4] = bucket("b4", &[("size", "2")]);
        let o2 = up(&backend, &cloud, v2.clone(), kind, None).await.unwrap();
        assert_eq!(o2.summary.count(keel::StepKind::Update), 1, "{kind:?}");
        assert_eq!(o2.summary.count(keel::StepKind::Create), 1, "{kind:?}");
        assert!(o2.fsyncs > 0, "{kind:?}");
        let loaded = backend.load(STACK).unwrap();
        assert!(
            json(&loaded.deployment.resources) == json(&o2.snapshot.resources),
            "{kind:?}"
        );
        verify(&loaded.deployment).unwrap();
    }

    // The journal of an update after a no-op, left by a crash before its
    // compaction, replays onto the base the no-op kept. Every save from
    // the 25th on fails: of 27 (17 keeps, 5 begins, 5 ends) at most 17 of
    // the first 24 are keeps, which wait for a record that is written.
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    up(&backend, &cloud, many(20), PersistenceKind::Journal, None)
        .await
        .unwrap();
    // Its groups of three (`b{3k+2}` depends on `b{3k+1}`) in reverse.
    let reordered: Vec<Res> = many(20).chunks(3).rev().flatten().cloned().collect();
    let noop = up(&backend, &cloud, reordered, PersistenceKind::Journal, None)
        .await
        .unwrap();
    assert_eq!((noop.bytes_written, noop.fsyncs), (0, 0));
    let mut v2 = many(20);
    for (i, r) in v2.iter_mut().enumerate().filter(|(i, _)| i % 4 == 1) {
        *r = bucket(&format!("b{i}"), &[("size", "3")]);
    }
    let failed = up(&backend, &cloud, v2, PersistenceKind::Journal, Some(25)).await;
    assert!(failed.is_err(), "the 25th save fails");
    let journal = std::fs::metadata(backend.paths(STACK).journal)
        .unwrap()
        .len();
    assert!(journal > 0, "the crashed update left journal records");
    let loaded = backend.load(STACK).unwrap();
    assert!(loaded.replayed > 0);
    verify(&loaded.deployment).unwrap();
    assert_eq!(names(&loaded.deployment).len(), 22);
    nothing_forgotten(&loaded.deployment, &cloud);
    // And the next update saves from there.
    let again = up(&backend, &cloud, many(20), PersistenceKind::Journal, None)
        .await
        .unwrap();
    let loaded = backend.load(STACK).unwrap();
    assert!(json(&loaded.deployment.resources) == json(&again.snapshot.resources));
}

/// The operations begun and not ended in the journal file as it stands.
fn pending_in_journal(backend: &Backend) -> usize {
    let bytes = std::fs::read(backend.paths(STACK).journal).unwrap_or_default();
    let records = keel::persist::journal::decode(&bytes).unwrap().records;
    let mut open = std::collections::BTreeSet::new();
    for r in &records {
        match &r.entry {
            Entry::Begin { op, .. } => {
                open.insert(*op);
            }
            Entry::Success { op, .. } | Entry::Failure { op, .. } => {
                open.remove(op);
            }
            _ => {}
        }
    }
    open.len()
}

/// With provider calls slower than the quiesce slack (5 ms), the window in
/// use stays at the pool whatever its ceiling: the executor holds at most
/// `parallel` chains that call a provider, so a migration's quiesce waits
/// for one round of calls (P8) and a crash leaves at most `parallel`
/// operations pending. (With the window at its ceiling, all eight begins
/// of the first batch would be in the journal.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_calls_keep_the_window_at_the_pool_whatever_its_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let cloud = SimCloud::new(SimConfig {
        latency: Duration::from_millis(20),
        ..SimConfig::default()
    });
    // Two rounds of two calls end (the latency is observed), then the
    // third round stays in flight.
    cloud.hold_from(4);
    let run = {
        let (path, cloud) = (dir.path().to_owned(), cloud.clone());
        tokio::spawn(async move {
            let buckets = (0..12).map(|i| bucket(&format!("b{i}"), &[])).collect();
            let backend = Backend::new(&path);
            up_with(&backend, &cloud, buckets, PersistenceKind::Journal, 2, 8).await
        })
    };
    let backend = Backend::new(dir.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while cloud.counters().creates < 6 || cloud.counters().in_flight < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the third round of calls never started: {:?}",
            cloud.counters()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // What a wider window would have begun is in the same group commits
    // as the held calls' begins; give any stragglers time to land.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        pending_in_journal(&backend),
        2,
        "only the two held calls are begun"
    );
    assert_eq!(cloud.counters().creates, 6);
    run.abort();
    let _ = run.await;
}
