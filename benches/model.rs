//! Micro-benchmarks of the checkpoint model (`spec/performance.md` §3, P7).
//!
//! - `urn`: URN parse, build ([`Urn::new`]) and format (`to_string`), per URN,
//!   over every URN of the largest real Pulumi fixture.
//! - `checkpoint`: decode and encode of that fixture (149 resources), per
//!   resource.
//! - `integrity`: [`integrity::verify`] on the fixture and on a 20,000
//!   resource deployment, per resource.
//! - `p7_load`: the P7 "load" target: read + verify
//!   ([`CheckpointFile::from_slice_verified`]) of 20,000-resource checkpoints
//!   built in memory from real fixture resources, plus the phases (version
//!   scan, decode, verify) and a plain `serde_json::Value` parse as a
//!   reference point.
//!
//! Fixtures are read in place from `../shared/fixtures/pulumi` (or
//! `$KEEL_FIXTURES`). Run with `cargo bench --bench model`.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use keel::model::{integrity, CheckpointFile, Deployment, State, TypeToken, Urn};

/// The largest fixture (149 resources).
const CLUSTER_3: &str =
    "tests__testdata__recorded__TestProviderUpgrade__cluster__3.0.0__stack.json";
/// A second large fixture, for variety in the synthetic checkpoints.
const CLUSTER_1: &str =
    "provider__testdata__recorded__TestProviderUpgrade__cluster__1.0.4__state.json";
/// Resources in the P7 checkpoints (stack + providers + customs).
const P7_RESOURCES: usize = 20_000;
/// The size of Pulumi's 20k-resource file behind the P7 anchor.
const PULUMI_P7_BYTES: usize = 5_400_000;

const STACK: &str = "bench";
const PROJECT: &str = "keel-bench";

fn fixtures() -> PathBuf {
    std::env::var_os("KEEL_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pulumi"),
        PathBuf::from,
    )
}

fn read_fixture(name: &str) -> Vec<u8> {
    let path = fixtures().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn load_fixture(name: &str) -> Deployment {
    CheckpointFile::from_slice_verified(&read_fixture(name))
        .unwrap_or_else(|e| panic!("fixture {name} does not load: {e}"))
        .into_deployment()
}

/// Custom, non-provider resources of a fixture: the templates of the
/// synthetic checkpoints.
fn custom_templates(d: &Deployment) -> Vec<State> {
    d.resources
        .iter()
        .filter(|s| s.custom && !s.ty.is_provider() && !s.delete)
        .cloned()
        .collect()
}

/// How the customs of a synthetic checkpoint copy their templates.
#[derive(Clone, Copy)]
enum Shape {
    /// Whole copies (inputs, outputs, timestamps, source position...),
    /// named `<template name>-<i>`, depending on up to two earlier customs.
    Full,
    /// Pulumi-sized (as far as possible): the template's type and ID, a short name `r<i>`,
    /// parent, provider and one dependency, plus as many of the template's
    /// input and output properties as fit in `bytes` per resource.
    Trimmed {
        /// The target encoded size of one resource.
        bytes: usize,
    },
}

/// A checkpoint of `n` resources: the stack, one provider per package, then
/// copies of `templates` (see [`Shape`]) with unique URNs, parented by the
/// stack, using their package's provider, each depending on earlier customs
/// (property dependencies rewritten to those). `base` supplies the manifest
/// and secrets provider.
fn synthetic(base: &Deployment, templates: &[State], n: usize, shape: Shape) -> Deployment {
    let stack_ty = TypeToken::parse("pulumi:pulumi:Stack").expect("stack type");
    let stack_urn = Urn::new(
        STACK,
        PROJECT,
        None,
        &stack_ty,
        &format!("{PROJECT}-{STACK}"),
    )
    .expect("stack urn");
    let mut resources = Vec::with_capacity(n);
    resources.push(State::new(stack_urn.clone(), stack_ty, false));

    let mut providers: BTreeMap<String, String> = BTreeMap::new();
    for t in templates {
        let package = t.ty.package().to_owned();
        if providers.contains_key(&package) {
            continue;
        }
        let ty = TypeToken::provider_for(&package).expect("provider type");
        let urn = Urn::new(STACK, PROJECT, None, &ty, "default").expect("provider urn");
        let id = format!("{:08x}-0000-4000-8000-000000000000", providers.len());
        providers.insert(package, format!("{urn}::{id}"));
        let mut p = State::new(urn, ty, true);
        p.id = id;
        p.parent = stack_urn.clone();
        resources.push(p);
    }

    let first_custom = resources.len();
    let max_deps = match shape {
        Shape::Full => 2,
        Shape::Trimmed { .. } => 1,
    };
    for i in 0..n.saturating_sub(first_custom) {
        let t = &templates[i % templates.len()];
        let deps: Vec<Urn> = [i.checked_sub(1), i.checked_sub(1 + i / 2)]
            .into_iter()
            .flatten()
            .take(max_deps)
            .collect::<BTreeSet<usize>>()
            .into_iter()
            .map(|j| resources[first_custom + j].urn.clone())
            .collect();
        let provider = providers[t.ty.package()].clone();
        let s = match shape {
            Shape::Full => {
                let mut s = t.clone();
                let name = format!("{}-{i}", t.urn.name());
                s.urn = Urn::new(STACK, PROJECT, None, &t.ty, &name).expect("custom urn");
                s.parent = stack_urn.clone();
                s.provider = provider.into();
                for list in s.property_dependencies.values_mut().flatten() {
                    let len = list.len().min(deps.len());
                    *list = deps[..len].to_vec();
                }
                s.dependencies = deps;
                s.rare.edit(|r| r.aliases.clear());
                s.rare.edit(|r| r.deleted_with = Urn::default().into());
                s.rare.edit(|r| r.replace_with.clear());
                s.rare.edit(|r| r.view_of = Urn::default().into());
                s.pending_replacement = false;
                s
            }
            Shape::Trimmed { bytes } => {
                let urn =
                    Urn::new(STACK, PROJECT, None, &t.ty, &format!("r{i}")).expect("custom urn");
                let mut s = State::new(urn, t.ty.clone(), true);
                s.id.clone_from(&t.id);
                s.parent = stack_urn.clone();
                s.provider = provider.into();
                s.dependencies = deps;
                let props = t
                    .inputs
                    .iter()
                    .map(|p| (true, p))
                    .chain(t.outputs.iter().map(|p| (false, p)));
                for (input, (k, v)) in props {
                    let map = if input { &mut s.inputs } else { &mut s.outputs };
                    map.insert(k.clone(), v.clone());
                    if encoded_len(&s) > bytes {
                        let map = if input { &mut s.inputs } else { &mut s.outputs };
                        map.remove(k);
                    }
                }
                s
            }
        };
        resources.push(s);
    }

    let mut d = base.clone();
    d.resources = resources;
    d.pending_operations.clear();
    d
}

fn encoded_len(s: &State) -> usize {
    serde_json::to_vec(s).map_or(0, |v| v.len())
}

fn bench_urn(c: &mut Criterion) {
    let d = load_fixture(CLUSTER_3);
    let texts: Vec<String> = d.resources.iter().map(|s| s.urn.to_string()).collect();
    let urns: Vec<Urn> = d.resources.iter().map(|s| s.urn.clone()).collect();
    // The parts Urn::new takes: parent's qualified type chain and own type.
    let parts: Vec<(String, String, Option<String>, TypeToken, String)> = urns
        .iter()
        .map(|u| {
            let q = u.qualified_type();
            let parent = q.rsplit_once('$').map(|(p, _)| p.to_owned());
            let ty = TypeToken::parse(u.type_str()).expect("type token");
            (
                u.stack().to_owned(),
                u.project().to_owned(),
                parent,
                ty,
                u.name().to_owned(),
            )
        })
        .collect();
    let mean_len = texts.iter().map(String::len).sum::<usize>() / texts.len();
    eprintln!("urn: {} URNs, mean length {mean_len} bytes", texts.len());

    let mut g = c.benchmark_group("urn");
    g.throughput(Throughput::Elements(texts.len() as u64));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("parse", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(Urn::parse(black_box(t)).expect("parse"));
            }
        });
    });
    g.bench_function("new", |b| {
        b.iter(|| {
            for (stack, project, parent, ty, name) in &parts {
                black_box(
                    Urn::new(stack, project, parent.as_deref(), ty, black_box(name)).expect("new"),
                );
            }
        });
    });
    g.bench_function("to_string", |b| {
        b.iter(|| {
            for u in &urns {
                black_box(black_box(u).to_string());
            }
        });
    });
    g.bench_function("new_to_string", |b| {
        b.iter(|| {
            for (stack, project, parent, ty, name) in &parts {
                let u = Urn::new(stack, project, parent.as_deref(), ty, black_box(name));
                black_box(u.expect("new").to_string());
            }
        });
    });
    g.finish();
}

fn bench_checkpoint(c: &mut Criterion) {
    let bytes = read_fixture(CLUSTER_3);
    let file = CheckpointFile::from_slice(&bytes).expect("decode");
    let n = file.deployment_ref().map_or(0, |d| d.resources.len());
    let compact = file.to_vec();
    eprintln!(
        "checkpoint: {CLUSTER_3}: {n} resources, {} bytes as stored (pretty), {} bytes compact",
        bytes.len(),
        compact.len()
    );

    let mut g = c.benchmark_group("checkpoint");
    g.throughput(Throughput::Elements(n as u64));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("decode", |b| {
        b.iter(|| CheckpointFile::from_slice(black_box(&bytes)).expect("decode"));
    });
    g.bench_function("decode_compact", |b| {
        b.iter(|| CheckpointFile::from_slice(black_box(&compact)).expect("decode"));
    });
    g.bench_function("decode_verified", |b| {
        b.iter(|| CheckpointFile::from_slice_verified(black_box(&bytes)).expect("decode"));
    });
    g.bench_function("encode", |b| b.iter(|| black_box(&file).to_vec()));
    g.bench_function("encode_pretty", |b| {
        b.iter(|| black_box(&file).to_vec_pretty());
    });
    g.finish();
}

fn bench_integrity(c: &mut Criterion) {
    let small = load_fixture(CLUSTER_3);
    let templates = custom_templates(&small);
    let big = synthetic(&small, &templates, P7_RESOURCES, Shape::Full);
    integrity::verify(&big).expect("synthetic deployment verifies");

    let mut g = c.benchmark_group("integrity");
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(small.resources.len() as u64));
    g.bench_function("verify_fixture_149", |b| {
        b.iter(|| integrity::verify(black_box(&small)).expect("verify"));
    });
    g.throughput(Throughput::Elements(big.resources.len() as u64));
    g.bench_function("verify_20k", |b| {
        b.iter(|| integrity::verify(black_box(&big)).expect("verify"));
    });
    g.finish();
}

/// One P7 variant: its name, encoded bytes and resource count, and whether
/// to also measure the drop and the plain JSON parses.
struct P7Variant {
    name: &'static str,
    bytes: Vec<u8>,
    resources: usize,
    detail: bool,
}

fn p7_variants() -> Vec<P7Variant> {
    let cluster3 = load_fixture(CLUSTER_3);
    let cluster1 = load_fixture(CLUSTER_1);
    let mut all = custom_templates(&cluster3);
    all.extend(custom_templates(&cluster1));

    let mut small = all.clone();
    small.sort_by_key(encoded_len);
    small.truncate(SMALL_TEMPLATES);

    // Pulumi's 270 bytes per resource leaves no room for properties next
    // to a URN, parent, provider and dependency: this is the smallest
    // realistic resource, the closest to that size.
    let skeleton = Shape::Trimmed {
        bytes: PULUMI_P7_BYTES / P7_RESOURCES,
    };
    eprintln!(
        "p7_load: size_of::<State>() = {} bytes",
        std::mem::size_of::<State>()
    );
    let mut out = Vec::new();
    for (name, templates, shape, detail) in [
        ("skeleton", &all, skeleton, true),
        ("fixture_small", &small, Shape::Full, false),
        ("fixture_mix", &all, Shape::Full, true),
    ] {
        let d = synthetic(&cluster3, templates, P7_RESOURCES, shape);
        let resources = d.resources.len();
        let bytes = CheckpointFile::export(d).to_vec();
        CheckpointFile::from_slice_verified(&bytes).expect("synthetic checkpoint loads");
        eprintln!(
            "p7_load/{name}: {resources} resources from {} templates, {:.2} MB ({} bytes/resource; Pulumi's anchor: {:.1} MB, {} bytes/resource)",
            templates.len(),
            bytes.len() as f64 / 1e6,
            bytes.len() / resources,
            PULUMI_P7_BYTES as f64 / 1e6,
            PULUMI_P7_BYTES / P7_RESOURCES,
        );
        out.push(P7Variant {
            name,
            bytes,
            resources,
            detail,
        });
    }
    out
}

/// How many of the smallest fixture resources `fixture_small` cycles.
const SMALL_TEMPLATES: usize = 24;

fn bench_p7(c: &mut Criterion) {
    let variants = p7_variants();
    let mut g = c.benchmark_group("p7_load");
    // Flat sampling: the big variants take ~0.05-0.4 s per iteration, and
    // linear sampling would run 55 of them per benchmark.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for v in &variants {
        let bytes = &v.bytes;
        g.throughput(Throughput::Elements(v.resources as u64));
        // The loaded checkpoint is kept (a load hands it to the engine), so
        // its drop is outside the timed region; `drop` measures it apart.
        g.bench_function(format!("{}/read_verify", v.name), |b| {
            b.iter_with_large_drop(|| {
                CheckpointFile::from_slice_verified(black_box(bytes)).expect("load")
            });
        });
        g.bench_function(format!("{}/decode", v.name), |b| {
            b.iter_with_large_drop(|| {
                CheckpointFile::from_slice(black_box(bytes)).expect("decode")
            });
        });
        let file = CheckpointFile::from_slice(bytes).expect("decode");
        g.bench_function(format!("{}/verify", v.name), |b| {
            b.iter(|| black_box(&file).verify().expect("verify"));
        });
        if !v.detail {
            continue;
        }
        g.bench_function(format!("{}/drop", v.name), |b| {
            b.iter_batched(|| file.clone(), drop, BatchSize::LargeInput);
        });
        g.bench_function(format!("{}/scan_ignored_any", v.name), |b| {
            b.iter(|| {
                serde_json::from_slice::<serde::de::IgnoredAny>(black_box(bytes)).expect("scan")
            });
        });
        g.bench_function(format!("{}/serde_json_value", v.name), |b| {
            b.iter_with_large_drop(|| {
                serde_json::from_slice::<serde_json::Value>(black_box(bytes)).expect("json")
            });
        });
    }
    g.finish();
}

// `criterion_group!` generates an undocumented `pub fn`, which the
// workspace's `missing_docs` lint refuses; this is what it expands to.
fn main() {
    // No plots and fewer bootstrap resamples: the analysis, not the
    // measurement, would otherwise dominate the run (~3.5 min -> ~2 min).
    let mut c = Criterion::default()
        .without_plots()
        .nresamples(20_000)
        .configure_from_args();
    bench_urn(&mut c);
    bench_checkpoint(&mut c);
    bench_integrity(&mut c);
    bench_p7(&mut c);
    c.final_summary();
}
