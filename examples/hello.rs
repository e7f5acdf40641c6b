//! The smallest embedded program: one bucket on the simulated cloud,
//! created by an update, then left alone by a second update.
//!
//! `cargo run --example hello`

use keel::engine::{Engine, EngineConfig};
use keel::model::{Deployment, TypeToken};
use keel::persist::MemoryPersister;
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
use keel::source::goal::Goal;
use keel::Context;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cloud = SimCloud::new(SimConfig::default());
    let engine = Engine::new(
        EngineConfig::default(),
        ProviderRegistry::simulated(cloud.clone()),
    );
    let program = |ctx: Context| async move {
        let bucket = TypeToken::parse("aws:s3/bucket:Bucket")?;
        let logs = ctx
            .register(Goal::custom(bucket, "logs", Default::default()))
            .await?;
        println!("registered {} (id {})", logs.urn, logs.id);
        Ok(())
    };
    let mut state = Deployment::default();
    for run in 1..=2 {
        let outcome = engine
            .update(state, program, Box::new(MemoryPersister::new()))
            .await?;
        println!("update {run}: {:?}", outcome.summary.steps);
        state = outcome.snapshot;
    }
    println!("objects in the cloud: {}", cloud.objects().len());
    Ok(())
}
