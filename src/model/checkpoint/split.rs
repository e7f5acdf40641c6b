//! A large checkpoint decoded on two threads, with the same result as one.
//!
//! Decoding is most of a load (P7 of `performance.md`), and a file's
//! `resources` array is most of its bytes. This thread decodes the file with
//! the head of that array cut out and a *sentinel* state (a URN with a
//! random 128-bit nonce) spliced in its place; a second thread decodes the
//! cut-out head, state by state, from the original text. The two places
//! where the head is cut (the array's `[`, an element's `{` near the middle
//! of the file) are found by searching the text, so they are only guesses;
//! the answer is used only when both decodes prove them right:
//!
//! - the second thread reads JSON values separated by commas from just
//!   after the `[` and lands exactly on the `{` (a complete element, a
//!   comma, nothing else): that text is a run of whole elements;
//! - the sentinel is the first element of the decoded deployment's
//!   `resources`: the nonce occurs nowhere else, and the sentinel's `{`
//!   cannot sit inside a string (the `"` after it would close the string
//!   and `urn` cannot follow one), so the `[` kept before it, which is the
//!   original's byte at that offset, opens the `resources` array.
//!
//! The bytes up to the `[` are the original's, and after the sentinel and
//! its comma the original's bytes from the `{` on, so the parser is in the
//! same state at both joins; the original decodes to this thread's
//! deployment with the sentinel replaced by the second thread's states.
//! One difference remains: the second thread reads each element at the top
//! level, three or four levels less deep than in the file, where the
//! reader's nesting limit (128) would refuse a state nested more than 123
//! levels; an element that deep is refused here too, so the whole file is
//! decoded on one thread and fails there as it must.
//!
//! Anything unproven (a guess that does not hold, an error in either half,
//! a file the one-pass reader would not take) returns `None`, and the
//! caller decodes the whole file on one thread, which also names any error.

use super::{CheckpointFile, Fast};
use crate::model::snapshot::{reserved_states, states_room, with_states_hint};
use crate::model::state::State;
use crate::model::urn::{with_interning, TypeToken, Urn};

/// Files smaller than this are decoded on one thread: below it the thread
/// and the copy of the text cost about what they save.
pub(super) const SPLIT_MIN_BYTES: usize = 1 << 20;

/// Where the second thread's share ends: the first element at or after
/// this fraction of the text (in thousandths). Measured at 20,000 states:
/// 420-540 give the same load time within the noise; this thread's copy
/// of its share costs about what the other's reading element by element
/// does.
const SPLIT_AT_PER_MILLE: usize = 500;

/// How deep (arrays and objects, the state's own object included) the
/// reader may nest a state that the second thread decodes: in a file, a
/// state sits in three (`deployment`) or four (`checkpoint.latest`)
/// levels, and the reader refuses 128.
const MAX_ELEMENT_DEPTH: usize = 123;

/// `text` (a whole file) decoded on two threads, or `None` when it is too
/// small or the split cannot be proven (see the module doc).
pub(super) fn decode(text: &str) -> Option<CheckpointFile> {
    if text.len() < SPLIT_MIN_BYTES {
        return None;
    }
    decode_at(text, text.len() * SPLIT_AT_PER_MILLE / 1000)
}

/// [`decode`] with the second thread's share ending at the first element
/// found at or after byte `at` (tests move it).
pub(super) fn decode_at(text: &str, at: usize) -> Option<CheckpointFile> {
    let open = array_of(text, "\"resources\"")?;
    let cut = element_at_or_after(text, at.max(open + 1))?;
    let sentinel = sentinel()?;
    let sentinel_json = format!("{},", serde_json::to_string(&sentinel).ok()?);
    std::thread::scope(|scope| {
        // The head, on a second thread (`None` if the thread cannot start:
        // the whole file is then decoded here).
        let head = std::thread::Builder::new()
            .name("keel-decode".into())
            .spawn_scoped(scope, || states_between(text, open + 1, cut))
            .ok();
        let mut spliced =
            String::with_capacity(open + 1 + sentinel_json.len() + (text.len() - cut));
        spliced.push_str(&text[..=open]);
        spliced.push_str(&sentinel_json);
        spliced.push_str(&text[cut..]);
        let tail = with_interning(|| {
            with_states_hint(spliced.len(), || serde_json::from_str::<Fast>(&spliced))
        });
        drop(spliced);
        let mut head = head?.join().ok()??;
        let Ok(Fast::Read(mut file)) = tail else {
            return None;
        };
        let resources = &mut file.deployment_mut()?.resources;
        if resources.first()?.urn != sentinel.urn {
            return None;
        }
        head.extend(resources.drain(1..));
        head.shrink_to_fit();
        *resources = head;
        Some(*file)
    })
}

/// The offset of the `[` of the first `key` followed by `:` and an array.
fn array_of(text: &str, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find(key) {
        let mut j = skip_ws(bytes, from + i + key.len());
        if bytes.get(j) == Some(&b':') {
            j = skip_ws(bytes, j + 1);
            if bytes.get(j) == Some(&b'[') {
                return Some(j);
            }
        }
        from += i + key.len();
    }
    None
}

/// The offset of the first `{` at or after `at` that looks like the start
/// of a state following another: a comma before it, `"urn"` and a colon
/// after it (whitespace allowed between).
fn element_at_or_after(text: &str, at: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = at;
    while let Some(i) = text.get(from..)?.find("\"urn\"") {
        let key = from + i;
        from = key + 5;
        let Some(brace) = before_ws(bytes, key) else {
            continue;
        };
        if bytes[brace] != b'{' || brace < at {
            continue;
        }
        let comma = before_ws(bytes, brace);
        let colon = skip_ws(bytes, key + 5);
        if comma.is_some_and(|c| bytes[c] == b',') && bytes.get(colon) == Some(&b':') {
            return Some(brace);
        }
    }
    None
}

/// The states of `text[from..to]`, which must be whole JSON values each
/// followed by a comma (whitespace around them allowed), at least one;
/// `None` otherwise or when one is nested deeper than
/// [`MAX_ELEMENT_DEPTH`]. Runs on its own thread, with its own interning.
fn states_between(text: &str, from: usize, to: usize) -> Option<Vec<State>> {
    let region = text.get(from..to)?;
    let bytes = region.as_bytes();
    with_interning(|| {
        // Room for the whole array: the other half is appended here.
        let mut out = reserved_states(states_room(text.len()));
        let mut pos = 0;
        loop {
            let mut values =
                serde_json::Deserializer::from_str(&region[pos..]).into_iter::<State>();
            let state = values.next()?.ok()?;
            let end = pos + values.byte_offset();
            if too_deep(&bytes[pos..end]) {
                return None;
            }
            out.push(state);
            pos = skip_ws(bytes, end);
            if bytes.get(pos) != Some(&b',') {
                return None;
            }
            pos = skip_ws(bytes, pos + 1);
            if pos == bytes.len() {
                return Some(out);
            }
        }
    })
}

/// Whether the JSON value `bytes` nests arrays and objects deeper than
/// [`MAX_ELEMENT_DEPTH`] (counted only for values with that many brackets
/// at all, which states almost never have).
fn too_deep(bytes: &[u8]) -> bool {
    // Depth needs as many brackets; few values have that many at all.
    if memchr::memchr2_iter(b'{', b'[', bytes)
        .nth(MAX_ELEMENT_DEPTH)
        .is_none()
    {
        return false;
    }
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest > MAX_ELEMENT_DEPTH
}

/// The offset of the first non-whitespace byte at or after `i`.
fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// The offset of the last non-whitespace byte before `i`.
fn before_ws(bytes: &[u8], i: usize) -> Option<usize> {
    bytes[..i]
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// A state no real state equals: its URN's name is 128 random bits from
/// the OS (`None` if it gives none). Both the split decode and the base
/// encoder (`persist::encode`) cut files where one is.
pub(crate) fn sentinel() -> Option<State> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let urn = Urn::parse(&format!(
        "urn:pulumi:keel::split::keel:split:Sentinel::keel-split-{name}"
    ))
    .ok()?;
    let ty = TypeToken::parse("keel:split:Sentinel").ok()?;
    Some(State::new(urn, ty, false))
}

#[cfg(test)]
mod tests;
