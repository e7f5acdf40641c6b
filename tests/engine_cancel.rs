//! Dropping an operation's future stops the operation: its actors stop and
//! its program task is aborted (`Engine::update`'s `# Cancel safety`). Its
//! own test binary, so no other engine's actors share the registry.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel::provider::SimConfig;
use keel::source::goal::Goal;
use keel::{Context, ProgramError};

/// Sets its flag when dropped: the program's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn keel_actors() -> Vec<String> {
    ractor::registry::registered()
        .into_iter()
        .filter(|n| n.starts_with("keel-"))
        .collect()
}

/// Waits (bounded) for `cond`; false if it never held.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_update_stops_its_actors_and_its_program() {
    let h = Harness::new(SimConfig {
        latency: Duration::from_millis(50),
        ..SimConfig::default()
    });
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let program = move |ctx: Context| {
        let flag = flag.clone();
        async move {
            let _guard = Dropped(flag);
            ctx.register(Goal::custom(ty(BUCKET), "first", props(&[("k", "v")])))
                .await?;
            // A program that never finishes on its own.
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), ProgramError>(())
        }
    };
    let update = h.engine.update(
        h.state.clone(),
        program,
        Box::new(keel::persist::MemoryPersister::new()),
    );
    // Run it until its first resource exists, then drop it.
    let cloud = h.cloud.clone();
    tokio::select! {
        r = update => panic!("the update ended on its own: {:?}", r.map(|o| o.summary)),
        _ = async {
            while cloud.counters().creates == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } => {}
    }
    assert!(
        eventually(|| dropped.load(Ordering::SeqCst)).await,
        "the program's task outlived the operation"
    );
    assert!(
        eventually(|| keel_actors().is_empty()).await,
        "actors outlived the operation: {:?}",
        keel_actors()
    );
}
