//! Entry categories, reads, actions, iterated declarations and state
//! formats (unobin's state model), through the CLI as a user runs it:
//! every entry carries its category and composite flag, data sources and
//! actions have no delete or refresh lifecycle, `forEach`/`count` expand
//! declarations under concrete addresses that `--target` and `state show`
//! understand, and a state an older keel wrote is refused, never converted.

mod common;

use std::collections::BTreeMap;

use common::cli::{events, summary_steps, Keel};
use serde_json::Value;

/// A program with one of each category, and a component with no children.
const FLEET: &str = "name: fleet
resources:
  empty: { type: fleet:net:Group, component: true }
  disk: { type: fleet:compute:Disk, properties: { size: 10 } }
  image:
    read: fleet:compute:Image
    properties: { name: ubuntu }
  migrate:
    action: fleet:ops:runMigration
    properties: { disk: '${disk.id}', version: 1 }
outputs:
  ran: ${migrate.runId}
";

/// The last segment of a URN (its name).
fn name_of(urn: &str) -> &str {
    urn.rsplit("::").next().unwrap_or(urn)
}

/// `keel state show --json` flattened: name -> node.
fn shown(k: &Keel) -> BTreeMap<String, Value> {
    fn walk(nodes: &Value, out: &mut BTreeMap<String, Value>) {
        for n in nodes.as_array().into_iter().flatten() {
            out.insert(n["name"].as_str().unwrap_or_default().to_owned(), n.clone());
            walk(&n["children"], out);
        }
    }
    let v: Value = serde_json::from_str(&k.ok(&["state", "show", "--json"])).expect("JSON");
    let mut out = BTreeMap::new();
    walk(&v, &mut out);
    out
}

/// The exported resources by name.
fn exported(k: &Keel) -> BTreeMap<String, Value> {
    k.resources()
        .into_iter()
        .map(|(urn, r)| (name_of(&urn).to_owned(), r))
        .collect()
}

/// Step kinds of the finished steps, by resource name.
fn steps_by_name(stdout: &str) -> BTreeMap<String, String> {
    events(stdout)
        .into_iter()
        .filter(|e| e["event"] == "step-finished")
        .map(|e| {
            (
                name_of(e["urn"].as_str().unwrap_or_default()).to_owned(),
                e["kind"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_entry_carries_its_category_and_composite_flag() {
    let k = Keel::new();
    let p = k.write("fleet.yaml", FLEET);
    let out = k.ok(&["up", "--program", &p, "--json"]);
    // The events carry both, `false` included.
    let want = [
        ("fleet-dev", "resource", true),
        ("empty", "resource", true),
        ("disk", "resource", false),
        ("image", "data-source", false),
        ("migrate", "action", false),
    ];
    for e in events(&out)
        .iter()
        .filter(|e| e["event"] == "step-started" || e["event"] == "step-finished")
    {
        assert!(e["category"].is_string(), "{e}");
        assert!(e["composite"].is_boolean(), "{e}");
    }
    let by_event: BTreeMap<String, (Value, Value)> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "step-finished")
        .map(|e| {
            let name = name_of(e["urn"].as_str().unwrap_or_default()).to_owned();
            (name, (e["category"].clone(), e["composite"].clone()))
        })
        .collect();
    let shown = shown(&k);
    let exported = exported(&k);
    for (name, category, composite) in want {
        assert_eq!(
            by_event[name],
            (Value::from(category), Value::from(composite)),
            "{name}: events"
        );
        assert_eq!(shown[name]["category"], category, "{name}: state show");
        assert_eq!(shown[name]["composite"], composite, "{name}: state show");
        assert_eq!(exported[name]["keelCategory"], category, "{name}: export");
        assert_eq!(exported[name]["keelComposite"], composite, "{name}: export");
    }
    // Pulumi's own fields say the same: a data source and an action are
    // external (Pulumi never deletes them either).
    assert_eq!(exported["image"]["external"], true);
    assert_eq!(exported["migrate"]["external"], true);
    assert_eq!(exported["disk"].get("external"), None);
}

#[test]
fn a_pulumi_written_stack_gets_derived_categories_and_a_contradiction_is_refused() {
    let k = Keel::new();
    let stack = "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev";
    let file = |extra: &str| {
        format!(
            r#"{{"version": 3, "deployment": {{"manifest": {{"time": "t", "magic": "", "version": ""}}, "resources": [
  {{"urn": "{stack}", "type": "pulumi:pulumi:Stack", "custom": false}},
  {{"urn": "urn:pulumi:dev::p::pulumi:providers:aws::default", "type": "pulumi:providers:aws", "custom": true, "id": "pid", "parent": "{stack}"}},
  {{"urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::b", "type": "aws:s3/bucket:Bucket", "custom": true, "id": "b-1", "parent": "{stack}", "provider": "urn:pulumi:dev::p::pulumi:providers:aws::default::pid"}},
  {{"urn": "urn:pulumi:dev::p::aws:ec2:Ami::ami", "type": "aws:ec2:Ami", "custom": true, "external": true, "id": "ami-1", "parent": "{stack}", "provider": "urn:pulumi:dev::p::pulumi:providers:aws::default::pid"{extra}}}
]}}}}"#
        )
    };
    let good = k.write("pulumi.json", &file(""));
    k.ok(&["stack", "import", "--file", &good]);
    let e = exported(&k);
    for (name, category, composite) in [
        ("p-dev", "resource", true),
        ("default", "resource", false),
        ("b", "resource", false),
        ("ami", "data-source", false),
    ] {
        assert_eq!(e[name]["keelCategory"], category, "{name}");
        assert_eq!(e[name]["keelComposite"], composite, "{name}");
    }
    // The checkpoint keel keeps is still Pulumi's: derived keys are not
    // written into it.
    let base = std::fs::read_to_string(k.backend().join("stacks/dev/checkpoint.json")).unwrap();
    assert!(!base.contains("keelCategory"), "{base}");
    // A file whose keel keys contradict Pulumi's fields is refused, and the
    // stack is as it was.
    let before = k.resources();
    let bad = k.write("bad.json", &file(r#", "keelCategory": "resource""#));
    let (_, err) = k.expect(2, &["stack", "import", "--file", &bad]);
    assert!(
        err.contains("keelCategory") && err.contains("aws:ec2:Ami::ami"),
        "{err}"
    );
    assert_eq!(k.resources(), before);
    // An export imports back as it was.
    let exported_file = k.write("export.json", &k.ok(&["stack", "export"]));
    k.ok(&["stack", "import", "--file", &exported_file]);
    assert_eq!(k.resources(), before);
}

#[test]
fn data_sources_and_actions_have_no_delete_or_refresh_lifecycle() {
    let k = Keel::new();
    let p = k.write("fleet.yaml", FLEET);
    let first = steps_by_name(&k.ok(&["up", "--program", &p, "--json"]));
    assert_eq!(first["image"], "read");
    assert_eq!(first["migrate"], "read", "the action ran");
    let ran = k.export()["deployment"]["resources"].clone();
    // Unchanged inputs: the data source is read again, the action is not run.
    let second = steps_by_name(&k.ok(&["up", "--program", &p, "--json"]));
    assert_eq!(second["image"], "read");
    assert_eq!(second["migrate"], "same");
    // A refresh reads only the managed resource.
    let refreshed = k.ok(&["refresh", "--json"]);
    let refresh = steps_by_name(&refreshed);
    assert_eq!(refresh.get("disk").map(String::as_str), Some("refresh"));
    assert!(!refresh.contains_key("image"), "{refreshed}");
    assert!(!refresh.contains_key("migrate"), "{refreshed}");
    // Changed inputs run the action again.
    let changed = k.write("fleet.yaml", &FLEET.replace("version: 1", "version: 2"));
    let third = steps_by_name(&k.ok(&["up", "--program", &changed, "--json"]));
    assert_eq!(third["migrate"], "read", "the action ran again");
    assert_ne!(k.export()["deployment"]["resources"], ran);
    // Dropping the declarations prunes both entries without a provider
    // call (the cloud keeps only what it had).
    let cloud = k.cloud();
    let pruned = k.write(
        "pruned.yaml",
        "name: fleet
resources:
  empty: { type: fleet:net:Group, component: true }
  disk: { type: fleet:compute:Disk, properties: { size: 10 } }
",
    );
    let out = k.ok(&["up", "--program", &pruned, "--json"]);
    let steps = steps_by_name(&out);
    assert_eq!(steps["image"], "delete");
    assert_eq!(steps["migrate"], "delete");
    assert_eq!(k.cloud(), cloud);
    let names: Vec<String> = exported(&k).into_keys().collect();
    assert!(!names.contains(&"image".to_owned()), "{names:?}");
    assert!(!names.contains(&"migrate".to_owned()), "{names:?}");
}

#[test]
fn a_failed_action_leaves_no_entry_and_runs_next_time() {
    let k = Keel::new();
    let p = k.write("fleet.yaml", FLEET);
    let (out, err) = k.expect(
        1,
        &[
            "up",
            "--program",
            &p,
            "--json",
            "--sim-fail",
            "fleet:ops:runMigration",
        ],
    );
    assert!(err.contains("injected failure"), "{out}\n{err}");
    assert!(!exported(&k).contains_key("migrate"));
    assert!(exported(&k).contains_key("disk"));
    let steps = steps_by_name(&k.ok(&["up", "--program", &p, "--json"]));
    assert_eq!(steps["migrate"], "read");
    assert_eq!(exported(&k)["migrate"]["keelCategory"], "action");
}

#[test]
fn a_read_by_id_observes_an_object_made_outside_the_stack() {
    let k = Keel::new();
    k.ok(&[
        "cloud",
        "add",
        "fleet:net:Vpc",
        "vpc-7",
        "--property",
        "cidr=10.0.0.0/16",
    ]);
    let p = k.write(
        "p.yaml",
        "name: fleet
resources:
  vpc: { read: fleet:net:Vpc, id: vpc-7 }
  subnet: { type: fleet:net:Subnet, properties: { cidr: '${vpc.cidr}' } }
",
    );
    k.ok(&["up", "--program", &p]);
    let e = exported(&k);
    assert_eq!(e["vpc"]["id"], "vpc-7");
    assert_eq!(e["vpc"]["keelCategory"], "data-source");
    assert_eq!(e["subnet"]["inputs"]["cidr"], "10.0.0.0/16");
    // A read of an ID that is not there fails, and creates nothing.
    let missing = k.write(
        "m.yaml",
        "name: fleet\nresources:\n  vpc: { read: fleet:net:Vpc, id: vpc-9 }\n",
    );
    let cloud = k.cloud();
    k.expect(1, &["up", "--program", &missing]);
    assert_eq!(k.cloud(), cloud);
}

/// Servers per region, regions from config, disks by count.
const ITERATED: &str = "name: fleet
config:
  regions: { east: { size: 2 }, west: { size: 1 } }
resources:
  group:
    type: fleet:net:Group
    component: true
    forEach: ${config.regions}
  server:
    type: fleet:compute:Server
    forEach: [a, b]
    properties: { zone: '${each.key}' }
    options: { parent: group }
  disk:
    type: fleet:compute:Disk
    count: 2
    properties: { index: '${each.key}' }
  tag:
    type: fleet:meta:Tag
    forEach: ${disk[1].ids}
outputs:
  first: ${disk[0].id}
";

#[test]
fn for_each_and_count_expand_under_concrete_addresses() {
    let k = Keel::new();
    let p = k.write("p.yaml", ITERATED);
    // `tag` iterates an output the simulated cloud does not have: the
    // reference fails at run time, naming it, after the rest was created.
    let (_, err) = k.expect(1, &["up", "--program", &p]);
    assert!(err.contains("disk[1].ids"), "{err}");
    let program = ITERATED
        .replace("forEach: ${disk[1].ids}", "forEach: '${disk[1].tags}'")
        .replace(
            "properties: { index: '${each.key}' }",
            "properties: { index: '${each.key}', tags: [x, y] }",
        );
    let p = k.write("p.yaml", &program);
    k.ok(&["up", "--program", &p]);
    let shown = shown(&k);
    let want = [
        (r#"group["east"]"#, r#"group["east"]"#, "group"),
        (
            r#"group["west"]/server["b"]"#,
            r#"group["west"]/server["b"]"#,
            "group/server",
        ),
        ("disk[0]", "disk[0]", "disk"),
        (r#"tag["y"]"#, r#"tag["y"]"#, "tag"),
    ];
    for (name, address, declaration) in want {
        assert_eq!(shown[name]["address"], address, "{name}");
        assert_eq!(shown[name]["declaration"], declaration, "{name}");
    }
    assert_eq!(
        shown[r#"group["east"]/server["a"]"#]["type"],
        "fleet:compute:Server"
    );
    let e = exported(&k);
    assert_eq!(e["disk[1]"]["inputs"]["index"], 1);
    assert_eq!(e[r#"group["east"]/server["b"]"#]["inputs"]["zone"], "b");
    assert_eq!(e.len(), 12, "{:?}", e.keys().collect::<Vec<_>>());
    // The text tree groups expansions under their declaration.
    let text = k.ok(&["state", "show"]);
    assert!(
        text.contains("group/server  [declaration, 2 expansions]"),
        "{text}"
    );
    assert!(text.contains("disk  [declaration, 2 expansions]"), "{text}");

    // Reordering a keyed list replaces nothing; adding a key creates only
    // that expansion; removing one deletes only it.
    let reordered = k.write(
        "p.yaml",
        &program.replace("forEach: [a, b]", "forEach: [b, a]"),
    );
    let out = k.ok(&["up", "--program", &reordered, "--json"]);
    assert!(
        summary_steps(&out).keys().all(|s| s == "same"),
        "{:?}",
        summary_steps(&out)
    );
    let added_program = program.replace("forEach: [a, b]", "forEach: [b, a, c]");
    let added = k.write("p.yaml", &added_program);
    let out = k.ok(&["up", "--program", &added, "--json"]);
    let steps = summary_steps(&out);
    assert_eq!(steps.get("create"), Some(&2), "one per group: {steps:?}");
    let removed = k.write(
        "p.yaml",
        &added_program.replace(
            "{ east: { size: 2 }, west: { size: 1 } }",
            "{ east: { size: 2 } }",
        ),
    );
    let cloud_before = k.cloud().len();
    let out = k.ok(&["up", "--program", &removed, "--json"]);
    let deleted: Vec<String> = steps_by_name(&out)
        .into_iter()
        .filter(|(_, kind)| kind == "delete")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        deleted,
        [
            r#"group["west"]"#,
            r#"group["west"]/server["a"]"#,
            r#"group["west"]/server["b"]"#,
            r#"group["west"]/server["c"]"#,
        ],
        "{out}"
    );
    assert_eq!(k.cloud().len(), cloud_before - 3);
}

#[test]
fn targets_accept_concrete_base_and_declaration_addresses() {
    let k = Keel::new();
    let program = ITERATED.replace(
        "  tag:\n    type: fleet:meta:Tag\n    forEach: ${disk[1].ids}\n",
        "",
    );
    let p = k.write("p.yaml", &program);
    k.ok(&["up", "--program", &p]);
    let changed = k.write(
        "p.yaml",
        &program.replace("zone: '${each.key}'", "zone: '${each.key}-2'"),
    );
    for (target, want) in [
        (
            r#"group["east"]/server["a"]"#,
            vec![r#"group["east"]/server["a"]"#],
        ),
        (
            r#"group["west"]/server"#,
            vec![
                r#"group["west"]/server["a"]"#,
                r#"group["west"]/server["b"]"#,
            ],
        ),
        ("group/server", vec![r#"group["east"]/server["b"]"#]),
    ] {
        let out = k.ok(&["up", "--program", &changed, "--json", "--target", target]);
        let updated: Vec<String> = steps_by_name(&out)
            .into_iter()
            .filter(|(_, kind)| kind == "update")
            .map(|(n, _)| n)
            .collect();
        assert_eq!(updated, want, "--target {target}");
    }
    // An address naming no declaration, or a key its config-driven
    // `forEach` does not have, is refused before anything runs.
    for bad in [r#"group["north"]/server"#, "disk[2]", "server"] {
        let (_, err) = k.expect(2, &["up", "--program", &changed, "--target", bad]);
        assert!(
            err.contains("names no declaration or expansion"),
            "{bad}: {err}"
        );
    }
    // A malformed address is bad usage, and nothing runs.
    let (_, err) = k.expect(2, &["up", "--program", &changed, "--target", "server[x]"]);
    assert!(err.contains("not an address"), "{err}");
}

#[test]
fn iteration_mistakes_are_reported_before_anything_runs() {
    let k = Keel::new();
    for (body, needle) in [
        (
            "  s: { type: a:b:C, forEach: [x] }\n  t: { type: a:b:C, properties: { v: '${s.id}' } }\n",
            "name one expansion",
        ),
        (
            "  s: { type: a:b:C, forEach: [x] }\n  t: { type: a:b:C, properties: { v: '${s[\"y\"].id}' } }\n",
            "no expansion [\"y\"]",
        ),
        (
            "  s: { type: a:b:C, count: 2 }\n  t: { type: a:b:C, properties: { v: '${s[2].id}' } }\n",
            "no expansion [2]",
        ),
        (
            "  t: { type: a:b:C, properties: { v: '${each.key}' } }\n",
            "only for an entry with `forEach` or `count`",
        ),
        ("  s: { type: a:b:C, forEach: [x, x] }\n", "twice"),
        ("  s: { type: a:b:C, forEach: 3 }\n", "a map or a list"),
        ("  s: { type: a:b:C, count: -1 }\n", "non-negative integer"),
        ("  s: { type: a:b:C, forEach: [x], count: 1 }\n", "not both"),
        ("  s: { read: a:b:C }\n", "needs the `id`"),
        (
            "  s: { action: a:b:run, options: { protect: true } }\n",
            "not an option of a read or an action",
        ),
        ("  s: { type: a:b:C, action: a:b:run }\n", "exactly one of"),
    ] {
        let p = k.write("p.yaml", &format!("name: x\nresources:\n{body}"));
        let (_, err) = k.expect(2, &["up", "--program", &p]);
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(k.cloud().is_empty());
    }
}

#[test]
fn a_state_an_older_keel_wrote_is_refused_and_can_be_imported_as_it_is() {
    let k = Keel::new();
    let p = k.write("fleet.yaml", FLEET);
    k.ok(&["up", "--program", &p]);
    let base = k.backend().join("stacks/dev/checkpoint.json");
    let written = std::fs::read_to_string(&base).unwrap();
    assert!(written.contains(r#""keelFormat":2"#), "{written}");
    // The format keel wrote before it numbered them: no `keelFormat`.
    let older = written.replace(r#""keelFormat":2,"#, "");
    std::fs::write(&base, &older).unwrap();
    let (_, err) = k.expect(1, &["up", "--program", &p]);
    assert!(
        err.contains("older keel")
            && err.contains("state format 1")
            && err.contains("keel stack import"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&base).unwrap(),
        older,
        "nothing changed"
    );
    k.expect(1, &["state", "show"]);
    // As the message says: importing it adopts it as it is.
    let path = base.display().to_string();
    k.ok(&["stack", "import", "--file", &path]);
    k.ok(&["up", "--program", &p]);
    // A newer format is refused too.
    let now = std::fs::read_to_string(&base).unwrap();
    std::fs::write(&base, now.replace(r#""keelFormat":2"#, r#""keelFormat":3"#)).unwrap();
    let (_, err) = k.expect(1, &["state", "show"]);
    assert!(err.contains("newer than this keel"), "{err}");
}

#[test]
fn a_composite_moved_by_a_migration_moves_its_descendants() {
    let k = Keel::new();
    let v1 = "name: shop
resources:
  app: { type: shop:app:App, component: true }
  tier: { type: shop:app:Tier, component: true, options: { parent: app } }
  legacy: { type: shop:app:Legacy, component: true, options: { parent: app } }
  db: { type: shop:data:Db, properties: { size: 1 }, options: { parent: legacy } }
  image: { read: shop:data:Image, properties: { name: base }, options: { parent: legacy } }
";
    let p = k.write("p.yaml", v1);
    k.ok(&["up", "--program", &p]);
    let cloud = k.cloud();
    let db_id = exported(&k)["db"]["id"].clone();
    let v2 = v1
        .replace(
            "app: { type: shop:app:App, component: true }",
            "app:\n    type: shop:app:App\n    component: true\n    options:\n      stateMigrations: [ { move: { resources: [legacy], under: tier } } ]",
        )
        .replace(
            "legacy: { type: shop:app:Legacy, component: true, options: { parent: app } }",
            "legacy: { type: shop:app:Legacy, component: true, options: { parent: tier } }",
        );
    let p = k.write("p.yaml", &v2);
    let out = k.ok(&["up", "--program", &p, "--json"]);
    let steps = summary_steps(&out);
    assert!(
        steps.keys().all(|s| s == "same" || s == "read"),
        "nothing created, replaced or deleted: {steps:?}"
    );
    let urns: Vec<String> = k.resources().into_keys().collect();
    for want in [
        "urn:pulumi:dev::shop::shop:app:App$shop:app:Tier$shop:app:Legacy::legacy",
        "urn:pulumi:dev::shop::shop:app:App$shop:app:Tier$shop:app:Legacy$shop:data:Db::db",
        "urn:pulumi:dev::shop::shop:app:App$shop:app:Tier$shop:app:Legacy$shop:data:Image::image",
    ] {
        assert!(urns.iter().any(|u| u == want), "{want}: {urns:#?}");
    }
    let e = exported(&k);
    assert_eq!(e["db"]["id"], db_id, "the object kept its identity");
    assert_eq!(e["image"]["keelCategory"], "data-source");
    assert_eq!(e["legacy"]["keelComposite"], true);
    assert_eq!(k.cloud(), cloud);
}
