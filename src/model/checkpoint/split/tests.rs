//! The split decode against the one-thread decode: whenever it answers, the
//! answer is the one-thread decode's, and it answers the files keel and
//! Pulumi write.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// The one-thread decode of `text` (`None` where it would fall back or
/// fail).
fn whole(text: &str) -> Option<CheckpointFile> {
    match with_interning(|| serde_json::from_str::<Fast>(text)) {
        Ok(Fast::Read(file)) => Some(*file),
        _ => None,
    }
}

/// The split of `text` at `at` in memory, after asserting that reading it
/// through windows answers the same. The windows' size (64 to 332 bytes,
/// smaller than most elements: they cut elements and characters, and
/// grow) varies with `at`, so a sweep tries many.
fn decode_at(text: &str, at: usize) -> Option<CheckpointFile> {
    let split = decode_with(&|| Whole(text), text.len(), at);
    let size = 64 + at % 269;
    let windowed = decode_with(&|| Windowed::new(text.as_bytes(), size), text.len(), at);
    assert!(
        windowed == split,
        "windows of {size} bytes answer otherwise than the text at {at}"
    );
    split
}

/// Decodes `text` split at `at`; an answer must equal the one-thread
/// decode. Returns whether the split answered.
fn check(text: &str, at: usize) -> bool {
    match decode_at(text, at) {
        None => false,
        Some(split) => {
            let one = whole(text).unwrap_or_else(|| {
                panic!("split at {at} answered a file the one-thread decode refuses")
            });
            assert!(
                split == one,
                "split at {at} differs from the one-thread decode"
            );
            true
        }
    }
}

fn state(i: usize, outputs: Value) -> Value {
    json!({
        "urn": format!("urn:pulumi:dev::p::sim:index:Thing::r{i}"),
        "custom": true,
        "id": format!("r{i}-id"),
        "type": "sim:index:Thing",
        "inputs": {"name": format!("r{i}")},
        "outputs": outputs,
        "parent": "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev",
        "dependencies": if i > 0 { json!([format!("urn:pulumi:dev::p::sim:index:Thing::r{}", i - 1)]) } else { json!([]) },
    })
}

fn stack() -> Value {
    json!({"urn": "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev", "custom": false, "type": "pulumi:pulumi:Stack"})
}

/// An export file of `n` states whose outputs are `outputs(i)`.
fn file(n: usize, outputs: impl Fn(usize) -> Value) -> Value {
    let mut resources = vec![stack()];
    resources.extend((0..n).map(|i| state(i, outputs(i))));
    json!({
        "version": 3,
        "deployment": {
            "manifest": {"time": "2026-12-04T00:00:00Z", "magic": "", "version": ""},
            "resources": resources,
        },
    })
}

/// `f` as keel writes it (the URN first in each state), compact or
/// indented.
fn text(f: &Value, pretty: bool) -> String {
    let file = whole(&f.to_string()).expect("the test file decodes");
    if pretty {
        serde_json::to_string_pretty(&file).unwrap()
    } else {
        serde_json::to_string(&file).unwrap()
    }
}

/// `v` compact with `urn` first in every object (as keel writes states),
/// for a file keel's reader may refuse.
fn urn_first(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(urn_first).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by_key(|k| *k != "urn");
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), urn_first(&m[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        scalar => scalar.to_string(),
    }
}

/// Every split point from the array's start to the end, `step` bytes
/// apart; how many the split answered.
fn sweep(text: &str, step: usize) -> usize {
    (0..text.len())
        .step_by(step)
        .filter(|&at| check(text, at))
        .count()
}

#[test]
fn compact_and_indented_files_split_wherever_an_element_follows() {
    let f = file(60, |i| json!({"arn": format!("arn:sim:{i}"), "n": i}));
    for text in [text(&f, false), text(&f, true)] {
        let answered = sweep(&text, 37);
        // Every point before the last element's start finds an element.
        let last = text.rfind("\"urn\"").unwrap();
        assert!(
            answered >= last / 37 - 2,
            "{answered} of {} answered",
            last / 37
        );
        // Past the last element there is nothing to cut.
        assert!(!check(&text, last + 1));
    }
}

#[test]
fn a_file_past_the_threshold_is_split_and_a_smaller_one_is_not() {
    let big = text(
        &file(
            3_600,
            |i| json!({"arn": format!("arn:sim:sim:index:Thing:r{i}")}),
        ),
        false,
    );
    assert!(big.len() >= SPLIT_MIN_BYTES, "{} bytes", big.len());
    let split = decode(&big).expect("a large file keel writes is split");
    assert!(split == whole(&big).unwrap());
    // Through the public decoder too, and read through windows.
    assert!(CheckpointFile::from_slice(big.as_bytes()).unwrap() == split);
    assert!(decode_windows(big.as_bytes()).unwrap() == split);
    assert!(CheckpointFile::from_windows(big.as_bytes()).unwrap() == split);
    let small = text(&file(100, |i| json!({"n": i})), false);
    assert!(decode(&small).is_none());
    assert!(CheckpointFile::from_windows(small.as_bytes()).is_none());
}

#[test]
fn the_backend_form_splits_too() {
    let f = file(40, |i| json!({"n": i}));
    let f = json!({
        "version": 3,
        "checkpoint": {"stack": "dev", "latest": f["deployment"]},
    });
    let text = text(&f, false);
    assert!(check(&text, text.len() / 2));
}

fn look_alikes(i: usize) -> Value {
    // Strings and nested objects that look like the array or an element.
    json!({
        "text": r#",{"urn":"urn:pulumi:dev::p::sim:index:Thing::fake"}"#,
        "resources": [{"urn": format!("u{i}")}, {"urn": "v"}],
        "nested": [[{"a": 1}, {"urn": "w"}]],
        "quote": "\\\",{\"urn\":",
    })
}

#[test]
fn the_cut_array_must_be_the_deployment_the_file_is_read_as() {
    // Both forms in one file, the backend form first: the first
    // `resources` array is `checkpoint.latest`'s, but the file is read as
    // its `deployment`.
    let latest = file(60, |i| json!({"n": i}))["deployment"].clone();
    let deployment = file(3, |i| json!({"m": i}))["deployment"].clone();
    let f = json!({
        "version": 3,
        "checkpoint": {"stack": "dev", "latest": latest},
        "deployment": deployment,
    });
    let text = urn_first(&f);
    assert!(text.find("\"checkpoint\"") < text.find("\"deployment\""));
    assert_eq!(
        whole(&text)
            .unwrap()
            .deployment_ref()
            .unwrap()
            .resources
            .len(),
        4
    );
    assert_eq!(sweep(&text, 13), 0);
}

#[test]
fn look_alikes_inside_states_never_change_the_answer() {
    let f = file(50, look_alikes);
    for text in [text(&f, false), text(&f, true)] {
        // Answers match (`check`); cuts that land on look-alikes decline.
        let answered = sweep(&text, 11);
        assert!(answered > text.len() / 11 / 4, "{answered} answered");
    }
}

#[test]
fn a_resources_array_ahead_of_the_real_one_declines_every_split() {
    let mut f = file(50, look_alikes);
    f["deployment"]["manifest"]["plugins"] =
        json!([{"name": "x", "resources": [{"urn": "y"}, {"urn": "z"}]}]);
    for text in [text(&f, false), text(&f, true)] {
        assert!(text.find("\"resources\"") < text.find("Thing::r0"));
        assert_eq!(sweep(&text, 11), 0);
    }
}

#[test]
fn element_look_alikes_after_the_array_decline_every_cut_among_them() {
    // An unmodeled key after `resources` holds a long array of objects
    // that start with `"urn"`, as states do: a cut among them must not
    // be taken for one inside `resources` (the first run would end at
    // `resources`' `]`, short of the cut).
    let mut f = file(20, |i| json!({"n": i}));
    let fakes: Vec<Value> = (0..200)
        .map(|i| json!({"urn": format!("urn:pulumi:dev::p::sim:index:Thing::x{i}"), "custom": true, "type": "sim:index:Thing"}))
        .collect();
    f["deployment"]["zzLater"] = Value::Array(fakes);
    for text in [urn_first(&f), text(&f, true)] {
        let fakes_at = text.find("Thing::x0").unwrap();
        assert!(text.find("Thing::r19").unwrap() < fakes_at);
        let answered = (fakes_at..text.len())
            .step_by(29)
            .filter(|&at| check(&text, at))
            .count();
        assert_eq!(answered, 0);
        // Cuts inside `resources` still answer.
        assert!(sweep(&text[..], 29) > 0);
    }
}

#[test]
fn a_bad_head_is_left_to_the_one_thread_decode() {
    let text = text(&file(40, |i| json!({"n": i})), false);
    let at = text.len() / 2;
    // A malformed URN, a truncated element, a missing comma: all before
    // the cut.
    let bad_urn = text.replacen("Thing::r3\"", "Thing r3\"", 1);
    let missing_comma = text.replacen(
        "},{\"urn\":\"urn:pulumi:dev::p::sim:index:Thing::r5\"",
        "}{\"urn\":\"urn:pulumi:dev::p::sim:index:Thing::r5\"",
        1,
    );
    for bad in [bad_urn, missing_comma, text[..text.len() - 3].to_owned()] {
        assert!(whole(&bad).is_none());
        assert!(decode_at(&bad, at).is_none());
    }
}

#[test]
fn a_state_nested_past_the_readers_limit_is_not_read_by_the_split() {
    let deep = |levels: usize| (0..levels).fold(json!(1), |v, _| json!([v]));
    // In a file, a state sits under three levels (file, deployment,
    // resources): its `stackTrace` object and its value add two more. (A
    // property map that deep is not kept as text, so the split does not
    // answer for it; see `property_map`'s tests.)
    for (levels, readable) in [(118, true), (122, true), (123, false), (126, false)] {
        let mut f = file(40, |i| json!({"n": i}));
        f["deployment"]["resources"][3]["stackTrace"] = json!({"v": deep(levels)});
        let text = urn_first(&f);
        assert_eq!(whole(&text).is_some(), readable, "{levels} levels");
        let at = text.len() / 2;
        // Answered only when the one-thread decode reads it (`check`), and
        // then only when the state is within the split's limit.
        assert_eq!(
            check(&text, at),
            readable && levels + 2 <= MAX_ELEMENT_DEPTH,
            "{levels} levels"
        );
    }
}

#[test]
fn characters_of_several_bytes_are_read_whole_across_windows() {
    // Strings of two-, three- and four-byte characters, so that windows
    // and cuts land inside characters.
    let f = file(
        40,
        |i| json!({"name": format!("é{i}漢字🦀"), "n": "ü".repeat(i % 7)}),
    );
    for text in [text(&f, false), text(&f, true)] {
        let inside = (0..text.len())
            .filter(|&at| !text.is_char_boundary(at))
            .count();
        assert!(inside > 100, "{inside} offsets inside characters");
        // `check` compares windows of 64-332 bytes with the text.
        let answered = (0..text.len())
            .step_by(13)
            .filter(|&at| check(&text, at))
            .count();
        assert!(answered > text.len() / 13 / 2, "{answered} answered");
    }
}

#[test]
fn bytes_that_are_not_utf8_or_cannot_be_read_are_left_to_the_one_thread_decode() {
    let text = text(&file(40, |i| json!({"name": format!("é{i}")})), false);
    let at = text.len() / 2;
    let windows =
        |bytes: &[u8], size| decode_with(&|| Windowed::new(bytes, size), bytes.len(), at).is_some();
    assert!(windows(text.as_bytes(), 64));
    // A stray continuation byte in a string, before and after the cut,
    // and a character cut off by the end of the file.
    for place in [text.find("é3").unwrap(), text.rfind("é3").unwrap()] {
        let mut bad = text.clone().into_bytes();
        bad[place + 1] = b'x';
        assert!(std::str::from_utf8(&bad).is_err());
        for size in [64, 331, WINDOW_BYTES] {
            assert!(!windows(&bad, size), "{size}-byte windows");
        }
    }
    let mut cut = text.clone().into_bytes();
    cut.extend_from_slice(&"🦀".as_bytes()[..2]);
    assert!(!windows(&cut, 64));
    // A source whose reads fail after a few.
    struct Failing<'a>(&'a [u8], std::sync::atomic::AtomicUsize);
    impl ReadAt for Failing<'_> {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read_exact_at(&self, buf: &mut [u8], at: usize) -> std::io::Result<()> {
            if self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 5 {
                return Err(std::io::ErrorKind::Other.into());
            }
            self.0.read_exact_at(buf, at)
        }
    }
    let failing = Failing(text.as_bytes(), 0.into());
    assert!(decode_with(&|| Windowed::new(&failing, 64), text.len(), at).is_none());
}

#[test]
fn runs_whose_first_states_are_smaller_or_larger_than_the_rest_decode_the_same() {
    // Each run sizes its interning table at the density of its first
    // `SAMPLE_STATES` states: a guess far too low (small states first)
    // or far too high (large ones first) changes no value.
    let n = 3 * SAMPLE_STATES;
    let big = |i: usize| json!({"blob": "x".repeat(2_000), "n": i});
    let small = |i: usize| json!({"n": i});
    for large_first in [false, true] {
        let f = file(n, |i| {
            let early = i % (n / 2) < SAMPLE_STATES;
            if early == large_first {
                big(i)
            } else {
                small(i)
            }
        });
        let text = text(&f, false);
        let answered = [text.len() / 3, text.len() / 2, text.len() * 2 / 3]
            .into_iter()
            .filter(|&at| check(&text, at))
            .count();
        assert_eq!(answered, 3, "large first: {large_first}");
    }
}

#[test]
fn a_reservation_the_system_refuses_leaves_a_growing_vec() {
    // More than the address space: refused, not an aborted process.
    let states = reserved_states(usize::MAX / 1024, 0);
    assert!(states.is_empty());
    assert!(states.capacity() < 1024);
    assert!(reserved_states(10, 10).capacity() >= 10);
}

#[test]
fn the_sentinel_is_unique_per_decode() {
    let (a, b) = (sentinel().unwrap(), sentinel().unwrap());
    assert_eq!(a.urn.name().len(), "keel-split-".len() + 32);
    assert_ne!(a.urn, b.urn);
}

/// Text fragments that look like the places the split cuts.
fn tricky() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "plain",
        r#",{"urn":""#,
        "},{",
        "[",
        "]",
        r#"\""#,
        r#""resources":["#,
        "\\",
        "urn",
        " ",
    ])
    .prop_map(str::to_owned)
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::collection::vec(tricky(), 0..4).prop_map(|v| Value::String(v.concat())),
        prop::collection::vec(prop::sample::select(vec!["é", "漢字", "🦀", "x"]), 0..6)
            .prop_map(|v| Value::String(v.concat())),
        any::<i32>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop_oneof![tricky(), Just("urn".to_owned())], inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn an_answer_is_always_the_one_thread_decode(
        outputs in prop::collection::vec(value(), 2..30),
        pretty in any::<bool>(),
        cut in 0.0f64..1.0,
    ) {
        let f = file(outputs.len(), |i| json!({"v": outputs[i]}));
        let text = text(&f, pretty);
        check(&text, (text.len() as f64 * cut) as usize);
    }

    /// Damaged files (a few bytes cut out and a look-alike put in, or the
    /// end cut off): the split answers only what the one-thread decode
    /// answers, and the same.
    #[test]
    fn a_damaged_file_is_answered_only_as_the_one_thread_decode(
        n in 4usize..24,
        pretty in any::<bool>(),
        edits in prop::collection::vec((0.0f64..1.0, 0usize..6, tricky()), 1..4),
        truncate in prop::option::of(0.5f64..1.0),
        cut in 0.0f64..1.0,
    ) {
        let f = file(n, |i| json!({"arn": format!("arn:sim:{i}")}));
        let mut text = text(&f, pretty).into_bytes();
        for (at, cut_out, put_in) in edits {
            let at = (text.len() as f64 * at) as usize;
            let end = (at + cut_out).min(text.len());
            text.splice(at..end, put_in.into_bytes());
        }
        if let Some(keep) = truncate {
            text.truncate((text.len() as f64 * keep) as usize);
        }
        // Every edit is ASCII over ASCII text, so the text stays UTF-8.
        let text = String::from_utf8(text).unwrap();
        check(&text, (text.len() as f64 * cut) as usize);
    }
}

#[test]
fn touching_the_spare_room_changes_no_state() {
    let mut states = reserved_states(10, 0);
    states.extend((0..2).map(|_| sentinel().unwrap()));
    let before = states.clone();
    // From the end of the states on, at most `n` slots, never past the
    // room; the length and the states stay as they were.
    assert_eq!(touch(&mut states, 2, 3), 5);
    let room = states.capacity();
    assert_eq!(touch(&mut states, 5, 100), room);
    assert_eq!(touch(&mut states, room, 4), room);
    assert_eq!(states, before);
    let more: Vec<State> = (0..8).map(|_| sentinel().unwrap()).collect();
    states.extend(more.iter().cloned());
    assert_eq!(states[..2], before[..]);
    assert_eq!(states[2..], more[..]);
}
