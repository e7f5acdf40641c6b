//! Operation controls through the real engine: `--target` (with
//! dependents), `--exclude` (with dependents) and `--replace`, asserting the
//! steps emitted and the provider calls made.

mod common;

use common::*;
use keel::plan::generator::UpdateOptions;
use keel::plan::step::StepKind::*;
use keel::provider::SimConfig;

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
