//! Lifecycle tests through the real actors and the simulated cloud: each
//! asserts the resulting snapshot, the step kinds emitted and the provider
//! calls made (from the cloud's counters and call log).

mod common;

use std::time::Duration;

use common::*;
use keel::provider::sim::{SimCallKind, SimCallPhase};
use keel::provider::SimConfig;
use keel::StepKind::{self, *};

fn steps(o: &keel::engine::Outcome, kind: StepKind) -> usize {
    o.summary.count(kind)
}

/// The call log as `(kind, resource name)` for calls that ended.
fn ended(h: &Harness) -> Vec<(SimCallKind, String)> {
    h.cloud
        .call_log()
        .into_iter()
        .filter(|c| c.phase == SimCallPhase::End)
        .map(|c| (c.kind, c.urn.rsplit("::").next().unwrap_or("").to_owned()))
        .collect()
}

fn replace_on_name() -> SimConfig {
    let mut c = SimConfig::default();
    c.replace_on_change.insert("name".into());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_same_update_delete() {
    let mut h = Harness::new(SimConfig::default());
    let v1 = vec![
        component("app"),
        bucket("a", &[("size", "1")]).parent("app"),
        bucket("b", &[("size", "1")]).parent("app"),
    ];
    let o = h.up(v1.clone()).await.unwrap();
    // Stack, component, default provider, two buckets.
    assert_eq!(steps(&o, Create), 5, "{:?}", o.summary);
    assert_eq!(h.cloud.counters().creates, 2);
    assert_eq!(h.cloud.objects().len(), 2);
    let provider = h.state_of("default");
    assert_eq!(provider.ty.as_str(), "pulumi:providers:aws");
    assert!(h.state_of("a").provider.starts_with(provider.urn.as_str()));
    assert_eq!(h.state_of("a").parent, h.urn("app"));
    assert!(h.state_of("a").urn.qualified_type().starts_with(COMP));

    let o = h.up(v1.clone()).await.unwrap();
    assert_eq!(steps(&o, Same), 5);
    assert_eq!(
        o.summary.steps.len(),
        1,
        "only same steps: {:?}",
        o.summary.steps
    );
    assert_eq!(h.cloud.counters().creates, 2);

    let mut v2 = v1.clone();
    v2[1] = bucket("a", &[("size", "2")]).parent("app");
    let o = h.up(v2.clone()).await.unwrap();
    assert_eq!(steps(&o, Update), 1);
    assert_eq!(h.cloud.counters().updates, 1);
    let id = &h.state_of("a").id;
    assert_eq!(h.cloud.object(id).unwrap().inputs["size"], "2".into());

    let v3 = vec![
        component("app"),
        bucket("a", &[("size", "2")]).parent("app"),
    ];
    let o = h.up(v3).await.unwrap();
    assert_eq!(steps(&o, Delete), 1);
    assert_eq!(h.cloud.counters().deletes, 1);
    assert!(!h.names().contains(&"b".to_owned()));
    assert_eq!(h.cloud.objects().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_create_before_delete_by_default() {
    let mut h = Harness::new(replace_on_name());
    h.up(vec![bucket("a", &[("name", "x")])]).await.unwrap();
    let old_id = h.state_of("a").id.clone();
    h.cloud.clear_call_log();
    let o = h.up(vec![bucket("a", &[("name", "y")])]).await.unwrap();
    assert_eq!(
        (steps(&o, CreateReplacement), steps(&o, DeleteReplaced)),
        (1, 1)
    );
    assert_eq!(
        ended(&h),
        vec![
            (SimCallKind::Create, "a".into()),
            (SimCallKind::Delete, "a".into())
        ]
    );
    assert_ne!(h.state_of("a").id, old_id);
    assert!(h.cloud.object(&old_id).is_none());
    assert_eq!(
        h.state
            .resources
            .iter()
            .filter(|s| s.urn.name() == "a")
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_delete_before_replace_when_asked() {
    let mut h = Harness::new(replace_on_name());
    let dbr = |v: &str| bucket("a", &[("name", v)]).with(|o| o.delete_before_replace = Some(true));
    h.up(vec![dbr("x")]).await.unwrap();
    h.cloud.clear_call_log();
    let o = h.up(vec![dbr("y")]).await.unwrap();
    assert_eq!(
        (steps(&o, DeleteReplaced), steps(&o, CreateReplacement)),
        (1, 1)
    );
    assert_eq!(
        ended(&h),
        vec![
            (SimCallKind::Delete, "a".into()),
            (SimCallKind::Create, "a".into())
        ]
    );
    assert!(!h.state_of("a").pending_replacement);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_before_replace_replaces_dependents_in_order() {
    let mut cfg = replace_on_name();
    cfg.delete_before_replace_types.insert(BUCKET.into());
    let mut h = Harness::new(cfg);
    // `b`'s name comes from `a`, `c`'s from `b`: with `a` gone, their
    // names are unknown, and a name change replaces.
    let prog = |v: &str| {
        vec![
            bucket("a", &[("name", v)]),
            bucket("b", &[("name", "b")]).pdep("name", "a"),
            bucket("c", &[("name", "c")]).pdep("name", "b"),
        ]
    };
    h.up(prog("x")).await.unwrap();
    h.cloud.clear_call_log();
    let o = h.up(prog("y")).await.unwrap();
    // Dependents are deleted (c before b) before a, then everything is created again in order.
    let log = ended(&h);
    assert_eq!(
        log,
        vec![
            (SimCallKind::Delete, "c".into()),
            (SimCallKind::Delete, "b".into()),
            (SimCallKind::Delete, "a".into()),
            (SimCallKind::Create, "a".into()),
            (SimCallKind::Create, "b".into()),
            (SimCallKind::Create, "c".into()),
        ],
        "{:?}",
        o.summary
    );
    assert_eq!(h.cloud.objects().len(), 3);
    assert!(h
        .state
        .resources
        .iter()
        .all(|s| !s.pending_replacement && !s.delete));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protect_blocks_delete_and_replace() {
    let mut h = Harness::new(replace_on_name());
    let p = |v: &str| bucket("a", &[("name", v)]).with(|o| o.protect = true);
    h.up(vec![p("x"), bucket("b", &[])]).await.unwrap();
    let before = h.cloud.counters();

    let e = failed(h.up(vec![p("y"), bucket("b", &[])]).await);
    assert!(
        e.summary
            .errors
            .iter()
            .any(|m| m.contains("protected") && m.contains("::a")),
        "{:?}",
        e.summary
    );
    let e = failed(h.up(vec![bucket("b", &[])]).await);
    assert!(
        e.summary
            .errors
            .iter()
            .any(|m| m.contains("protected") && m.contains("::a")),
        "{:?}",
        e.summary
    );
    let e = failed(h.destroy().await);
    assert!(
        e.summary.errors.iter().any(|m| m.contains("protected")),
        "{:?}",
        e.summary
    );
    let after = h.cloud.counters();
    assert_eq!(
        (after.creates, after.deletes),
        (before.creates, before.deletes)
    );
    assert_eq!(h.cloud.objects().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_rename_and_reparent_without_replacing() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")]),
        bucket("top", &[]),
    ])
    .await
    .unwrap();
    let (old_id, top_id) = (h.state_of("old").id.clone(), h.state_of("top").id.clone());
    let before = h.cloud.counters();
    let o = h
        .up(vec![
            component("app"),
            bucket("new", &[("k", "v")]).alias(alias_name("old")),
            bucket("top", &[]).parent("app").alias(alias_no_parent()),
        ])
        .await
        .unwrap();
    assert_eq!(steps(&o, Same), 5, "{:?}", o.summary);
    assert_eq!(steps(&o, Delete) + steps(&o, Create), 0);
    let after = h.cloud.counters();
    assert_eq!(
        (after.creates, after.deletes),
        (before.creates, before.deletes)
    );
    assert_eq!(h.state_of("new").id, old_id);
    assert_eq!(h.state_of("top").id, top_id);
    assert_eq!(h.state_of("top").parent, h.urn("app"));
    assert!(!h.names().contains(&"old".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_urns_and_claimed_aliases_are_errors() {
    let h = Harness::new(SimConfig::default());
    let twice = |ctx: keel::Context| async move {
        let goal = keel::source::goal::Goal::custom(ty(BUCKET), "a", Default::default());
        ctx.register(goal.clone()).await?;
        // The second registration of `a` is refused: the program sees the error.
        let second = ctx.register(goal).await;
        assert!(
            matches!(second, Err(keel::RegisterError::Plan(_))),
            "{second:?}"
        );
        second?;
        Ok(())
    };
    let e = failed(
        h.engine
            .update(
                h.state.clone(),
                twice,
                Box::new(keel::persist::MemoryPersister::new()),
            )
            .await,
    );
    let text = format!("{:?}", e.summary);
    assert!(text.contains("duplicate resource URN"), "{text}");

    let mut h = Harness::new(SimConfig::default());
    h.up(vec![bucket("a", &[])]).await.unwrap();
    let e = failed(
        h.up(vec![
            bucket("b", &[]).alias(alias_name("a")),
            bucket("c", &[]).dep("b").alias(alias_name("a")),
        ])
        .await,
    );
    let text = format!("{:?}", e.summary);
    assert!(text.contains("already claimed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_with_and_retain_on_delete_skip_provider_deletes() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        bucket("parent", &[]),
        bucket("child", &[])
            .dep("parent")
            .with(|o| o.deleted_with = None),
        bucket("kept", &[]).with(|o| o.retain_on_delete = true),
    ])
    .await
    .unwrap();
    // Set deletedWith to the parent's URN (known after the first run).
    let parent = h.urn("parent");
    h.up(vec![
        bucket("parent", &[]),
        bucket("child", &[])
            .dep("parent")
            .with(move |o| o.deleted_with = Some(parent)),
        bucket("kept", &[]).with(|o| o.retain_on_delete = true),
    ])
    .await
    .unwrap();
    let kept_id = h.state_of("kept").id.clone();
    h.cloud.clear_call_log();
    let o = h.up(vec![]).await.unwrap();
    assert_eq!(
        steps(&o, Delete),
        4,
        "parent, child, kept, provider: {:?}",
        o.summary
    );
    let deleted: Vec<String> = ended(&h).into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        deleted,
        vec!["parent".to_owned()],
        "only the parent's delete reaches the cloud"
    );
    assert!(
        h.cloud.object(&kept_id).is_some(),
        "retained object stays in the cloud"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_deletes_dependents_before_dependencies() {
    let mut h = Harness::new(SimConfig {
        latency: Duration::from_millis(5),
        ..SimConfig::default()
    });
    h.up(vec![
        bucket("a", &[]),
        bucket("b", &[]).dep("a"),
        bucket("c", &[]).dep("b"),
        bucket("d", &[]).dep("a"),
    ])
    .await
    .unwrap();
    h.cloud.clear_call_log();
    let o = h.destroy().await.unwrap();
    assert_eq!(steps(&o, Delete), 6, "{:?}", o.summary);
    assert!(h.state.resources.is_empty());
    assert!(h.cloud.objects().is_empty());
    // Every dependent's delete ended before its dependency's delete started.
    let log = h.cloud.call_log();
    let pos = |name: &str, phase: SimCallPhase| {
        log.iter()
            .position(|c| c.urn.ends_with(&format!("::{name}")) && c.phase == phase)
            .unwrap()
    };
    for (dependent, dependency) in [("b", "a"), ("c", "b"), ("d", "a")] {
        assert!(
            pos(dependent, SimCallPhase::End) < pos(dependency, SimCallPhase::Start),
            "{dependent} must be deleted before {dependency}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_stops_new_work_and_keeps_what_was_created() {
    let mut cfg = SimConfig::default();
    cfg.fail.insert("bad".into());
    let mut h = Harness::new(cfg);
    let e = failed(
        h.up(vec![
            bucket("good", &[]),
            bucket("bad", &[]).dep("good"),
            bucket("after", &[]).dep("bad"),
        ])
        .await,
    );
    assert_eq!(e.summary.failures.len(), 1, "{:?}", e.summary);
    assert!(e.summary.failures[0].urn.as_str().ends_with("::bad"));
    assert_eq!(e.summary.failures[0].kind, Create);
    // The created resource is in the state (which passed integrity in `keep`).
    assert!(h.names().contains(&"good".to_owned()));
    assert!(!h.names().contains(&"after".to_owned()));
    assert_eq!(h.cloud.objects().len(), 1);
    assert!(h.state.pending_operations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_on_error_skips_only_dependents() {
    let mut cfg = SimConfig::default();
    cfg.fail.insert("bad".into());
    let mut h = Harness::with(cfg, |c| c.continue_on_error = true);
    let mut prog = vec![bucket("bad", &[])];
    for i in 0..5 {
        prog.push(bucket(&format!("ok{i}"), &[]));
    }
    prog.push(bucket("dependent", &[]).dep("bad"));
    let e = failed(h.up(prog).await);
    assert_eq!(e.summary.failures.len(), 1);
    assert_eq!(h.cloud.objects().len(), 5);
    assert!(!h.names().contains(&"dependent".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parallel_bound_holds_and_independent_resources_run_concurrently() {
    for parallel in [1usize, 4, 16] {
        let mut h = Harness::with(
            SimConfig {
                latency: Duration::from_millis(20),
                ..SimConfig::default()
            },
            |c| c.parallel = parallel,
        );
        // No create proceeds until `parallel` are in flight at once (a
        // create fails, failing the update, if that never happens), so the
        // update succeeding shows the concurrency whatever the machine's
        // speed; the latency gives a bound overrun time to show.
        h.cloud
            .set_rendezvous(parallel as u64, Duration::from_secs(120));
        let prog: Vec<Res> = (0..48).map(|i| bucket(&format!("b{i}"), &[])).collect();
        h.up(prog)
            .await
            .unwrap_or_else(|e| panic!("parallel = {parallel}: {e}"));
        let c = h.cloud.counters();
        assert_eq!(c.creates, 48, "parallel = {parallel}");
        // Never more than `parallel` in flight.
        assert!(
            c.max_in_flight <= parallel as u64,
            "parallel = {parallel}: {} in flight at once",
            c.max_in_flight
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_reconciles_with_the_cloud() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        bucket("gone", &[]),
        bucket("drift", &[("k", "v")]),
        bucket("dependent", &[]).dep("gone"),
    ])
    .await
    .unwrap();
    let gone = h.state_of("gone").id.clone();
    let drift = h.state_of("drift").id.clone();
    assert!(h.cloud.remove_object(&gone));
    assert!(h.cloud.set_property(&drift, "k", "changed".into()));
    let o = h.refresh().await.unwrap();
    assert_eq!(steps(&o, Refresh), 3);
    assert!(!h.names().contains(&"gone".to_owned()));
    // The dependent's reference to the vanished resource is dropped (the
    // state passed integrity in `keep`).
    assert!(h.state_of("dependent").dependencies.is_empty());
    assert_eq!(h.state_of("drift").outputs["k"], "changed".into());
    assert_eq!(h.cloud.counters().creates, 3, "refresh creates nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_changes_nothing() {
    let mut h = Harness::new(replace_on_name());
    h.up(vec![bucket("a", &[("name", "x")]), bucket("b", &[])])
        .await
        .unwrap();
    let before = h.cloud.counters();
    let state = h.state.clone();
    let o = h
        .preview(vec![bucket("a", &[("name", "y")]), bucket("c", &[])])
        .await
        .unwrap();
    assert_eq!(steps(&o, CreateReplacement), 1);
    assert_eq!(steps(&o, Create), 1);
    assert_eq!(steps(&o, Delete), 1);
    let after = h.cloud.counters();
    assert_eq!(
        (after.creates, after.updates, after.deletes),
        (before.creates, before.updates, before.deletes)
    );
    assert_eq!(h.state, state);
    assert_eq!(h.cloud.objects().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_change_forces_replace() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![bucket("a", &[])]).await.unwrap();
    let old_id = h.state_of("a").id.clone();
    // An explicit provider resource replaces the default one.
    let prog = vec![
        Res {
            name: "explicit".into(),
            ty: "pulumi:providers:aws".into(),
            custom: true,
            inputs: props(&[("region", "eu")]),
            parent: None,
            deps: vec![],
            pdeps: vec![],
            opts: Default::default(),
            alias_names: vec![],
        },
        bucket("a", &[]).dep("explicit"),
    ];
    // The bucket must name the explicit provider: build its reference after
    // the provider is known, in a second step.
    h.up(prog.clone()).await.unwrap();
    let p = h.state_of("explicit");
    let reference = format!("{}::{}", p.urn, p.id);
    let mut prog2 = prog;
    prog2[1] = bucket("a", &[])
        .dep("explicit")
        .with(move |o| o.provider = Some(reference));
    let o = h.up(prog2).await.unwrap();
    assert_eq!(steps(&o, CreateReplacement), 1, "{:?}", o.summary);
    assert_ne!(h.state_of("a").id, old_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_resources_are_never_created_or_deleted() {
    use keel::provider::sim::SimObject;
    let mut h = Harness::new(SimConfig::default());
    h.cloud.insert_object(SimObject {
        id: "vpc-123".into(),
        ty: "aws:ec2/vpc:Vpc".into(),
        name: "default-vpc".into(),
        urn: String::new(),
        inputs: props(&[("cidr", "10.0.0.0/16")]),
        outputs: props(&[("cidr", "10.0.0.0/16")]),
    });
    let engine = h.engine.clone();
    let read = |ctx: keel::Context| async move {
        ctx.read(keel::source::goal::ReadGoal {
            ty: ty("aws:ec2/vpc:Vpc"),
            name: "vpc".into(),
            id: "vpc-123".into(),
            inputs: Default::default(),
            parent: None,
            provider: None,
            depends_on: vec![],
            additional_secret_outputs: vec![],
            version: None,
            plugin_download_url: None,
            ..Default::default()
        })
        .await?;
        Ok(())
    };
    let o = engine
        .update(
            h.state.clone(),
            read,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    assert_eq!(o.summary.count(Read), 1);
    h.state = o.snapshot;
    assert!(h.state_of("vpc").external);
    assert_eq!(h.state_of("vpc").outputs["cidr"], "10.0.0.0/16".into());
    h.destroy().await.unwrap();
    let c = h.cloud.counters();
    assert_eq!((c.creates, c.deletes), (0, 0));
    assert!(h.cloud.object("vpc-123").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_removed_during_delete_before_replace_is_dropped_from_state() {
    let mut cfg = replace_on_name();
    cfg.delete_before_replace_types.insert(BUCKET.into());
    let mut h = Harness::new(cfg);
    h.up(vec![
        bucket("a", &[("name", "x")]),
        bucket("b", &[("name", "b")]).pdep("name", "a"),
    ])
    .await
    .unwrap();
    // `a` is replaced delete-before-replace, which deletes its dependent `b`
    // first; `b` is no longer in the program, so it is dropped from state
    // with no second provider delete.
    let o = h.up(vec![bucket("a", &[("name", "y")])]).await.unwrap();
    assert_eq!(steps(&o, RemovePendingReplace), 1, "{:?}", o.summary);
    assert!(!h.names().contains(&"b".to_owned()));
    assert_eq!(h.cloud.counters().deletes, 2, "a and b, once each");
    assert_eq!(h.cloud.objects().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_every_step_and_the_summary() {
    use keel::events::{EngineEvent, EventSink};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut h = Harness::with(SimConfig::default(), |c| c.events = EventSink::new(tx));
    h.up(vec![bucket("a", &[]), bucket("b", &[]).dep("a")])
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let started = events
        .iter()
        .filter(|e| matches!(e, EngineEvent::StepStarted { .. }))
        .count();
    let finished: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::StepFinished {
                kind, urn, error, ..
            } => Some((*kind, urn.name().to_owned(), error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(started, 4, "stack, provider, a, b");
    assert_eq!(finished.len(), 4);
    assert!(finished.iter().all(|(k, _, e)| *k == Create && e.is_none()));
    let a = finished.iter().position(|(_, n, _)| n == "a").unwrap();
    let b = finished.iter().position(|(_, n, _)| n == "b").unwrap();
    assert!(a < b, "b depends on a");
    match events.last() {
        Some(EngineEvent::Summary(s)) => {
            assert_eq!(s.result, "succeeded");
            assert_eq!(s.count(Create), 4);
            let json = serde_json::to_value(EngineEvent::Summary(s.clone())).unwrap();
            assert_eq!(json["event"], "summary");
            assert_eq!(json["steps"]["create"], 4);
        }
        other => panic!("the last event is not the summary: {other:?}"),
    }
}

/// A no-op's same steps stream their events like any other step's (most
/// are answered by the step generator itself, with no chain on the
/// executor). A same registration that names a dependency still being
/// updated waits for it: its step starts after the update finished, and
/// the state keeps the dependency first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_steps_stream_their_events_and_wait_for_dependencies_in_flight() {
    use keel::events::{EngineEvent, EventSink};
    use keel::{Context, Goal, MemoryPersister};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let config = SimConfig {
        latency: Duration::from_millis(30),
        ..SimConfig::default()
    };
    let mut h = Harness::with(config, |c| c.events = EventSink::new(tx));
    let v1 = || {
        vec![
            bucket("a", &[("size", "1")]),
            bucket("b", &[]).dep("a"),
            bucket("c", &[]),
        ]
    };
    h.up(v1()).await.unwrap();
    while rx.try_recv().is_ok() {}
    let drain = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<EngineEvent>| {
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        events
    };

    let o = h.up(v1()).await.unwrap();
    assert_eq!(o.summary.count(Same), 5, "stack, provider, a, b, c");
    let events = drain(&mut rx);
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::StepStarted { kind, urn, .. } => Some((*kind, urn.name().to_owned())),
            _ => None,
        })
        .collect();
    let finished: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::StepFinished {
                kind, urn, error, ..
            } => Some((*kind, urn.name().to_owned(), error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 5, "{started:?}");
    assert!(started.iter().all(|(k, _)| *k == Same), "{started:?}");
    assert_eq!(finished.len(), 5, "{finished:?}");
    assert!(finished.iter().all(|(k, _, e)| *k == Same && e.is_none()));
    for name in ["a", "b", "c"] {
        assert!(
            started.iter().any(|(_, n)| n == name),
            "{name}: {started:?}"
        );
    }

    // `b` registers (unchanged) while `a`, which it depends on, is still
    // being updated: its same step waits for the update.
    let a_urn = h.urn("a");
    let program = move |ctx: Context| {
        let a_urn = a_urn.clone();
        async move {
            let a = ctx.register(Goal::custom(ty(BUCKET), "a", props(&[("size", "2")])));
            let mut goal = Goal::custom(ty(BUCKET), "b", Default::default());
            goal.options.depends_on.push(a_urn);
            let b = ctx.register(goal);
            let c = ctx.register(Goal::custom(ty(BUCKET), "c", Default::default()));
            let (a, b, c) = tokio::join!(a, b, c);
            a?;
            b?;
            c?;
            Ok(())
        }
    };
    let o = h
        .engine
        .update(h.state.clone(), program, Box::new(MemoryPersister::new()))
        .await
        .unwrap();
    assert_eq!(o.summary.count(Update), 1);
    assert_eq!(o.summary.count(Same), 4, "stack, provider, b, c");
    let events = drain(&mut rx);
    let position = |want: &dyn Fn(&EngineEvent) -> bool| events.iter().position(want).unwrap();
    let a_done = position(
        &|e| matches!(e, EngineEvent::StepFinished { kind: Update, urn, .. } if urn.name() == "a"),
    );
    let b_started = position(
        &|e| matches!(e, EngineEvent::StepStarted { kind: Same, urn, .. } if urn.name() == "b"),
    );
    assert!(a_done < b_started, "b's same step waited for a's update");
    keel::model::integrity::verify(&o.snapshot).unwrap();
    let at = |name: &str| {
        o.snapshot
            .resources
            .iter()
            .position(|s| s.urn.name() == name)
            .unwrap()
    };
    assert!(at("a") < at("b"), "the dependency stays first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_delete_resolved_by_the_next_operation_drops_references_to_it() {
    use keel::model::snapshot::{OperationType, PendingOperation};
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        bucket("a", &[]),
        bucket("b", &[]).dep("a"),
        bucket("c", &[]).parent("a"),
    ])
    .await
    .unwrap();
    // The delete of `a` was interrupted after its object was deleted.
    let a = h.state_of("a").clone();
    assert!(h.cloud.remove_object(&a.id));
    let mut op = PendingOperation::default();
    op.resource = a.clone();
    op.ty = OperationType::Deleting;
    h.state.pending_operations.push(op);
    // The refresh removes `a` and every reference to it (`keep` checks
    // the state's integrity).
    h.refresh().await.unwrap();
    assert_eq!(h.names().iter().filter(|n| *n == "a").count(), 0);
    assert!(h.state_of("b").dependencies.is_empty());
    assert_eq!(h.state_of("c").parent, a.parent);
    h.up(vec![bucket("b", &[]), bucket("c", &[])])
        .await
        .unwrap();
    assert_eq!(h.cloud.objects().len(), 2);
}

/// A delete-before-replace deletes the prior dependents of the replaced
/// resource first. One of them registered after that chain was planned but
/// before the chain deleted it must be created anew once the chain has run:
/// planning it as an update (or same) left a state whose object the chain
/// deleted (found by the lifecycle fuzzer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_registered_while_its_dbr_delete_runs_is_created_anew() {
    use keel::source::goal::{Goal, ResourceOptions};
    use keel::{Context, ProgramError};
    let mut config = replace_on_name();
    config.latency = Duration::from_millis(200);
    let mut h = Harness::new(config);
    let dbr = |o: &mut keel::source::goal::ResourceOptions| o.delete_before_replace = Some(true);
    h.up(vec![
        bucket("a", &[("name", "a1")]).with(dbr),
        bucket("b", &[("name", "b")]).pdep("name", "a"),
        bucket("c", &[("name", "c")]).pdep("name", "b"),
    ])
    .await
    .unwrap();
    let a = h.urn("a");
    let goal = |name: &str, value: &str, deps: Vec<keel::model::Urn>, dbr: bool| Goal {
        ty: ty("aws:s3/bucket:Bucket"),
        name: name.into(),
        custom: true,
        inputs: props(&[("name", value)]),
        options: ResourceOptions {
            property_dependencies: if deps.is_empty() {
                Default::default()
            } else {
                [("name".to_owned(), deps.clone())].into()
            },
            depends_on: deps,
            delete_before_replace: dbr.then_some(true),
            ..ResourceOptions::default()
        },
    };
    let (ga, gb, gc) = (
        goal("a", "a2", vec![], true),
        goal("b", "b", vec![a.clone()], false),
        // `c` no longer depends on `b`, so it registers at once.
        goal("c", "c", vec![], false),
    );
    let program = move |ctx: Context| {
        let (ga, gb, gc) = (ga.clone(), gb.clone(), gc.clone());
        async move {
            // `a`'s chain (delete c, delete b, delete a, create a) is
            // planned first; `c` registers while its delete is in flight.
            let replace = tokio::spawn({
                let ctx = ctx.clone();
                async move { ctx.register(ga).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            ctx.register(gc).await?;
            replace.await.expect("the replace task")?;
            ctx.register(gb).await?;
            Ok::<(), ProgramError>(())
        }
    };
    let o = h
        .engine
        .update(
            h.state.clone(),
            program,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    h.state = o.snapshot.clone();
    keel::model::integrity::verify(&h.state).unwrap();
    // Every custom resource's object exists, and nothing is left pending.
    let ids: Vec<String> = h.cloud.objects().into_iter().map(|o| o.id).collect();
    for s in h
        .state
        .resources
        .iter()
        .filter(|s| s.custom && !s.ty.is_provider())
    {
        assert!(
            !s.pending_replacement,
            "{} is still pending replacement",
            s.urn
        );
        assert!(
            ids.contains(&s.id),
            "{} (id {}) has no object in {ids:?}",
            s.urn,
            s.id
        );
    }
    assert_eq!(ids.len(), 3, "{ids:?}");
}

/// Children inherit their parent's aliases in every kind of program: a
/// component renamed through an alias keeps its children, including one
/// named after it (`shop-logs` under `store`, once `shop`, is
/// `store-logs`), and one renamed too with an alias of its own under the
/// new parent.
#[tokio::test]
async fn children_inherit_a_renamed_parents_alias() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("shop"),
        bucket("shop-logs", &[("k", "logs")]).parent("shop"),
        bucket("cache", &[("k", "cache")]).parent("shop"),
        bucket("shop-db", &[("k", "db")]).parent("shop"),
    ])
    .await
    .unwrap();
    let ids: Vec<String> = ["shop-logs", "cache", "shop-db"]
        .iter()
        .map(|n| h.state_of(n).id.clone())
        .collect();
    let before = h.cloud.counters();
    let o = h
        .up(vec![
            component("store").alias(alias_name("shop")),
            bucket("store-logs", &[("k", "logs")]).parent("store"),
            bucket("cache", &[("k", "cache")]).parent("store"),
            bucket("store-main-db", &[("k", "db")])
                .parent("store")
                .alias(alias_name("store-db")),
        ])
        .await
        .unwrap();
    assert!(
        o.summary.steps.keys().all(|k| *k == Same),
        "{:?}",
        o.summary.steps
    );
    let after = h.cloud.counters();
    assert_eq!(
        (after.creates, after.deletes),
        (before.creates, before.deletes)
    );
    let now: Vec<String> = ["store-logs", "cache", "store-main-db"]
        .iter()
        .map(|n| h.state_of(n).id.clone())
        .collect();
    assert_eq!(now, ids, "every child kept its object");
}

/// A delete-before-replace replaces only the prior dependents that must go
/// (Pulumi's `calculateDependentReplacements`): one linked only by
/// `dependsOn` stays, as does one whose provider finds no replace when the
/// inputs taken from the replaced resource become unknown (or that
/// ignores them); one whose diff against them is a replace (a replace key
/// of the provider, or its own `replaceOnChanges`) goes, and so do its own
/// dependents that must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_before_replace_replaces_only_dependents_that_must_go() {
    let mut cfg = replace_on_name();
    cfg.delete_before_replace_types.insert(BUCKET.into());
    let mut h = Harness::new(cfg);
    let prog = |v: &str| {
        vec![
            bucket("a", &[("name", v)]),
            // dependsOn only, and protected: it stays, so it does not block.
            bucket("b", &[("name", "b")])
                .dep("a")
                .with(|o| o.protect = true),
            // `size` comes from `a`, and a size change is an update.
            bucket("c", &[("name", "c"), ("size", "1")]).pdep("size", "a"),
            // `name` comes from `a`: replaced; `e`'s name comes from `d`.
            bucket("d", &[("name", "d")]).pdep("name", "a"),
            bucket("e", &[("name", "e")]).pdep("name", "d"),
            // dependsOn `d` only: stays.
            bucket("f", &[("name", "f")]).dep("d"),
            // Its `name` comes from `a`, but it ignores name changes.
            bucket("g", &[("name", "g")])
                .pdep("name", "a")
                .with(|o| o.ignore_changes = vec!["name".into()]),
            // `size` comes from `a`, and it replaces on size changes.
            bucket("i", &[("name", "i"), ("size", "1")])
                .pdep("size", "a")
                .with(|o| o.replace_on_changes = vec!["size".into()]),
        ]
    };
    h.up(prog("x")).await.unwrap();
    let ids: Vec<(String, String)> = ["b", "c", "d", "e", "f", "g", "i"]
        .iter()
        .map(|n| ((*n).to_owned(), h.state_of(n).id.clone()))
        .collect();
    h.cloud.clear_call_log();
    let o = h.up(prog("y")).await.unwrap();
    let deleted: Vec<String> = ended(&h)
        .into_iter()
        .filter(|(k, _)| *k == SimCallKind::Delete)
        .map(|(_, n)| n)
        .collect();
    let mut sorted = deleted.clone();
    sorted.sort();
    assert_eq!(sorted, ["a", "d", "e", "i"], "{:?}", o.summary);
    // Dependents go first: e before d, d and i before a.
    let at = |n: &str| deleted.iter().position(|d| d == n).unwrap();
    assert!(
        at("e") < at("d") && at("d") < at("a") && at("i") < at("a"),
        "{deleted:?}"
    );
    for (name, id) in &ids {
        let kept = ["b", "c", "f", "g"].contains(&name.as_str());
        assert_eq!(&h.state_of(name).id == id, kept, "{name}");
    }
    assert_eq!(h.cloud.objects().len(), 8);
    assert!(h
        .state
        .resources
        .iter()
        .all(|s| !s.pending_replacement && !s.delete));
    // Nothing changes on the next run.
    let o = h.up(prog("y")).await.unwrap();
    assert_eq!(o.summary.steps.len(), 1, "only same steps: {:?}", o.summary);
}

/// One resource of [`with_providers`]: name, type, inputs, provider
/// name, version.
type ProvidedRes = (
    &'static str,
    &'static str,
    keel::model::PropertyMap,
    Option<&'static str>,
    Option<&'static str>,
);

/// Registers, in order, the resources `(name, type, inputs, provider
/// name, version)`; a provider name refers to an earlier resource of the
/// list, whose reference (URN and ID) the registration learns from its
/// registration, as an SDK does.
fn with_providers(
    resources: Vec<ProvidedRes>,
) -> impl Fn(keel::Context) -> futures::future::BoxFuture<'static, Result<(), keel::ProgramError>>
       + Send
       + Sync
       + 'static {
    use keel::source::goal::{Goal, ResourceOptions};
    let resources = std::sync::Arc::new(resources);
    move |ctx| {
        let resources = resources.clone();
        Box::pin(async move {
            let mut refs: std::collections::HashMap<&str, String> =
                std::collections::HashMap::new();
            for (name, t, inputs, provider, version) in resources.iter() {
                let options = ResourceOptions {
                    provider: provider.map(|p: &str| refs[p].clone()),
                    version: version.map(str::to_owned),
                    ..ResourceOptions::default()
                };
                let r = ctx
                    .register(Goal {
                        ty: ty(t),
                        name: (*name).to_owned(),
                        custom: true,
                        inputs: inputs.clone(),
                        options,
                    })
                    .await?;
                refs.insert(*name, format!("{}::{}", r.urn, r.id));
            }
            Ok(())
        })
    }
}

async fn run(h: &mut Harness, program: impl keel::Program) -> keel::engine::Outcome {
    let o = h
        .engine
        .update(
            h.state.clone(),
            program,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    keel::model::integrity::verify(&o.snapshot).unwrap();
    h.state = o.snapshot.clone();
    o
}

/// Default providers are named and configured as Pulumi does: with the
/// registration's plugin version, `default_6_0_0` with inputs `version`
/// and `__internal`. A new version is a new default provider; its
/// resources move to it without a replace, because the simulated cloud's
/// providers differ only in version (`diff_config`), and the old one goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_provider_version_moves_resources_without_replacing_them() {
    let mut h = Harness::new(replace_on_name());
    let prog = |v: Option<&'static str>| {
        with_providers(vec![
            ("a", BUCKET, props(&[("name", "a")]), None, v),
            ("b", BUCKET, props(&[("name", "b")]), None, v),
        ])
    };
    run(&mut h, prog(Some("6.0.0"))).await;
    let p = h.state_of("default_6_0_0").clone();
    assert_eq!(
        p.urn.as_str(),
        "urn:pulumi:dev::proj::pulumi:providers:aws::default_6_0_0"
    );
    assert_eq!(p.inputs["version"], "6.0.0".into());
    assert_eq!(
        p.inputs["__internal"],
        keel::model::PropertyValue::Object(Default::default())
    );
    assert!(h.state_of("a").provider.starts_with(p.urn.as_str()));
    let (a, b) = (h.state_of("a").id.clone(), h.state_of("b").id.clone());

    let preview = h
        .engine
        .preview(h.state.clone(), prog(Some("6.1.0")))
        .await
        .unwrap();
    assert_eq!(
        (preview.summary.count(Create), preview.summary.count(Delete)),
        (1, 1),
        "only the providers: {:?}",
        preview.summary
    );
    assert_eq!(preview.summary.count(CreateReplacement), 0);
    let o = run(&mut h, prog(Some("6.1.0"))).await;
    assert_eq!(o.summary.count(CreateReplacement), 0, "{:?}", o.summary);
    assert_eq!(
        (h.state_of("a").id.clone(), h.state_of("b").id.clone()),
        (a, b)
    );
    let p2 = h.state_of("default_6_1_0").clone();
    assert!(h.state_of("a").provider.starts_with(p2.urn.as_str()));
    assert!(!h.names().contains(&"default_6_0_0".to_owned()));
    assert_eq!(h.cloud.counters().creates, 2, "no object created again");
    // Back to no version: the `default` provider, still nothing replaced.
    let o = run(&mut h, prog(None)).await;
    assert_eq!(o.summary.count(CreateReplacement), 0, "{:?}", o.summary);
    assert!(h.names().contains(&"default".to_owned()));
    // A version that is not a semantic version is refused, naming it.
    let e = failed(h.engine.preview(h.state.clone(), prog(Some("v1"))).await);
    assert!(
        e.summary.errors.iter().any(|m| m.contains("`v1`")),
        "{:?}",
        e.summary
    );
}

/// A resource moving to an explicit provider configured like its default
/// provider is not replaced; moving to one configured otherwise is. A
/// provider resource whose configuration changes is replaced when its
/// provider's `diff_config` says so, and its resources with it; a version
/// change alone is nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_changes_replace_only_when_the_configuration_says_so() {
    let mut h = Harness::new(SimConfig::default());
    const P: &str = "pulumi:providers:aws";
    run(
        &mut h,
        with_providers(vec![("a", BUCKET, props(&[]), None, None)]),
    )
    .await;
    let id = h.state_of("a").id.clone();
    // Default provider (no configuration) -> explicit provider with none.
    let explicit = |config: &[(&str, &str)]| {
        with_providers(vec![
            ("p", P, props(config), None, None),
            ("a", BUCKET, props(&[]), Some("p"), None),
        ])
    };
    let o = run(&mut h, explicit(&[])).await;
    assert_eq!(o.summary.count(CreateReplacement), 0, "{:?}", o.summary);
    assert_eq!(h.state_of("a").id, id);
    assert!(h.state_of("a").provider.contains("::p::"));
    // The provider's version changes: same provider, same resource.
    let o = run(&mut h, explicit(&[("version", "2.0.0")])).await;
    assert_eq!(o.summary.count(CreateReplacement), 0, "{:?}", o.summary);
    assert_eq!(h.state_of("a").id, id);
    // Its region changes: the simulated cloud replaces the provider, and
    // so every resource it manages.
    let p_id = h.state_of("p").id.clone();
    let o = run(&mut h, explicit(&[("version", "2.0.0"), ("region", "eu")])).await;
    assert_eq!(o.summary.count(CreateReplacement), 2, "{:?}", o.summary);
    assert_ne!(h.state_of("p").id, p_id);
    assert_ne!(h.state_of("a").id, id);
    assert_eq!(h.cloud.objects().len(), 1);
    assert!(h.state_of("a").provider.ends_with(&h.state_of("p").id));
}

/// The package's configuration (`aws:region`) is the default provider's:
/// changing it replaces the default provider and its resources (the
/// simulated cloud's providers manage different objects per region).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_config_configures_default_providers() {
    let region = |r: &str| {
        let r = r.to_owned();
        move |c: &mut keel::engine::EngineConfig| {
            c.package_config.insert(
                "aws:region".into(),
                keel::model::PropertyValue::from(r.as_str()),
            );
            c.package_config
                .insert("gcp:project".into(), keel::model::PropertyValue::from("p"));
        }
    };
    let mut h = Harness::with(SimConfig::default(), region("us"));
    let prog = || with_providers(vec![("a", BUCKET, props(&[]), None, Some("6.0.0"))]);
    run(&mut h, prog()).await;
    let p = h.state_of("default_6_0_0").clone();
    assert_eq!(p.inputs["region"], "us".into());
    assert!(!p.inputs.contains_key("project"));
    let o = run(&mut h, prog()).await;
    assert_eq!(o.summary.steps.len(), 1, "only same steps: {:?}", o.summary);
    // The same stack and cloud, configured for another region.
    let mut config = h.engine.config().clone();
    region("eu")(&mut config);
    h.engine = keel::engine::Engine::new(
        config,
        keel::provider::ProviderRegistry::simulated(h.cloud.clone()),
    );
    let id = h.state_of("a").id.clone();
    let o = run(&mut h, prog()).await;
    assert_eq!(
        o.summary.count(CreateReplacement),
        2,
        "provider and bucket: {:?}",
        o.summary
    );
    assert_ne!(h.state_of("a").id, id);
    assert_eq!(h.cloud.objects().len(), 1);
    assert_eq!(h.state_of("default_6_0_0").inputs["region"], "eu".into());
}

/// The engine's ambient inputs are injected: with a fixed clock and counting
/// IDs, two runs of the same program on fresh clouds write the same
/// deployment, byte for byte, stamped with the injected time.
#[tokio::test]
async fn injected_clock_and_ids_make_a_deployment_reproducible() {
    use keel::model::ambient::{SharedClock, SharedIds};
    use keel::{Context, Deployment, Engine, EngineConfig, Goal, MemoryPersister};
    use keel::{ProviderRegistry, TypeToken};

    const NOW: &str = "2026-01-02T03:04:05Z";
    async fn once() -> keel::Deployment {
        let cloud = keel::provider::SimCloud::new(SimConfig::default());
        let config = EngineConfig {
            clock: SharedClock::fixed(NOW),
            ids: SharedIds::counting(),
            ..EngineConfig::default()
        };
        let engine = Engine::new(config, ProviderRegistry::simulated(cloud));
        let program = |ctx: Context| async move {
            let bucket = TypeToken::parse("aws:s3/bucket:Bucket")?;
            let logs = ctx
                .register(Goal::custom(bucket.clone(), "logs", Default::default()))
                .await?;
            let mut goal = Goal::custom(bucket, "archive", Default::default());
            goal.options.depends_on.push(logs.urn);
            ctx.register(goal).await?;
            Ok(())
        };
        engine
            .update(
                Deployment::default(),
                program,
                Box::new(MemoryPersister::new()),
            )
            .await
            .expect("the update succeeds")
            .snapshot
    }
    let (a, b) = (once().await, once().await);
    let custom: Vec<_> = a.resources.iter().filter(|s| s.custom).collect();
    assert_eq!(custom.len(), 3, "the default provider and two buckets");
    for s in custom.iter().filter(|s| !s.ty.is_provider()) {
        assert_eq!(s.created, NOW, "{} is stamped by the injected clock", s.urn);
        assert_eq!(s.modified, NOW, "{}", s.urn);
    }
    let provider = custom
        .iter()
        .find(|s| s.ty.is_provider())
        .expect("a default provider");
    assert_eq!(
        provider.id,
        SharedIds::counting().next_id(&provider.urn),
        "the default provider's ID comes from the injected source"
    );
    assert_eq!(a.manifest.time, NOW);
    assert_eq!(
        serde_json::to_string(&a).expect("encodes"),
        serde_json::to_string(&b).expect("encodes"),
        "the same inputs write the same deployment"
    );
}
