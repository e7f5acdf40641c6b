//! The built-in migration helpers (`keel::migrate::helpers`) through the
//! real engine and the simulated cloud: `rename`, `retype`, `move_under`
//! and a chain of them reshape a component's state with no create and no
//! delete in the cloud, keep every physical ID, leave the new URNs in
//! state, and are no-ops (nothing committed) on the next update. Also:
//! preview commits in memory only, and a helper's error fails the update
//! with `callback-failed` and leaves the state alone.

mod common;

use common::*;
use keel::engine::Outcome;
use keel::migrate::helpers::{move_under, rename, retype};
use keel::provider::SimConfig;
use keel::source::goal::AliasSpec;
use keel::source::migration::{MigrationCallback, StateMigrations};
use keel::StepKind;

const POLICY: &str = "aws:s3/bucketPolicy:BucketPolicy";

fn migrating(r: Res, callbacks: Vec<MigrationCallback>) -> Res {
    r.with(move |o| o.state_migrations = StateMigrations::new(callbacks))
}

fn policy(name: &str, on: &str) -> Res {
    bucket(name, &[("readers", "*")])
        .ty(POLICY)
        .parent(on)
        .dep(on)
}

/// The physical IDs of the custom resources (providers aside), sorted.
fn sorted_ids(h: &Harness) -> Vec<String> {
    let mut out: Vec<String> = ids(h).into_iter().map(|(_, id)| id).collect();
    out.sort();
    out
}

fn creates_deletes(h: &Harness) -> (u64, u64) {
    let c = h.cloud.counters();
    (c.creates, c.deletes)
}

fn committed(o: &Outcome) -> usize {
    o.migrations.iter().filter(|m| m.committed).count()
}

/// Name -> physical ID of every custom resource (providers aside).
fn ids(h: &Harness) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = h
        .state
        .resources
        .iter()
        .filter(|s| s.custom && !s.ty.is_provider())
        .map(|s| (s.urn.name().to_owned(), s.id.clone()))
        .collect();
    out.sort();
    out
}

/// No step of the outcome created, deleted or replaced anything.
fn no_creates_or_deletes(o: &Outcome) {
    for k in [
        StepKind::Create,
        StepKind::Delete,
        StepKind::CreateReplacement,
        StepKind::DeleteReplaced,
    ] {
        assert_eq!(o.summary.count(k), 0, "{k:?}: {:?}", o.summary.steps);
    }
}

/// Runs v2 on a stack at v1 (which must commit exactly one migration and
/// touch no physical resource), then v2 again (a no-op: nothing
/// committed); returns the first outcome.
async fn migrate(h: &mut Harness, v2: Vec<Res>) -> Outcome {
    let before = creates_deletes(h);
    let first = h.up(v2.clone()).await.unwrap();
    assert_eq!(committed(&first), 1, "{:?}", first.migrations);
    no_creates_or_deletes(&first);
    assert_eq!(creates_deletes(h), before, "nothing created or deleted");
    let again = h.up(v2).await.unwrap();
    assert_eq!(committed(&again), 0, "idempotent: {:?}", again.migrations);
    assert!(again.migrations.iter().all(|m| m.callbacks_called > 0));
    assert_eq!(
        again.summary.steps.len(),
        1,
        "only same steps: {:?}",
        again.summary.steps
    );
    assert_eq!(creates_deletes(h), before);
    first
}

fn rename_v1() -> Vec<Res> {
    vec![
        component("app"),
        bucket("media", &[("name", "media")]).parent("app"),
        policy("media-policy", "media"),
        bucket("logs", &[("name", "logs")]).parent("app"),
        bucket("consumer", &[("name", "consumer")]).dep("media"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_renames_a_child_without_an_alias() {
    let mut h = Harness::new(SimConfig::default());
    let v2 = vec![
        migrating(component("app"), vec![rename("media", "assets")]),
        bucket("assets", &[("name", "media")]).parent("app"),
        policy("media-policy", "assets"),
        bucket("logs", &[("name", "logs")]).parent("app"),
        bucket("consumer", &[("name", "consumer")]).dep("assets"),
    ];
    h.up(rename_v1()).await.unwrap();
    let old_urn = h.urn("media");
    let media_id = h.state_of("media").id.clone();
    let policy_urn = h.urn("media-policy");
    let before = sorted_ids(&h);
    let o = migrate(&mut h, v2).await;
    let m = &o.migrations[0];
    let new_urn = h.urn("assets");
    assert_eq!(
        m.successors.iter().collect::<Vec<_>>(),
        vec![(&old_urn, &new_urn)]
    );
    assert_eq!(new_urn.qualified_type(), old_urn.qualified_type());
    assert!(!h.names().contains(&"media".to_owned()));
    assert_eq!(h.state_of("assets").id, media_id);
    assert_eq!(sorted_ids(&h), before);
    // The child of the renamed resource keeps its URN, its references follow.
    let pol = h.state_of("media-policy");
    assert_eq!(pol.urn, policy_urn);
    assert_eq!(pol.parent, new_urn);
    assert_eq!(pol.dependencies, vec![new_urn.clone()]);
    assert_eq!(h.state_of("consumer").dependencies, vec![new_urn]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retype_changes_the_root_type_and_every_chain_below() {
    const SITE: &str = "shop:web:Site";
    const SITE2: &str = "shop:web:SiteV2";
    let mut h = Harness::new(SimConfig::default());
    let v1 = vec![
        component("site").ty(SITE),
        bucket("bucket", &[("name", "b")]).parent("site"),
        policy("policy", "bucket"),
        component("inner").ty("shop:web:Inner").parent("site"),
        bucket("deep", &[("name", "d")]).parent("inner"),
    ];
    h.up(v1).await.unwrap();
    let before = ids(&h);
    let old_site = h.urn("site");
    let v2 = vec![
        migrating(component("site").ty(SITE2), vec![retype(SITE, SITE2)]).alias(AliasSpec {
            ty: Some(ty(SITE)),
            ..AliasSpec::default()
        }),
        bucket("bucket", &[("name", "b")]).parent("site"),
        policy("policy", "bucket"),
        component("inner").ty("shop:web:Inner").parent("site"),
        bucket("deep", &[("name", "d")]).parent("inner"),
    ];
    let o = migrate(&mut h, v2).await;
    assert_eq!(ids(&h), before, "every physical ID kept");
    let site = h.state_of("site");
    assert_eq!(site.ty.as_str(), SITE2);
    assert_eq!(o.migrations[0].successors[&old_site], site.urn);
    // root, bucket, policy, inner, deep
    assert_eq!(o.migrations[0].successors.len(), 5);
    for name in ["bucket", "policy", "inner", "deep"] {
        let s = h.state_of(name);
        assert!(
            s.urn.qualified_type().starts_with(&format!("{SITE2}$")),
            "{}",
            s.urn
        );
        assert!(!s.urn.qualified_type().contains(&format!("{SITE}$")));
    }
    assert_eq!(
        h.state_of("deep").urn.qualified_type(),
        "shop:web:SiteV2$shop:web:Inner$aws:s3/bucket:Bucket"
    );
    assert_eq!(h.state_of("policy").parent, h.urn("bucket"));
}

fn fold_v1() -> Vec<Res> {
    vec![
        component("app"),
        component("tier").ty("my:app:Tier").parent("app"),
        bucket("queue", &[("name", "q")]).parent("tier"),
        bucket("db", &[("name", "db")]).parent("app"),
        policy("db-policy", "db"),
        bucket("cache", &[("name", "cache")]).parent("app"),
        bucket("monitor", &[("name", "m")]).dep("db").dep("cache"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_folds_two_children_under_a_sub_component() {
    let mut h = Harness::new(SimConfig::default());
    h.up(fold_v1()).await.unwrap();
    let before = ids(&h);
    let old_db = h.urn("db");
    let v2 = vec![
        migrating(component("app"), vec![move_under(&["db", "cache"], "tier")]),
        component("tier").ty("my:app:Tier").parent("app"),
        bucket("queue", &[("name", "q")]).parent("tier"),
        bucket("db", &[("name", "db")]).parent("tier"),
        policy("db-policy", "db"),
        bucket("cache", &[("name", "cache")]).parent("tier"),
        bucket("monitor", &[("name", "m")]).dep("db").dep("cache"),
    ];
    let o = migrate(&mut h, v2).await;
    assert_eq!(ids(&h), before);
    let tier = h.urn("tier");
    let db = h.state_of("db");
    assert_eq!(db.parent, tier);
    assert_eq!(
        db.urn.qualified_type(),
        "my:app:Component$my:app:Tier$aws:s3/bucket:Bucket"
    );
    assert_eq!(o.migrations[0].successors[&old_db], db.urn);
    // db, db-policy and cache changed URN; tier and queue did not.
    assert_eq!(o.migrations[0].successors.len(), 3);
    assert_eq!(h.state_of("cache").parent, tier);
    assert_eq!(h.state_of("db-policy").parent, db.urn);
    assert_eq!(
        h.state_of("monitor").dependencies,
        vec![db.urn.clone(), h.urn("cache")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_helpers_is_one_migration() {
    let mut h = Harness::new(SimConfig::default());
    h.up(fold_v1()).await.unwrap();
    let before = sorted_ids(&h);
    let v2 = vec![
        migrating(
            component("app"),
            vec![
                rename("db", "database"),
                move_under(&["database", "cache"], "tier"),
            ],
        ),
        component("tier").ty("my:app:Tier").parent("app"),
        bucket("queue", &[("name", "q")]).parent("tier"),
        bucket("database", &[("name", "db")]).parent("tier"),
        policy("db-policy", "database"),
        bucket("cache", &[("name", "cache")]).parent("tier"),
        bucket("monitor", &[("name", "m")])
            .dep("database")
            .dep("cache"),
    ];
    let o = migrate(&mut h, v2).await;
    assert_eq!(sorted_ids(&h), before);
    assert_eq!(o.migrations.len(), 1);
    assert_eq!(o.migrations[0].callbacks_called, 2);
    let db = h.state_of("database");
    assert_eq!(db.parent, h.urn("tier"));
    assert!(!h.names().contains(&"db".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_shows_the_migration_and_keeps_nothing() {
    let mut h = Harness::new(SimConfig::default());
    h.up(rename_v1()).await.unwrap();
    let state = h.state.clone();
    let counters = creates_deletes(&h);
    let v2 = vec![
        migrating(component("app"), vec![rename("media", "assets")]),
        bucket("assets", &[("name", "media")]).parent("app"),
        policy("media-policy", "assets"),
        bucket("logs", &[("name", "logs")]).parent("app"),
        bucket("consumer", &[("name", "consumer")]).dep("assets"),
    ];
    let o = h.preview(v2).await.unwrap();
    assert_eq!(committed(&o), 1, "{:?}", o.migrations);
    no_creates_or_deletes(&o);
    assert_eq!(h.state, state);
    assert_eq!(creates_deletes(&h), counters);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_error_fails_the_update_with_callback_failed() {
    let mut h = Harness::new(SimConfig::default());
    h.up(fold_v1()).await.unwrap();
    let state = h.state.clone();
    let v2 = vec![
        migrating(component("app"), vec![move_under(&["db"], "nowhere")]),
        component("tier").ty("my:app:Tier").parent("app"),
        bucket("queue", &[("name", "q")]).parent("tier"),
        bucket("db", &[("name", "db")]).parent("app"),
        policy("db-policy", "db"),
        bucket("cache", &[("name", "cache")]).parent("app"),
        bucket("monitor", &[("name", "m")]).dep("db").dep("cache"),
    ];
    let o = failed(h.up(v2).await);
    assert_eq!(o.summary.rules, vec![keel::migrate::Rule::CallbackFailed]);
    let text = o.summary.errors.join("\n");
    assert!(
        text.contains("`move` helper") && text.contains("nowhere"),
        "{text}"
    );
    assert_eq!(committed(&o), 0);
    assert_eq!(
        h.state.resources.iter().map(|s| &s.urn).collect::<Vec<_>>(),
        state.resources.iter().map(|s| &s.urn).collect::<Vec<_>>()
    );
}
