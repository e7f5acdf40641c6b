//! Bad input at the `keel` command's boundary, through the binary:
//! terminal control characters in names and values.

mod common;

use common::cli::*;

use serde_json::json;

#[test]
fn control_characters_are_escaped_in_human_output() {
    let k = Keel::new();
    let program = json!({
        "name": "site",
        "resources": {
            "evil\u{1b}[2J": {
                "type": "aws:s3/bucket:Bucket",
                "properties": { "title": "red\u{1b}[31m\u{7}" }
            }
        },
        "outputs": { "title\u{1b}[1m": "x\u{1b}]0;owned\u{7}" }
    });
    let file = k.write("evil.json", &program.to_string());
    let runs: [&[&str]; 6] = [
        &["up", "--program", &file],
        &["up", "--json", "--program", &file],
        &["state", "show"],
        &["state", "show", "--json"],
        &["cloud", "list"],
        &["cloud", "list", "--json"],
    ];
    for args in runs {
        let o = k.run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        for (what, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            assert!(
                !bytes.contains(&0x1b) && !bytes.contains(&0x07),
                "{args:?}: a raw control character on {what}:\n{}",
                text(bytes)
            );
        }
    }
    // Escaped, not dropped.
    let shown = k.ok(&["state", "show"]);
    assert!(shown.contains("evil\\u{1b}[2J"), "{shown}");
    let out = k.ok(&["up", "--program", &file]);
    assert!(out.contains("x\\u{1b}]0;owned\\u{7}"), "{out}");
}
