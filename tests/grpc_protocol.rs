//! The resource-monitor protocol without an SDK: a Rust client (the stubs
//! generated from `proto/pulumirpc.proto`) talks to keel's monitor the way
//! an SDK does, through a real engine and its actors. What Python programs
//! rarely exercise is checked here byte for byte: secrets and resource
//! references in both directions, the downgrade for clients that do not
//! accept them, unknown IDs and outputs in a preview, `Invoke`,
//! `ReadResource`, `SupportsFeature`, and malformed requests (refused as
//! `INVALID_ARGUMENT`, registering nothing).

mod common;
#[path = "common/monitor.rs"]
mod monitor;

use std::future::Future;
use std::sync::Arc;

use common::*;
use keel::engine::{EngineError, Outcome};
use keel::grpc::pb;
use keel::model::property::{SIG_KEY, SIG_RESOURCE_REFERENCE, SIG_SECRET, UNKNOWN_VALUE};
use keel::model::PropertyValue;
use keel::persist::MemoryPersister;
use keel::provider::SimConfig;
use keel::{Context, ProgramError};
use monitor::Client;
use prost_types::value::Kind;
use serde_json::{json, Value as Json};

/// JSON as a wire value (written independently of keel's converter).
fn wire(v: Json) -> prost_types::Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
        Json::String(s) => Kind::StringValue(s),
        Json::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.into_iter().map(wire).collect(),
        }),
        Json::Object(m) => Kind::StructValue(object(Json::Object(m))),
    };
    prost_types::Value { kind: Some(kind) }
}

fn object(v: Json) -> prost_types::Struct {
    let Json::Object(m) = v else {
        panic!("not an object: {v}")
    };
    prost_types::Struct {
        fields: m.into_iter().map(|(k, v)| (k, wire(v))).collect(),
    }
}

/// A wire value as JSON (whole doubles as integers).
fn json_of(v: &prost_types::Value) -> Json {
    match v.kind.as_ref() {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 => json!(*n as i64),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(json_of).collect()),
        Some(Kind::StructValue(s)) => json_of_struct(s),
    }
}

fn json_of_struct(s: &prost_types::Struct) -> Json {
    Json::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), json_of(v)))
            .collect(),
    )
}

const ROOT: &str = "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev";

fn custom(ty: &str, name: &str, inputs: Json) -> pb::RegisterResourceRequest {
    pb::RegisterResourceRequest {
        r#type: ty.into(),
        name: name.into(),
        custom: true,
        parent: ROOT.into(),
        object: Some(object(inputs)),
        accept_secrets: true,
        accept_resources: true,
        ..Default::default()
    }
}

/// Runs `script` as the program of an update (or a preview) whose requests
/// arrive over gRPC.
async fn run<F, Fut>(h: &mut Harness, preview: bool, script: F) -> Result<Outcome, EngineError>
where
    F: Fn(Client) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ProgramError>> + Send + 'static,
{
    let script = Arc::new(script);
    let program = move |ctx: Context| {
        let script = script.clone();
        async move {
            let (server, client) = monitor::serve(ctx).await?;
            let result = script(client).await;
            server.stop().await?;
            result
        }
    };
    let r = if preview {
        h.engine.preview(h.state.clone(), program).await
    } else {
        h.engine
            .update(h.state.clone(), program, Box::new(MemoryPersister::new()))
            .await
    };
    if let Ok(o) = &r {
        if !preview {
            h.state = o.snapshot.clone();
        }
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_references_cross_the_wire_in_both_directions() {
    let mut h = Harness::new(SimConfig::default());
    run(&mut h, false, |mut c| async move {
        let info = c.get_deployment_info(()).await?.into_inner();
        assert_eq!(
            (info.project.as_str(), info.stack.as_str()),
            ("proj", "dev")
        );
        assert!(info
            .supported_features
            .contains(&(pb::ResourceMonitorFeature::StateMigrations as i32)));
        assert!(
            c.supports_feature(pb::SupportsFeatureRequest {
                id: "secrets".into()
            })
            .await?
            .into_inner()
            .has_support
        );

        let secret = json!({SIG_KEY: SIG_SECRET, "value": "hunter2"});
        let b = c
            .register_resource(custom(
                "aws:s3/bucket:Bucket",
                "b",
                json!({"name": "b", "password": secret, "size": 3}),
            ))
            .await?
            .into_inner();
        let outputs = json_of_struct(b.object.as_ref().expect("outputs"));
        assert_eq!(outputs["password"], secret, "a secret comes back signed");
        assert_eq!(outputs["size"], json!(3), "numbers stay whole");
        assert!(outputs["arn"]
            .as_str()
            .is_some_and(|a| a.starts_with("arn:sim:")));
        assert!(!b.id.is_empty());

        let reference = json!({SIG_KEY: SIG_RESOURCE_REFERENCE, "urn": b.urn, "id": b.id});
        let mut req = custom(
            "aws:cloudfront:Distribution",
            "cdn",
            json!({"origin": reference}),
        );
        req.dependencies = vec![b.urn.clone()];
        let cdn = c.register_resource(req).await?.into_inner();
        let outputs = json_of_struct(cdn.object.as_ref().expect("outputs"));
        assert_eq!(
            outputs["origin"], reference,
            "a reference comes back signed"
        );

        // A client that accepts neither gets plain values.
        let mut req = custom(
            "aws:cloudfront:Distribution",
            "plain",
            json!({"origin": reference, "token": secret}),
        );
        req.accept_secrets = false;
        req.accept_resources = false;
        let plain = c.register_resource(req).await?.into_inner();
        let outputs = json_of_struct(plain.object.as_ref().expect("outputs"));
        assert_eq!(
            outputs["origin"],
            json!(b.id),
            "a custom resource by its ID"
        );
        assert_eq!(outputs["token"], json!("hunter2"));

        let stack = c
            .invoke(pb::ResourceInvokeRequest {
                tok: "pulumi:pulumi:getStack".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(
            json_of_struct(stack.r#return.as_ref().expect("return"))["stack"],
            "dev"
        );
        let unknown = c
            .invoke(pb::ResourceInvokeRequest {
                tok: "aws:index:nothing".into(),
                ..Default::default()
            })
            .await
            .expect_err("an unknown function");
        assert!(
            unknown.message().contains("aws:index:nothing"),
            "{unknown:?}"
        );

        let read = c
            .read_resource(pb::ReadResourceRequest {
                id: b.id.clone(),
                r#type: "aws:s3/bucket:Bucket".into(),
                name: "b-read".into(),
                parent: ROOT.into(),
                accept_secrets: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        assert!(read.urn.ends_with("::b-read"), "{}", read.urn);
        assert_eq!(
            json_of_struct(read.properties.as_ref().expect("props"))["name"],
            "b"
        );
        Ok(())
    })
    .await
    .expect("the update");

    let b = h.state_of("b");
    assert!(
        matches!(b.inputs["password"], PropertyValue::Secret(_)),
        "the secret is a secret in state: {:?}",
        b.inputs["password"]
    );
    assert!(matches!(
        h.state_of("cdn").inputs["origin"],
        PropertyValue::ResourceReference(_)
    ));
    assert_eq!(h.state_of("cdn").dependencies, vec![h.urn("b")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_answers_unknown_ids_and_outputs() {
    let mut h = Harness::new(SimConfig::default());
    run(&mut h, true, |mut c| async move {
        let info = c.get_deployment_info(()).await?.into_inner();
        assert!(info.dry_run);
        let b = c
            .register_resource(custom("aws:s3/bucket:Bucket", "b", json!({"name": "b"})))
            .await?
            .into_inner();
        assert_eq!(b.id, "", "an unknown ID is empty on the wire");
        let outputs = json_of_struct(b.object.as_ref().expect("outputs"));
        assert_eq!(outputs["arn"], UNKNOWN_VALUE);
        assert_eq!(outputs["name"], "b");
        // A provider's unknown ID too (the SDK then refers to it as
        // `URN::<unknown>`).
        let p = c
            .register_resource(custom("pulumi:providers:aws", "p", json!({})))
            .await?
            .into_inner();
        assert_eq!(p.id, "", "an unknown provider ID is empty on the wire");
        Ok(())
    })
    .await
    .expect("the preview");
    assert!(h.state.resources.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_invalid_arguments_and_register_nothing() {
    let mut h = Harness::new(SimConfig::default());
    run(&mut h, false, |mut c| async move {
        let cases = [
            ("parent", {
                let mut r = custom("aws:s3/bucket:Bucket", "b", json!({}));
                r.parent = "not-a-urn".into();
                r
            }),
            ("type", custom("no-colons", "b", json!({}))),
            (
                "object",
                custom(
                    "aws:s3/bucket:Bucket",
                    "b",
                    json!({"x": {SIG_KEY: SIG_RESOURCE_REFERENCE}}),
                ),
            ),
            ("customTimeouts", {
                let mut r = custom("aws:s3/bucket:Bucket", "b", json!({}));
                r.custom_timeouts = Some(pb::register_resource_request::CustomTimeouts {
                    create: "soon".into(),
                    ..Default::default()
                });
                r
            }),
        ];
        for (field, req) in cases {
            let e = c.register_resource(req).await.expect_err(field);
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e:?}");
            assert!(e.message().contains(field), "{field}: {}", e.message());
        }
        Ok(())
    })
    .await
    .expect("the update");
    assert_eq!(h.names(), vec!["proj-dev".to_owned()], "only the stack");
}
