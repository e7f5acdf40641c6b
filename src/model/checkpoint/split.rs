//! A large checkpoint decoded on two threads, with the same result as one.
//!
//! Decoding is most of a load (P7 of `performance.md`), and a file's
//! `resources` array is most of its bytes. The array's elements are cut in
//! two runs: this thread decodes the first run state by state, a second
//! thread the second run, and then the rest of the file (everything but
//! the elements) with a *sentinel* state (a URN with a random 128-bit
//! nonce) in the elements' place. The places where the text is cut (the
//! array's `[`, an element's `{` near the middle) are found by searching
//! the text, so they are only guesses; the answer is used only when the
//! decodes prove them right:
//!
//! - the first run, read as JSON values separated by commas from just
//!   after the `[`, lands exactly on the cut `{` (a complete element, a
//!   comma, nothing else), and the second, read the same way from that
//!   `{`, ends at a `]` after its last value: the text between the `[`
//!   and that `]` is a run of whole elements, one after another;
//! - the sentinel is the only element of the decoded deployment's
//!   `resources`: the nonce occurs nowhere else, and the sentinel's `{`
//!   cannot sit inside a string (the `"` after it would close the string
//!   and `urn` cannot follow one), so the `[` before it, which is the
//!   original's byte at that offset, opens the `resources` array, and the
//!   `]` after it closes that array.
//!
//! The rest's bytes up to the `[` are the original's, and from the `]` on
//! the original's too, so the parser is in the same state after the
//! sentinel as after the original's last element; the original decodes to
//! the rest's deployment with the sentinel replaced by the two runs'
//! states, in order. No part of the file is copied but the rest (its head
//! and end, usually a few hundred bytes). One difference remains: each
//! element is read at the top level, three or four levels less deep than
//! in the file, where the reader's nesting limit (128) would refuse a
//! state nested more than 123 levels; an element that deep is refused
//! here too, so the whole file is decoded on one thread and fails there
//! as it must.
//!
//! Anything unproven (a guess that does not hold, an error in either run
//! or the rest, a file the one-pass reader would not take) returns
//! `None`, and the caller decodes the whole file on one thread, which also
//! names any error.

use super::{CheckpointFile, Fast};
use crate::model::snapshot::{reserved_states, states_room, with_states_hint};
use crate::model::state::State;
use crate::model::urn::{with_interning, TypeToken, Urn};

/// Files smaller than this are decoded on one thread: below it the second
/// thread costs about what it saves (measured when the split also copied
/// half the text; without the copy the break-even is, if anything, lower).
pub(super) const SPLIT_MIN_BYTES: usize = 1 << 20;

/// Where this thread's run ends: the first element at or after this
/// fraction of the text (in thousandths). Measured at 20,000 states: the
/// first half of the array decodes slower than the second (at 500 this
/// thread finished 1-3 ms after the other); at 470 it finishes first and
/// spends the wait mapping the memory the second run is moved into
/// (`touch`).
const SPLIT_AT_PER_MILLE: usize = 470;

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

/// [`decode`] with the first run ending at the first element found at or
/// after byte `at` (tests move it).
pub(super) fn decode_at(text: &str, at: usize) -> Option<CheckpointFile> {
    let open = array_of(text, "\"resources\"")?;
    let cut = element_at_or_after(text, at.max(open + 1))?;
    let sentinel = sentinel()?;
    let sentinel_json = serde_json::to_string(&sentinel).ok()?;
    std::thread::scope(|scope| {
        // The second run and the rest of the file, on a second thread.
        // They come back over a channel, not through `join`: the thread's
        // exit (its allocator's cache flushed, ~0.6 ms measured) then
        // overlaps the work here. `None` if the thread cannot start: the
        // whole file is then decoded on one thread.
        let (send, second) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("keel-decode".into())
            .spawn_scoped(scope, move || {
                // The receiver has gone only when this decode has failed.
                let _ = send.send(tail_and_rest(text, open, cut, &sentinel_json));
            })
            .ok()?;
        // The first run, here, into room for the whole array.
        let mut head = with_interning(|| {
            // Room in the interning table for this run's URNs only: a
            // table sized for the whole file is touched all over by its
            // inserts (~2 ms at 20,000 states, measured).
            let mut head = reserved_states(states_room(text.len()), states_room(cut - open));
            let end = read_elements(text, open + 1, Some(cut), &mut head)?;
            (end == cut).then_some(head)
        })?;
        // While the other thread works, the room its states will be moved
        // into (as many as its share of the text holds at this run's
        // density) is touched, its pages faulted in, so that the move
        // after it is a copy, not ~1,200 page faults (2-2.5 ms) at 20,000
        // states.
        let room = head
            .len()
            .saturating_add(head.len().saturating_mul(text.len() - cut) / (cut - open).max(1))
            .min(head.capacity());
        let mut touched = head.len();
        let (tail, mut file) = loop {
            match second.try_recv() {
                Ok(answer) => break answer?,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                Err(std::sync::mpsc::TryRecvError::Empty) if touched < room => {
                    touched = touch(&mut head, touched, 128);
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break second.recv().ok()??,
            }
        };
        let resources = &mut file.deployment_mut()?.resources;
        if resources.len() != 1 || resources[0].urn != sentinel.urn {
            return None;
        }
        head.extend(tail);
        head.shrink_to_fit();
        *resources = head;
        Some(*file)
    })
}

/// The second thread's share of [`decode_at`]: the states from `cut` to
/// the `]` after the last of them, and the rest of the file (all but the
/// array's elements) decoded with the sentinel in the elements' place.
fn tail_and_rest(
    text: &str,
    open: usize,
    cut: usize,
    sentinel_json: &str,
) -> Option<(Vec<State>, Box<CheckpointFile>)> {
    with_interning(|| {
        let room = states_room(text.len() - cut);
        let mut tail = reserved_states(room, room);
        let close = read_elements(text, cut, None, &mut tail)?;
        let mut rest = String::with_capacity(open + 1 + sentinel_json.len() + (text.len() - close));
        rest.push_str(&text[..=open]);
        rest.push_str(sentinel_json);
        rest.push_str(&text[close..]);
        match with_states_hint(rest.len(), || serde_json::from_str::<Fast>(&rest)) {
            Ok(Fast::Read(file)) => Some((tail, file)),
            _ => None,
        }
    })
}

/// Writes zeros over up to `n` slots of `states`' spare room from slot
/// `from` (counted from the start of the vector) on, so the memory is
/// mapped before states are moved there; returns where it stopped. The
/// slots stay unused (the vector's length does not change).
fn touch(states: &mut Vec<State>, from: usize, n: usize) -> usize {
    let len = states.len();
    let spare = states.spare_capacity_mut();
    let start = from.saturating_sub(len).min(spare.len());
    let end = (start + n).min(spare.len());
    for slot in &mut spare[start..end] {
        *slot = std::mem::MaybeUninit::zeroed();
    }
    std::hint::black_box(&spare[start..end]);
    len + end
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

/// Reads states, JSON values separated by commas (whitespace around them
/// allowed), from `text[from..]` into `out`, at least one, on this
/// thread's interning. With a `stop`, the run ends where a comma is
/// followed by a value at `stop` exactly (the offset returned); without
/// one, it ends at the `]` after a value (its offset returned). `None`
/// for anything else: a value that does not parse as a state or nests
/// deeper than [`MAX_ELEMENT_DEPTH`], another byte between values, a run
/// that passes `stop` or meets a `]` before it.
fn read_elements(
    text: &str,
    from: usize,
    stop: Option<usize>,
    out: &mut Vec<State>,
) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut pos = skip_ws(bytes, from);
    loop {
        let mut values = serde_json::Deserializer::from_str(text.get(pos..)?).into_iter::<State>();
        let state = values.next()?.ok()?;
        let end = pos + values.byte_offset();
        if too_deep(&bytes[pos..end]) {
            return None;
        }
        out.push(state);
        pos = skip_ws(bytes, end);
        match bytes.get(pos) {
            Some(b',') => {
                pos = skip_ws(bytes, pos + 1);
                if let Some(stop) = stop {
                    if pos >= stop {
                        return (pos == stop).then_some(pos);
                    }
                }
            }
            Some(b']') if stop.is_none() => return Some(pos),
            _ => return None,
        }
    }
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
