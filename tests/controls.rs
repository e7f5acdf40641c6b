//! Operation controls through the real engine: `--target` (with
//! dependents), `--exclude` (with dependents) and `--replace`, asserting the
//! steps emitted and the provider calls made.

mod common;

use common::*;
use keel::provider::SimConfig;
use keel::StepKind::*;
use keel::UpdateOptions;

fn prog(size: &str) -> Vec<Res> {
    vec![
        bucket("a", &[("size", size)]),
        bucket("b", &[("size", size)]).dep("a"),
        bucket("c", &[("size", size)]),
    ]
}

/// Runs an update of `resources` with `options`, keeping the state.
async fn up_with(
    h: &mut Harness,
    options: UpdateOptions,
    resources: Vec<Res>,
) -> keel::engine::Outcome {
    let saved = h.engine.clone();
    h.engine = saved.with_options(options);
    let r = h.up(resources).await;
    h.engine = saved;
    r.unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targeted_update_touches_only_its_targets() {
    let mut h = Harness::new(SimConfig::default());
    h.up(prog("1")).await.unwrap();
    let a = h.urn("a");
    let o = up_with(
        &mut h,
        UpdateOptions {
            targets: vec![a.clone()],
            ..Default::default()
        },
        prog("2"),
    )
    .await;
    assert_eq!(o.summary.count(Update), 1, "{:?}", o.summary);
    assert_eq!(h.cloud.counters().updates, 1);
    assert_eq!(h.state_of("a").inputs["size"], "2".into());
    assert_eq!(
        h.state_of("b").inputs["size"],
        "1".into(),
        "untargeted: prior state kept"
    );
    assert_eq!(h.state_of("c").inputs["size"], "1".into());

    // With dependents, b (which depends on a) changes too; c does not.
    let o = up_with(
        &mut h,
        UpdateOptions {
            targets: vec![a],
            target_dependents: true,
            ..Default::default()
        },
        prog("3"),
    )
    .await;
    assert_eq!(o.summary.count(Update), 2, "{:?}", o.summary);
    assert_eq!(h.state_of("b").inputs["size"], "3".into());
    assert_eq!(h.state_of("c").inputs["size"], "1".into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untargeted_resources_are_neither_created_nor_deleted() {
    let mut h = Harness::new(SimConfig::default());
    h.up(prog("1")).await.unwrap();
    let c = h.urn("c");
    // `new` is not targeted: its create is skipped; `c` (removed from the
    // program) is not targeted: it is kept.
    let mut v2 = vec![
        bucket("a", &[("size", "1")]),
        bucket("b", &[("size", "1")]).dep("a"),
    ];
    v2.push(bucket("new", &[]));
    let creates = h.cloud.counters().creates;
    let a = h.urn("a");
    let o = up_with(
        &mut h,
        UpdateOptions {
            targets: vec![a],
            ..Default::default()
        },
        v2.clone(),
    )
    .await;
    assert_eq!(o.summary.count(Delete), 0);
    assert_eq!(h.cloud.counters().creates, creates);
    assert!(h.names().contains(&"c".to_owned()));
    assert!(!h.names().contains(&"new".to_owned()));
    // Targeting `c` deletes it.
    let o = up_with(
        &mut h,
        UpdateOptions {
            targets: vec![c],
            ..Default::default()
        },
        v2,
    )
    .await;
    assert_eq!(o.summary.count(Delete), 1);
    assert!(!h.names().contains(&"c".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targeted_resource_needing_an_untargeted_new_one_is_an_error() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![bucket("a", &[])]).await.unwrap();
    let target =
        keel::model::Urn::parse("urn:pulumi:dev::proj::aws:s3/bucket:Bucket::needs").unwrap();
    h.engine = h.engine.with_options(UpdateOptions {
        targets: vec![target],
        ..Default::default()
    });
    let e = failed(
        h.up(vec![
            bucket("a", &[]),
            bucket("dep", &[]),
            bucket("needs", &[]).dep("dep"),
        ])
        .await,
    );
    let text = format!("{:?}", e.summary);
    assert!(
        text.contains("not targeted and has no prior state"),
        "{text}"
    );
    assert_eq!(h.cloud.counters().creates, 1, "nothing new was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_leaves_excluded_resources_untouched() {
    let mut h = Harness::new(SimConfig::default());
    h.up(prog("1")).await.unwrap();
    let a = h.urn("a");
    let o = up_with(
        &mut h,
        UpdateOptions {
            excludes: vec![a.clone()],
            ..Default::default()
        },
        prog("2"),
    )
    .await;
    assert_eq!(o.summary.count(Update), 2, "b and c: {:?}", o.summary);
    assert_eq!(h.state_of("a").inputs["size"], "1".into());
    let o = up_with(
        &mut h,
        UpdateOptions {
            excludes: vec![a],
            exclude_dependents: true,
            ..Default::default()
        },
        prog("3"),
    )
    .await;
    assert_eq!(o.summary.count(Update), 1, "only c: {:?}", o.summary);
    assert_eq!(h.state_of("b").inputs["size"], "2".into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_forces_a_replace() {
    let mut h = Harness::new(SimConfig::default());
    h.up(prog("1")).await.unwrap();
    let old = h.state_of("c").id.clone();
    let c = h.urn("c");
    let o = up_with(
        &mut h,
        UpdateOptions {
            replaces: vec![c],
            ..Default::default()
        },
        prog("1"),
    )
    .await;
    assert_eq!(
        (
            o.summary.count(CreateReplacement),
            o.summary.count(DeleteReplaced)
        ),
        (1, 1)
    );
    assert_ne!(h.state_of("c").id, old);
    assert!(h.cloud.object(&old).is_none());
}

fn existing_object(h: &Harness, id: &str, size: &str) {
    h.cloud.insert_object(keel::provider::sim::SimObject {
        id: id.into(),
        ty: BUCKET.into(),
        name: "legacy".into(),
        urn: String::new(),
        inputs: props(&[("size", size)]),
        outputs: props(&[("size", size), ("arn", "arn:legacy")]),
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_adopts_an_existing_object_and_never_creates_it() {
    let mut h = Harness::new(SimConfig::default());
    existing_object(&h, "legacy-1", "9");
    let imp = |size: &str| {
        bucket("legacy", &[("size", size)]).with(|o| o.import = Some("legacy-1".into()))
    };
    let o = h.up(vec![imp("9")]).await.unwrap();
    assert_eq!(o.summary.count(Import), 1, "{:?}", o.summary);
    let c = h.cloud.counters();
    assert_eq!((c.creates, c.deletes), (0, 0));
    let s = h.state_of("legacy");
    assert_eq!(
        (s.id.as_str(), s.rare.import_id.as_str()),
        ("legacy-1", "legacy-1")
    );
    assert_eq!(s.outputs["arn"], "arn:legacy".into());
    // The next update is a same step.
    let o = h.up(vec![imp("9")]).await.unwrap();
    assert_eq!(o.summary.count(Same), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_whose_inputs_differ_is_an_error() {
    let mut h = Harness::new(SimConfig::default());
    existing_object(&h, "legacy-1", "9");
    let e = failed(
        h.up(vec![
            bucket("legacy", &[("size", "1")]).with(|o| o.import = Some("legacy-1".into()))
        ])
        .await,
    );
    let f = &e.summary.failures[0];
    assert_eq!(f.kind, Import);
    assert!(
        f.message
            .contains("`size` is \"9\" in the cloud, \"1\" in the program"),
        "{}",
        f.message
    );
    assert_eq!(h.cloud.counters().creates, 0);
    assert!(!h.names().contains(&"legacy".to_owned()));
    assert!(h.cloud.object("legacy-1").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_order() {
    use keel::source::hooks::{HookArgs, ResourceHooks};
    use std::sync::{Arc, Mutex};
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let rec = |tag: &'static str, log: &Arc<Mutex<Vec<String>>>| {
        let log = log.clone();
        Arc::new(move |a: &HookArgs<'_>| {
            log.lock().unwrap().push(format!("{tag} {}", a.urn.name()));
            Ok(())
        }) as keel::source::hooks::Hook
    };
    let hooks = Arc::new(ResourceHooks {
        before_create: vec![rec("before-create-1", &log), rec("before-create-2", &log)],
        after_create: vec![rec("after-create", &log)],
        before_update: vec![rec("before-update", &log)],
        after_update: vec![rec("after-update", &log)],
        ..ResourceHooks::default()
    });

    let mut h = Harness::new(SimConfig::default());
    let res = |size: &str| {
        let hooks = hooks.clone();
        bucket("a", &[("size", size)]).with(move |o| o.hooks = hooks)
    };
    h.up(vec![res("1")]).await.unwrap();
    h.up(vec![res("2")]).await.unwrap();
    let got = log.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            "before-create-1 a",
            "before-create-2 a",
            "after-create a",
            "before-update a",
            "after-update a"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_hook_asking_for_a_retry_retries() {
    use keel::source::hooks::{HookArgs, ResourceHooks};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    // Every create of `flaky` fails; the error hook asks for a retry until
    // the fourth attempt.
    let mut cfg = SimConfig::default();
    cfg.fail.insert("flaky".into());
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let hooks = Arc::new(ResourceHooks {
        on_error: vec![Arc::new(move |a: &HookArgs<'_>| {
            seen.store(a.attempt, Ordering::SeqCst);
            a.attempt < 4
        })],
        ..ResourceHooks::default()
    });
    let mut h = Harness::new(cfg);
    let e = failed(
        h.up(vec![bucket("flaky", &[]).with(move |o| o.hooks = hooks)])
            .await,
    );
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        4,
        "retried until the hook said stop"
    );
    assert_eq!(
        h.cloud.counters().creates,
        4,
        "four create attempts reached the cloud"
    );
    assert!(e.summary.failures[0].message.contains("injected failure"));
    assert!(h.state.pending_operations.is_empty(), "every attempt ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_plan_runs_when_followed_and_stops_a_deviating_program() {
    use std::sync::Arc;
    let mut h = Harness::new(SimConfig::default());
    h.up(prog("1")).await.unwrap();
    let saved = h.engine.clone();
    // Preview the change and save the plan.
    h.engine = saved.with_options(UpdateOptions {
        generate_plan: true,
        ..Default::default()
    });
    let preview = h
        .preview(vec![
            bucket("a", &[("size", "2")]),
            bucket("b", &[("size", "1")]).dep("a"),
        ])
        .await
        .unwrap();
    let plan = Arc::new(preview.plan.expect("the preview recorded a plan"));
    assert!(plan.deletes.iter().any(|u| u.name() == "c"), "{plan:?}");
    let text = String::from_utf8(plan.to_vec_pretty()).unwrap();
    let plan = Arc::new(keel::plan::saved::SavedPlan::from_slice(text.as_bytes()).unwrap());
    let apply = UpdateOptions {
        apply_plan: true,
        plan: Some(plan),
        ..Default::default()
    };

    // A program that deviates (another size for `a`) fails before any
    // provider change for `a`.
    h.engine = saved.with_options(apply.clone());
    let before = h.cloud.counters();
    let e = failed(
        h.up(vec![
            bucket("a", &[("size", "3")]),
            bucket("b", &[("size", "1")]).dep("a"),
        ])
        .await,
    );
    let text = format!("{:?}", e.summary);
    assert!(
        text.contains("deviates from the plan") && text.contains("`size`"),
        "{text}"
    );
    let after = h.cloud.counters();
    assert_eq!(
        (after.updates, after.deletes),
        (before.updates, before.deletes)
    );

    // The previewed program runs under the plan.
    let o = h
        .up(vec![
            bucket("a", &[("size", "2")]),
            bucket("b", &[("size", "1")]).dep("a"),
        ])
        .await
        .unwrap();
    assert_eq!(
        (o.summary.count(Update), o.summary.count(Delete)),
        (1, 1),
        "{:?}",
        o.summary
    );
    h.engine = saved;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_get_stack_builtin_answers_and_unknown_functions_fail() {
    let h = Harness::new(SimConfig::default());
    let program = |ctx: keel::Context| async move {
        let out = ctx
            .invoke("pulumi:pulumi:getStack", Default::default())
            .await?;
        assert_eq!(out["stack"], "dev".into());
        assert_eq!(out["project"], "proj".into());
        let unknown = ctx.invoke("aws:index:getRegion", Default::default()).await;
        assert!(unknown
            .unwrap_err()
            .to_string()
            .contains("unknown function `aws:index:getRegion`"));
        Ok(())
    };
    h.engine
        .update(
            h.state.clone(),
            program,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_changes_replace_on_changes_and_custom_timeouts() {
    let mut h = Harness::new(SimConfig {
        latency: std::time::Duration::from_millis(30),
        ..SimConfig::default()
    });
    let r = |tag: &str, name: &str| {
        bucket("a", &[("tag", tag), ("name", name)]).with(|o| {
            o.ignore_changes = vec!["tag".into()];
            o.replace_on_changes = vec!["name".into()];
        })
    };
    h.up(vec![r("x", "n1")]).await.unwrap();
    // A change of an ignored key is no change.
    let o = h.up(vec![r("y", "n1")]).await.unwrap();
    assert_eq!(o.summary.count(Same), 3, "{:?}", o.summary);
    assert_eq!(h.cloud.counters().updates, 0);
    // A change of a replace-on-change key replaces.
    let o = h.up(vec![r("y", "n2")]).await.unwrap();
    assert_eq!(o.summary.count(CreateReplacement), 1, "{:?}", o.summary);

    // customTimeouts reach the provider: a create slower than its timeout fails.
    let slow = bucket("slow", &[]).with(|o| {
        let mut t = keel::model::state::CustomTimeouts::default();
        t.create = keel::model::state::Seconds(0.005);
        o.custom_timeouts = Some(t);
    });
    let e = failed(h.up(vec![r("y", "n2"), slow]).await);
    assert!(
        e.summary.failures[0].message.contains("timed out"),
        "{:?}",
        e.summary
    );
}

fn json_inputs(v: serde_json::Value) -> keel::model::PropertyMap {
    match serde_json::from_value(v).unwrap() {
        keel::model::PropertyValue::Object(m) => m,
        other => panic!("{other:?}"),
    }
}

fn tagged(name: &str, inputs: serde_json::Value, ignore: &[&str], replace: &[&str]) -> Res {
    let mut r = bucket(name, &[]);
    r.inputs = json_inputs(inputs);
    let (ignore, replace): (Vec<String>, Vec<String>) = (
        ignore.iter().map(|s| (*s).to_owned()).collect(),
        replace.iter().map(|s| (*s).to_owned()).collect(),
    );
    r.with(move |o| {
        o.ignore_changes = ignore;
        o.replace_on_changes = replace;
    })
}

/// `ignoreChanges` and `replaceOnChanges` with Pulumi's property paths,
/// applied by the engine for every provider: an ignored value keeps its
/// old value in what the provider is sent and in state; a change under a
/// replace-on-change path replaces, whatever the provider said; a
/// replacement is created from the program's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_and_replace_on_changes_take_property_paths() {
    use serde_json::json;
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let mut h = Harness::with(SimConfig::default(), |c| {
        c.events = keel::events::EventSink::new(tx);
    });
    let v = |name: &str, env: &str, ports: serde_json::Value| {
        vec![
            tagged(
                "a",
                json!({"tags": {"Name": name, "env": env}, "ports": ports}),
                &["tags.Name", "ports[*]"],
                &[],
            ),
            tagged(
                "b",
                json!({"tags": {"Name": name, "env": env}, "size": env}),
                &[],
                &["tags[\"Name\"]"],
            ),
        ]
    };
    h.up(v("n1", "e1", json!([1, 2]))).await.unwrap();
    let (a, b) = (h.state_of("a").id.clone(), h.state_of("b").id.clone());

    // `a` ignores its Name tag and its ports: nothing changes for it; a
    // Name change replaces `b`.
    let o = h.up(v("n2", "e1", json!([3, 4]))).await.unwrap();
    assert_eq!(o.summary.count(CreateReplacement), 1, "{:?}", o.summary);
    assert_eq!(o.summary.count(Update), 0, "{:?}", o.summary);
    assert_eq!(h.state_of("a").id, a);
    assert_ne!(h.state_of("b").id, b);
    assert_eq!(
        h.state_of("a").inputs,
        json_inputs(json!({"tags": {"Name": "n1", "env": "e1"}, "ports": [1, 2]})),
        "state keeps the old values"
    );
    // Another tag changes: an update of both, `a` still with its old Name
    // (in state and in the cloud).
    let b = h.state_of("b").id.clone();
    let o = h.up(v("n2", "e2", json!([3, 4]))).await.unwrap();
    assert_eq!(o.summary.count(Update), 2, "{:?}", o.summary);
    assert_eq!(h.state_of("b").id, b);
    let want = json_inputs(json!({"tags": {"Name": "n1", "env": "e2"}, "ports": [1, 2]}));
    assert_eq!(h.state_of("a").inputs, want);
    assert_eq!(h.cloud.object(&a).unwrap().inputs, want);
    // A port added cannot be ignored (the array would change length): the
    // ports it had keep their old values, the new one is the program's,
    // with a warning naming the path.
    let o = h.up(v("n2", "e2", json!([3, 4, 5]))).await.unwrap();
    assert_eq!(o.summary.count(Update), 1, "{:?}", o.summary);
    assert_eq!(
        h.state_of("a").inputs["ports"],
        json_inputs(json!({"p": [1, 2, 5]}))["p"]
    );
    let mut warned = false;
    while let Ok(e) = events.try_recv() {
        if let keel::events::EngineEvent::Diagnostic {
            severity,
            urn,
            message,
        } = e
        {
            warned |= severity == "warning"
                && urn.as_ref() == Some(&h.urn("a"))
                && message.contains("`ports[*]`");
        }
    }
    assert!(warned, "a warning names the path");

    // A replacement (here forced) takes the program's values, ignored or not.
    let replace = UpdateOptions {
        replaces: vec![h.urn("a")],
        ..UpdateOptions::default()
    };
    let o = up_with(&mut h, replace, v("n3", "e2", json!([3, 4, 5]))).await;
    assert_eq!(o.summary.count(CreateReplacement), 2, "{:?}", o.summary);
    assert_eq!(
        h.state_of("a").inputs["tags"],
        json_inputs(json!({"t": {"Name": "n3", "env": "e2"}}))["t"]
    );
}

/// A path that does not parse fails the registration with a typed error
/// naming the resource, the option and the path; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_property_path_is_an_error_naming_the_resource() {
    use serde_json::json;
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![tagged("a", json!({"x": 1}), &[], &[])])
        .await
        .unwrap();
    let before = h.state.clone();
    let open = "tags".to_owned() + "[";
    let cases: Vec<(Vec<&str>, Vec<&str>, &str, &str)> = vec![
        (vec![open.as_str()], vec![], "ignoreChanges", open.as_str()),
        (vec![], vec!["a..b"], "replaceOnChanges", "a..b"),
        (vec!["ok", "x[-1]"], vec![], "ignoreChanges", "x[-1]"),
    ];
    for (ignore, replace, option, path) in cases {
        let (ignore, replace) = (&ignore[..], &replace[..]);
        let e = failed(
            h.up(vec![tagged("a", json!({"x": 2}), ignore, replace)])
                .await,
        );
        let message = e.summary.errors.join("\n");
        for needle in [h.urn("a").as_str(), option, &format!("`{path}`")] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        // Every resource and pending operation as before (the manifest's
        // time is the run's own).
        assert_eq!(h.state.resources, before.resources);
        assert_eq!(h.state.pending_operations, before.pending_operations);
        assert_eq!(h.cloud.counters().updates, 0);
    }
}

/// An operation reports the time its provider calls took, summed: with
/// 5 ms per simulated operation, three creates take at least 15 ms, a
/// no-op none, and an update of one at least 5 ms (lower bounds only: the
/// simulated latency is a floor, a loaded machine adds to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_reports_its_provider_time() {
    let mut h = Harness::new(SimConfig {
        latency: std::time::Duration::from_millis(5),
        ..SimConfig::default()
    });
    let created = h.up(prog("1")).await.unwrap();
    assert!(
        created.provider_call_ms >= 15.0,
        "three 5 ms creates: {} ms",
        created.provider_call_ms
    );
    let noop = h.up(prog("1")).await.unwrap();
    assert_eq!(noop.provider_call_ms, 0.0, "a no-op calls no provider");
    let mut one = prog("1");
    one[2] = bucket("c", &[("size", "2")]);
    let updated = h.up(one).await.unwrap();
    assert_eq!(updated.summary.count(Update), 1);
    assert!(
        updated.provider_call_ms >= 5.0,
        "one 5 ms update: {} ms",
        updated.provider_call_ms
    );
}
