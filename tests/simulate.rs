//! The program simulator's scenarios (`examples/simulate.rs`, included
//! here as a module so its runner is tested as it is): every migration
//! scenario (`rename`, `fold`, `split`, `into-component`, `retype`) runs
//! its versions through the real engine on one simulated cloud and one
//! stack, and the versions after the first create and delete nothing in
//! the cloud, replace nothing, and show the expected migration. A small
//! generated program (the shape of `large`) does the same, and every
//! manifest loads.

#[path = "../examples/simulate.rs"]
#[allow(dead_code)]
mod simulate;

use simulate::{Generate, RunOptions, RunReport, Scenario};

fn run(scenario: &Scenario) -> RunReport {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let report = rt
        .block_on(simulate::run(scenario, RunOptions::default(), |_| {}))
        .expect("the scenario runs");
    assert_eq!(report.failure, None, "{}", scenario.name);
    report
}

/// Runs a scenario and checks that nothing after v1 touched the cloud's
/// objects; returns the report.
fn nothing_replaced(name: &str) -> RunReport {
    let scenario = simulate::load(name).expect("the scenario loads");
    let report = run(&scenario);
    assert_eq!(report.versions.len(), scenario.versions.len(), "{name}");
    assert!(report.first_objects > 0, "{name}: v1 made objects");
    for (i, v) in report.versions.iter().enumerate().skip(1) {
        assert_eq!(
            (v.creates, v.deletes),
            (0, 0),
            "{name} v{}: no cloud creates or deletes\n{}",
            i + 1,
            simulate::render_version(i + 1, v, usize::MAX)
        );
    }
    assert_eq!(report.replaced, 0, "{name}");
    assert!(simulate::render_verdict(&report).contains("physical resources replaced: 0"));
    report
}

fn migrations(report: &RunReport) -> usize {
    report.versions[1].migrations().count()
}

#[test]
fn rename_keeps_everything() {
    let r = nothing_replaced("rename");
    assert_eq!(migrations(&r), 1);
    let (_, successors, _) = r.versions[1].migrations().next().expect("a migration");
    let (old, new) = successors.iter().next().expect("a successor");
    assert!(old.as_str().ends_with("::media") && new.as_str().ends_with("::assets"));
    let v2 = &r.versions[1].summary;
    assert_eq!(
        v2.steps.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
        ["same"]
    );
}

#[test]
fn fold_keeps_everything() {
    assert_eq!(migrations(&nothing_replaced("fold")), 1);
}

#[test]
fn split_keeps_everything() {
    let r = nothing_replaced("split");
    assert_eq!(migrations(&r), 1);
    let (_, _, added) = r.versions[1].migrations().next().expect("a migration");
    assert!(added
        .iter()
        .any(|u| u.as_str().ends_with("::assets-website")));
}

#[test]
fn into_component_needs_only_aliases() {
    let r = nothing_replaced("into-component");
    assert_eq!(migrations(&r), 0);
}

#[test]
fn retype_keeps_everything() {
    assert_eq!(migrations(&nothing_replaced("retype")), 1);
}

#[test]
fn a_generated_program_renames_one_bucket() {
    let g = Generate {
        components: 3,
        per_component: 4,
    };
    let scenario = simulate::generated("small", "three components of four", g).expect("written");
    let r = run(&scenario);
    assert_eq!(r.versions[0].creates, 12);
    assert_eq!((r.versions[1].creates, r.versions[1].deletes), (0, 0));
    assert_eq!(r.replaced, 0);
    assert_eq!(migrations(&r), 1);
}

#[test]
fn every_manifest_loads() {
    let names: Vec<String> = simulate::list()
        .expect("the scenarios")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for want in [
        "fold",
        "into-component",
        "large",
        "rename",
        "retype",
        "split",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    assert!(names.iter().any(|n| n == simulate::DEFAULT_SCENARIO));
    for n in &names {
        let s = simulate::load(n).expect("loads");
        assert!(s.versions.len() >= 2, "{n}");
        for v in &s.versions {
            keel::cli::program::ProgramFile::load(v).expect("a valid program file");
        }
    }
    assert!(simulate::load("nope").is_err());
}
