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
//! states, in order. One difference remains: each element is read at the
//! top level, three or four levels less deep than in the file, where the
//! reader's nesting limit (128) would refuse a state nested more than 123
//! levels; an element that deep is refused here too, so the whole file is
//! decoded on one thread and fails there as it must.
//!
//! Each thread sees the text through a [`Window`]: a text in memory whole
//! ([`decode`]), or a file read through a small buffer of its own that it
//! refills where its reading goes ([`decode_windows`]: a base checkpoint
//! is never held whole in memory; at 11 MB the whole-file buffer cost
//! ~2,700 page faults a load). Every search and every read asks for more
//! text when what it holds ends before its answer (an element cut by the
//! window's end is read again from its start in a window that holds it;
//! the window doubles when one does not); a window's bytes are checked as
//! UTF-8 when they are read (a character cut by the window's end waits
//! for the next), so the windows decide as the whole text would. Only
//! the rest (its head and end, usually a few hundred bytes) is copied.
//!
//! Anything unproven (a guess that does not hold, an error in either run
//! or the rest, a file the one-pass reader would not take, bytes that
//! cannot be read or are not UTF-8) returns
//! `None`, and the caller decodes the whole file on one thread, which also
//! names any error.

use super::{CheckpointFile, Fast};
use crate::model::property_map::with_lazy_maps;
use crate::model::snapshot::{reserved_states, states_room, with_states_hint};
use crate::model::state::State;
use crate::model::urn::{reserve_interned_urns, with_interning, TypeToken, Urn};

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

/// How many states a run reads before it sizes the interning table for
/// the rest of the run at their density (plus an eighth). Sized from the
/// fewest bytes a state can take ([`states_room`]: 160, where the
/// harness's states take ~560), the table was 2 MB a run at 20,000
/// states, and its inserts, scattered over all of it, faulted in ~580
/// more pages a load than a table sized for the URNs there are; a guess
/// too low costs a doubling of the table, as without a reservation.
const SAMPLE_STATES: usize = 64;

/// How deep (arrays and objects, the state's own object included) the
/// reader may nest a state that the second thread decodes: in a file, a
/// state sits in three (`deployment`) or four (`checkpoint.latest`)
/// levels, and the reader refuses 128.
const MAX_ELEMENT_DEPTH: usize = 123;

/// `f`, a decode on this thread, with URNs interned and property maps
/// kept as text (`with_lazy_maps`): anything it does not prove, the
/// caller's careful path decodes again, naming any error.
fn with_interning_lazy<T>(f: impl FnOnce() -> T) -> T {
    with_interning(|| with_lazy_maps(f))
}

/// `text` (a whole file) decoded on two threads, or `None` when it is too
/// small or the split cannot be proven (see the module doc).
pub(super) fn decode(text: &str) -> Option<CheckpointFile> {
    if text.len() < SPLIT_MIN_BYTES {
        return None;
    }
    decode_with(
        &|| Whole(text),
        text.len(),
        text.len() * SPLIT_AT_PER_MILLE / 1000,
    )
}

/// The file `src` holds decoded on two threads, each reading its part
/// through a window of [`WINDOW_BYTES`] it reuses, or `None` when the file
/// is too small, cannot be read or the split cannot be proven.
pub(super) fn decode_windows(src: &(impl ReadAt + ?Sized)) -> Option<CheckpointFile> {
    let total = src.len();
    if total < SPLIT_MIN_BYTES {
        return None;
    }
    decode_with(
        &|| Windowed::new(src, WINDOW_BYTES),
        total,
        total * SPLIT_AT_PER_MILLE / 1000,
    )
}

/// A file's text of `total` bytes (each thread reads it through its own
/// `window()`) decoded with the first run ending at the first element
/// found at or after byte `at` (tests move it).
fn decode_with<W: Window>(
    window: &(dyn Fn() -> W + Sync),
    total: usize,
    at: usize,
) -> Option<CheckpointFile> {
    let mut here = window();
    let open = array_of(&mut here, "\"resources\"")?;
    let cut = element_at_or_after(&mut here, at.max(open + 1))?;
    let sentinel = sentinel()?;
    let sentinel_json = serde_json::to_string(&sentinel).ok()?;
    std::thread::scope(|scope| {
        // The second run and the rest of the file, on a second thread.
        // They come back over a channel, not through `join`: the thread's
        // exit (its allocator's cache flushed, ~0.6 ms measured) then
        // overlaps the work here. `None` if the thread cannot start: the
        // whole file is then decoded on one thread.
        let (send, second) = std::sync::mpsc::sync_channel(1);
        let sentinel_json = &sentinel_json;
        std::thread::Builder::new()
            .name("keel-decode".into())
            .spawn_scoped(scope, move || {
                let answer = tail_and_rest(&mut window(), total, open, cut, sentinel_json);
                // The receiver has gone only when this decode has failed.
                let _ = send.send(answer);
            })
            .ok()?;
        // The first run, here, into room for the whole array.
        let mut head = with_interning_lazy(|| {
            // Room in the interning table for this run's URNs only, given
            // once a sample of them shows their density (`read_elements`):
            // a table sized for more is touched all over by its inserts
            // (~2 ms at 20,000 states for one sized for the whole file).
            let mut head = reserved_states(states_room(total), 0);
            let end = read_elements(&mut here, open + 1, Some(cut), cut, &mut head)?;
            (end == cut).then_some(head)
        })?;
        drop(here);
        // While the other thread works, the room its states will be moved
        // into (as many as its share of the text holds at this run's
        // density) is touched, its pages faulted in, so that the move
        // after it is a copy, not ~1,200 page faults (2-2.5 ms) at 20,000
        // states.
        let room = head
            .len()
            .saturating_add(head.len().saturating_mul(total - cut) / (cut - open).max(1))
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

/// The second thread's share of [`decode_with`]: the states from `cut` to
/// the `]` after the last of them, and the rest of the file (all but the
/// array's elements) decoded with the sentinel in the elements' place.
fn tail_and_rest<W: Window>(
    w: &mut W,
    total: usize,
    open: usize,
    cut: usize,
    sentinel_json: &str,
) -> Option<(Vec<State>, Box<CheckpointFile>)> {
    with_interning_lazy(|| {
        let room = states_room(total - cut);
        let mut tail = reserved_states(room, 0);
        let close = read_elements(w, cut, None, total, &mut tail)?;
        let mut rest = String::with_capacity(open + 1 + sentinel_json.len() + (total - close));
        rest.push_str(span(w, 0, open + 1)?);
        rest.push_str(sentinel_json);
        rest.push_str(span(w, close, total)?);
        match with_states_hint(rest.len(), || serde_json::from_str::<Fast>(&rest)) {
            Ok(Fast::Read(file)) => Some((tail, file)),
            _ => None,
        }
    })
}

/// Bytes that can be read at any offset (an open file), shared by the
/// decode's two threads.
pub trait ReadAt: Sync {
    /// How many bytes there are.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes from offset `at` on.
    ///
    /// # Errors
    /// When they cannot all be read.
    fn read_exact_at(&self, buf: &mut [u8], at: usize) -> std::io::Result<()>;
}

impl ReadAt for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn read_exact_at(&self, buf: &mut [u8], at: usize) -> std::io::Result<()> {
        let end = at.checked_add(buf.len()).filter(|&e| e <= self.len());
        let bytes = end.map(|e| &self[at..e]).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end")
        })?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

/// How many bytes a decode thread's window holds at first (it grows, by
/// doubling, only for an element larger than it): small enough that its
/// pages are mapped once and stay in the cache, large enough that the
/// reads are few (~45 per thread for the harness's 11 MB).
const WINDOW_BYTES: usize = 128 << 10;

/// The text of a file as one decode thread sees it.
trait Window {
    /// The text from byte `at` on, as far as this window reaches (empty at
    /// the end of the file); with `more`, further than the last call with
    /// the same `at` gave. `None` when there is no more (with `more`) or
    /// the bytes cannot be read or are not UTF-8.
    fn text_at(&mut self, at: usize, more: bool) -> Option<&str>;

    /// The first character boundary at or after byte `at` (`None` when
    /// the bytes cannot be read).
    fn boundary(&mut self, at: usize) -> Option<usize>;
}

/// A whole text in memory: every call sees the rest of it.
struct Whole<'t>(&'t str);

impl Window for Whole<'_> {
    fn text_at(&mut self, at: usize, more: bool) -> Option<&str> {
        if more {
            return None;
        }
        self.0.get(at..)
    }

    fn boundary(&mut self, mut at: usize) -> Option<usize> {
        if at > self.0.len() {
            return None;
        }
        while !self.0.is_char_boundary(at) {
            at += 1;
        }
        Some(at)
    }
}

/// A file read through a window that is refilled where the reading goes.
struct Windowed<'s, R: ?Sized> {
    src: &'s R,
    /// The window: the bytes from `start` on, validated as UTF-8 (a
    /// character cut by its end is left to the next fill).
    text: String,
    start: usize,
    /// How many bytes a fill reads.
    size: usize,
}

impl<'s, R: ReadAt + ?Sized> Windowed<'s, R> {
    fn new(src: &'s R, size: usize) -> Self {
        Self {
            src,
            text: String::new(),
            start: 0,
            // A window holds at least one character.
            size: size.max(4),
        }
    }

    /// Reads the window from `at` on.
    fn fill(&mut self, at: usize) -> Option<()> {
        let total = self.src.len();
        let n = self.size.min(total.checked_sub(at)?);
        let mut bytes = std::mem::take(&mut self.text).into_bytes();
        // Writes zeros only past the last fill's length.
        bytes.resize(n, 0);
        self.src.read_exact_at(&mut bytes, at).ok()?;
        self.text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let bad = e.utf8_error();
                // Only a character cut by the window's end waits for the
                // next fill; anything else is not UTF-8.
                if bad.error_len().is_some() || at + n == total || bad.valid_up_to() == 0 {
                    return None;
                }
                let mut bytes = e.into_bytes();
                bytes.truncate(bad.valid_up_to());
                String::from_utf8(bytes).ok()?
            }
        };
        self.start = at;
        Some(())
    }
}

impl<R: ReadAt + ?Sized> Window for Windowed<'_, R> {
    fn text_at(&mut self, at: usize, more: bool) -> Option<&str> {
        let end = self.start + self.text.len();
        let held = self.start <= at && at < end;
        if more {
            if !held || end >= self.src.len() {
                return None;
            }
            // Already from `at` on: a larger window.
            if at == self.start {
                self.size = self.size.saturating_mul(2);
            }
            self.fill(at)?;
        } else if !held {
            if at == self.src.len() {
                return Some("");
            }
            self.fill(at)?;
        }
        self.text.get(at - self.start..)
    }

    fn boundary(&mut self, at: usize) -> Option<usize> {
        // A character's bytes after its first are 0b10xxxxxx; it has at
        // most three.
        let mut bytes = [0u8; 3];
        let n = bytes.len().min(self.src.len().checked_sub(at)?);
        self.src.read_exact_at(&mut bytes[..n], at).ok()?;
        Some(at + bytes[..n].iter().take_while(|&&b| b & 0xC0 == 0x80).count())
    }
}

/// `w`'s text from `from` to `to`.
fn span<W: Window>(w: &mut W, from: usize, to: usize) -> Option<&str> {
    let n = to.checked_sub(from)?;
    let mut more = false;
    while w.text_at(from, more)?.len() < n {
        more = true;
    }
    w.text_at(from, false)?.get(..n)
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

/// What a search of a window found.
enum Found {
    /// The offset in the window.
    At(usize),
    /// Nothing the window decides: the answer needs text past its end.
    More,
}

/// Searches `w`'s text from `from` on with `search`, in larger windows
/// while it needs more; the offset found.
fn search<W: Window>(w: &mut W, from: usize, search: impl Fn(&str) -> Found) -> Option<usize> {
    let mut more = false;
    loop {
        match search(w.text_at(from, more)?) {
            Found::At(i) => return Some(from + i),
            Found::More => more = true,
        }
    }
}

/// The offset of the `[` of the first `key` followed by `:` and an array.
fn array_of<W: Window>(w: &mut W, key: &str) -> Option<usize> {
    search(w, 0, |text| {
        let bytes = text.as_bytes();
        let mut from = 0;
        while let Some(i) = memchr::memmem::find(&bytes[from..], key.as_bytes()) {
            from += i + key.len();
            let colon = skip_ws(bytes, from);
            match bytes.get(colon) {
                None => return Found::More,
                Some(b':') => {
                    let open = skip_ws(bytes, colon + 1);
                    match bytes.get(open) {
                        None => return Found::More,
                        Some(b'[') => return Found::At(open),
                        Some(_) => {}
                    }
                }
                Some(_) => {}
            }
        }
        Found::More
    })
}

/// How far before the offset it searches from [`element_at_or_after`]
/// reads, for the comma before an element's `{`.
const LOOK_BACK: usize = 256;

/// The offset of the first `{` at or after `at` that looks like the start
/// of a state following another: a comma before it, `"urn"` and a colon
/// after it (whitespace allowed between).
fn element_at_or_after<W: Window>(w: &mut W, at: usize) -> Option<usize> {
    let from = w.boundary(at.saturating_sub(LOOK_BACK))?.min(at);
    let at = at - from;
    search(w, from, |text| {
        let bytes = text.as_bytes();
        let mut from = at;
        while let Some(i) = bytes
            .get(from..)
            .and_then(|b| memchr::memmem::find(b, b"\"urn\""))
        {
            let key = from + i;
            from = key + 5;
            let Some(brace) = before_ws(bytes, key) else {
                continue;
            };
            if bytes[brace] != b'{' || brace < at {
                continue;
            }
            let comma = before_ws(bytes, brace);
            match bytes.get(skip_ws(bytes, key + 5)) {
                None => return Found::More,
                Some(b':') if comma.is_some_and(|c| bytes[c] == b',') => return Found::At(brace),
                Some(_) => {}
            }
        }
        Found::More
    })
}

/// Reads states, JSON values separated by commas (whitespace around them
/// allowed), from `w`'s text at `from` on into `out`, at least one, on
/// this thread's interning. With a `stop`, the run ends where a comma is
/// followed by a value at `stop` exactly (the offset returned); without
/// one, it ends at the `]` after a value (its offset returned). `None`
/// for anything else: a value that does not parse as a state or nests
/// deeper than [`MAX_ELEMENT_DEPTH`], another byte between values, a run
/// that passes `stop` or meets a `]` before it.
///
/// Once [`SAMPLE_STATES`] states are read, the interning table is given
/// room for the URNs of the rest of the run, up to `run_end`.
fn read_elements<W: Window>(
    w: &mut W,
    from: usize,
    stop: Option<usize>,
    run_end: usize,
    out: &mut Vec<State>,
) -> Option<usize> {
    let (mut pos, _) = next_byte(w, from)?;
    let (first, sampled) = (pos, out.len() + SAMPLE_STATES);
    loop {
        let (state, end) = read_state(w, pos)?;
        out.push(state);
        if out.len() == sampled {
            let left = run_end.saturating_sub(end);
            let urns = left / ((end - first) / SAMPLE_STATES).max(1);
            reserve_interned_urns((urns + urns / 8).min(states_room(left)));
        }
        let (at, byte) = next_byte(w, end)?;
        match byte {
            Some(b',') => {
                (pos, _) = next_byte(w, at + 1)?;
                if let Some(stop) = stop {
                    if pos >= stop {
                        return (pos == stop).then_some(pos);
                    }
                }
            }
            Some(b']') if stop.is_none() => return Some(at),
            _ => return None,
        }
    }
}

/// The state whose text starts at `at` and the offset just past it,
/// read in larger windows while the window ends inside it.
fn read_state<W: Window>(w: &mut W, at: usize) -> Option<(State, usize)> {
    let mut more = false;
    loop {
        let text = w.text_at(at, more)?;
        let mut values = serde_json::Deserializer::from_str(text).into_iter::<State>();
        match values.next()? {
            Ok(state) => {
                let n = values.byte_offset();
                if too_deep(&text.as_bytes()[..n]) {
                    return None;
                }
                return Some((state, at + n));
            }
            // An element cut by the window's end does not always fail as
            // cut: a property map kept as text is scanned by a reader
            // that calls a number cut after its `-` invalid, not ended.
            // So any error asks for more text, and is final only when
            // there is none (`text_at` is then `None`).
            Err(_) => more = true,
        }
    }
}

/// The offset of the first non-whitespace byte at or after `at` and that
/// byte (`None` at the end of the text).
fn next_byte<W: Window>(w: &mut W, mut at: usize) -> Option<(usize, Option<u8>)> {
    loop {
        let text = w.text_at(at, false)?.as_bytes();
        if text.is_empty() {
            return Some((at, None));
        }
        let i = skip_ws(text, 0);
        if i < text.len() {
            return Some((at + i, Some(text[i])));
        }
        at += text.len();
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
