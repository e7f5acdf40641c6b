//! keel's journal format (`checkpoint.md` §5): deterministic encoding,
//! decoding with torn-tail and corruption detection, and replay. No I/O.
//!
//! A record is `[length: u32 LE][CRC-32C of payload: u32 LE][payload]`; the
//! payload is one JSON entry with a `seq` and an `op`. Entries mirror the
//! engine's mutations. A state an entry acts on is named by a [`Ref`]: its
//! position in the base checkpoint (`{"base": i}`) or among the states
//! written by earlier entries of this journal (`{"new": n}`), so replay
//! folds entries into a [`SnapshotBuilder`] exactly as the live run did.

use serde::{Deserialize, Serialize};

use super::{Change, Mutation, OpId, SnapshotBuilder};
use crate::model::snapshot::OperationType;
use crate::model::step::share;
use crate::model::{PropertyMap, State};

/// Bytes of a record's header (length and CRC).
pub const HEADER: usize = 8;
/// The largest payload keel writes or accepts (a bound on garbage lengths).
pub const MAX_PAYLOAD: usize = 256 << 20;

/// Names a state: in the base checkpoint, or written by this journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ref {
    /// Position in the base checkpoint's resources.
    Base(usize),
    /// Position among the states written by earlier entries.
    New(usize),
}

/// A whole state in an entry: owned when read back from a journal,
/// borrowed when keel encodes one, so recording a step does not copy the
/// state it writes. Both encode the same; equality is the states'.
#[derive(Debug)]
pub enum EntryState<'a> {
    /// Read back (or built) here.
    Owned(Box<State>),
    /// The state being recorded, borrowed for the encoding.
    Borrowed(&'a State),
}

impl EntryState<'_> {
    /// The state, owned (a copy when borrowed).
    pub fn into_owned(self) -> Box<State> {
        match self {
            Self::Owned(s) => s,
            Self::Borrowed(s) => Box::new(s.clone()),
        }
    }
}

impl std::ops::Deref for EntryState<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        match self {
            Self::Owned(s) => s,
            Self::Borrowed(s) => s,
        }
    }
}

impl Clone for EntryState<'_> {
    fn clone(&self) -> Self {
        match self {
            Self::Owned(s) => Self::Owned(s.clone()),
            Self::Borrowed(s) => Self::Borrowed(s),
        }
    }
}

impl PartialEq for EntryState<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Serialize for EntryState<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for EntryState<'_> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<State>::deserialize(d).map(Self::Owned)
    }
}

/// The effect of a finished operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeRecord<'a> {
    /// A state is written, superseding `old` (or keeping it, marked delete).
    Write {
        /// The superseded state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old: Option<Ref>,
        /// Keep `old`, marked `delete`.
        #[serde(
            default,
            skip_serializing_if = "std::ops::Not::not",
            rename = "markOldDelete"
        )]
        mark_old_delete: bool,
        /// The state written.
        state: EntryState<'a>,
    },
    /// A prior state is written unchanged (moves to the written states).
    Keep {
        /// The state kept.
        old: Ref,
    },
    /// A state leaves the deployment.
    Remove {
        /// The state removed.
        old: Ref,
    },
    /// A state stays, marked `pendingReplacement`.
    PendingReplacement {
        /// The state marked.
        old: Ref,
    },
}

/// One state of a [`Entry::SchemaUpgrade`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpgradedState {
    /// The state upgraded.
    pub target: Ref,
    /// Its upgraded contents.
    pub state: Box<State>,
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Entry<'a> {
    /// A provider operation is about to start.
    Begin {
        /// Sequence number (strictly increasing).
        seq: u64,
        /// The operation.
        op: OpId,
        /// What it does.
        #[serde(rename = "type")]
        ty: OperationType,
        /// The resource as it was.
        state: EntryState<'a>,
    },
    /// An operation (or a change with no provider call, `op` 0) finished.
    Success {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: OpId,
        /// Its effect.
        change: ChangeRecord<'a>,
    },
    /// An operation failed; nothing changed.
    Failure {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: OpId,
    },
    /// A state was refreshed (or found gone).
    Refresh {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: OpId,
        /// The state refreshed.
        old: Ref,
        /// The refreshed state; absent: the object is gone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<EntryState<'a>>,
    },
    /// A state's outputs were set.
    Outputs {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: OpId,
        /// The state.
        target: Ref,
        /// The outputs.
        outputs: PropertyMap,
    },
    /// A component migration was committed (`migrations.md` §10).
    StateMigration {
        /// Sequence number.
        seq: u64,
        /// The operation (0: not a provider operation).
        op: OpId,
        /// The new base order, result states and patches.
        #[serde(flatten)]
        record: Box<super::migration::MigrationRecord>,
    },
    /// Prior states were upgraded to their types' current schema versions
    /// (`architecture.md` §8): one entry for the batch.
    SchemaUpgrade {
        /// Sequence number.
        seq: u64,
        /// The operation (0: not a provider operation).
        op: OpId,
        /// Each state upgraded and its upgraded contents.
        states: Vec<UpgradedState>,
    },
    /// A new base checkpoint was written.
    Compacted {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: OpId,
    },
}

impl Entry<'_> {
    /// The entry's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Self::Begin { seq, .. }
            | Self::Success { seq, .. }
            | Self::Failure { seq, .. }
            | Self::Refresh { seq, .. }
            | Self::Outputs { seq, .. }
            | Self::StateMigration { seq, .. }
            | Self::SchemaUpgrade { seq, .. }
            | Self::Compacted { seq, .. } => *seq,
        }
    }
}

/// Why a journal could not be read or replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// A bad record is followed by good ones: the journal is damaged.
    #[error("the journal is corrupt at byte offset {offset}: {reason}; good records follow it, so it was not a torn write. Restore the stack directory from a backup, or move the journal aside to fall back to the base checkpoint (losing the steps it recorded)")]
    Corrupt {
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// Bytes no write of keel's could leave: a record header that is
    /// garbage, a length beyond [`MAX_PAYLOAD`], a payload that is not a
    /// JSON entry. Refused even at the end of the file (a torn write only
    /// leaves a prefix of whole framed records, possibly zero-filled).
    #[error("the journal is damaged at byte offset {offset}: {reason}; a torn write cannot leave this. Nothing was changed. Restore the stack directory from a backup, or move the journal aside to fall back to the base checkpoint (losing the steps it recorded)")]
    Garbage {
        /// Where the bad bytes start.
        offset: u64,
        /// What is wrong with them.
        reason: String,
    },
    /// The state replayed from the base and the journal breaks an
    /// integrity rule.
    #[error("the base checkpoint and the journal replay to a state that breaks an integrity rule: {0}. Nothing was changed. Restore the stack directory from a backup, or move the journal aside to fall back to the base checkpoint (losing the steps it recorded)")]
    Integrity(String),
    /// A record's entry does not apply to the state replayed so far.
    #[error("journal entry seq {seq} at byte offset {offset} cannot be replayed: {reason}")]
    BadEntry {
        /// The entry's sequence number.
        seq: u64,
        /// Where its record starts.
        offset: u64,
        /// Why.
        reason: ReplayError,
    },
}

/// Why a journal entry (or a migration's record) does not apply to the
/// state replayed so far, or cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The entry names a state that does not exist.
    #[error("it names {0:?}, which does not exist")]
    UnknownState(Ref),
    /// A migration's layout names a base position twice or out of range.
    #[error("layout names base index {index} twice or out of range ({len} base states)")]
    BaseIndex {
        /// The position.
        index: usize,
        /// The base states there are.
        len: usize,
    },
    /// A migration's layout names one of its states twice or out of range.
    #[error("layout names state index {index} twice or out of range ({len} states)")]
    StateIndex {
        /// The position.
        index: usize,
        /// The record's states.
        len: usize,
    },
    /// A migration's state is not in its layout.
    #[error("state index {0} is not in the layout")]
    StateNotLaidOut(usize),
    /// A base patch names a position the layout does not keep.
    #[error("a base patch names index {0}, which the layout does not keep")]
    BasePatch(usize),
    /// A new-state patch names an operation that wrote nothing.
    #[error("a new-state patch names operation {0}, which was not written")]
    NewPatch(usize),
    /// Recording a migration: a patched state is not where it must be
    /// (the base, or the states this operation wrote). A bug.
    #[error("a patched state ({urn}) is not {place}")]
    PatchedState {
        /// The state's URN.
        urn: String,
        /// Where it should have been.
        place: &'static str,
    },
}

/// Encodes one entry as a framed record.
pub fn encode(entry: &Entry<'_>) -> Vec<u8> {
    encode_in(entry, Vec::new())
}

/// [`encode`] into `out` (empty, with whatever room it was given).
fn encode_in(entry: &Entry<'_>, mut out: Vec<u8>) -> Vec<u8> {
    append_record(entry, &mut out);
    out
}

/// The room a journal gives its next record's buffer: a little more than
/// the larger of its last two records (an operation's begin and end
/// records alternate), at most [`RecordRoom::MAX`].
///
/// Each record is encoded into a buffer of its own (it is handed to the
/// writer); one started empty grew by doubling, about nine reallocations
/// (and copies) a record, 8 % of the instructions of a 20,000-resource
/// `up` (`BENCHMARKS.md`, twentieth slice). A guess too small costs one
/// doubling; too large, room freed once the record is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordRoom {
    last: [usize; 2],
}

impl RecordRoom {
    /// The most room a buffer is given up front (a larger record grows
    /// its buffer as it is encoded): one huge record (a migration's) must
    /// not make every later buffer huge.
    pub const MAX: usize = 64 << 10;

    /// The room for the next record.
    pub fn next(&self) -> usize {
        let larger = self.last[0].max(self.last[1]);
        (larger + larger / 8).min(Self::MAX)
    }

    /// Records that a record of `len` bytes was encoded.
    pub fn saw(&mut self, len: usize) {
        self.last = [self.last[1], len];
    }

    /// [`encode_with`] into a buffer of [`RecordRoom::next`] bytes,
    /// recording the record's length.
    ///
    /// # Errors
    /// As [`encode_with`].
    pub fn encode_with(
        &mut self,
        entry: &Entry<'_>,
        crypter: &crate::secrets::Crypter,
    ) -> Result<Vec<u8>, crate::secrets::SecretsError> {
        let out = encode_sealed(entry, crypter, Vec::with_capacity(self.next()))?;
        self.saw(out.len());
        Ok(out)
    }
}

/// Appends the records of `keep`s, each a sequence number and the base
/// state it kept ([`SnapshotBuilder::kept_from`]), to `out`: what
/// [`encode`] gives for each `keep` entry, one after the other.
pub fn encode_keeps(keeps: &[(u64, Ref)], out: &mut Vec<u8>) {
    for &(seq, old) in keeps {
        let entry = Entry::Success {
            seq,
            op: 0,
            change: ChangeRecord::Keep { old },
        };
        append_record(&entry, out);
    }
}

/// Appends `payload`, serialized, to `out` as one framed record: the
/// payload's length and CRC, then the payload.
fn append_record(payload: &impl Serialize, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    // Serializing an entry into memory cannot fail (string keys, finite
    // numbers); were it to, the payload is empty, as it always was.
    let written = crate::model::property_map::with_raw_writes(|| {
        crate::model::json_write::append(&mut *out, payload)
    });
    if written.is_err() {
        out.truncate(start + HEADER);
    }
    let body = &out[start + HEADER..];
    let len = (body.len() as u32).to_le_bytes();
    let crc = crc32c::crc32c(body).to_le_bytes();
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + HEADER].copy_from_slice(&crc);
}

/// Encodes one entry as [`encode`] does, first encrypting its plaintext
/// secrets with `crypter`: no plaintext secret is ever encoded, and one
/// the crypter has no manager for is refused.
///
/// The entry is encoded refusing plaintext secrets; only one that met a
/// plaintext secret goes through a `serde_json::Value` to be sealed.
///
/// # Errors
/// A secret cannot be encrypted, or there is no manager to encrypt it
/// ([`crate::secrets::SecretsError::NoProvider`] and the like).
pub fn encode_with(
    entry: &Entry<'_>,
    crypter: &crate::secrets::Crypter,
) -> Result<Vec<u8>, crate::secrets::SecretsError> {
    encode_sealed(entry, crypter, Vec::new())
}

/// [`encode_with`] into `out` (empty, with whatever room it was given).
fn encode_sealed(
    entry: &Entry<'_>,
    crypter: &crate::secrets::Crypter,
    out: Vec<u8>,
) -> Result<Vec<u8>, crate::secrets::SecretsError> {
    if let Ok(plain) = crate::model::property::refusing_plaintexts(|| encode_in(entry, out)) {
        return Ok(plain);
    }
    if crypter.manager().is_none() {
        return Err(crypter.missing());
    }
    let mut value = serde_json::to_value(entry).unwrap_or_default();
    crypter.encrypt_json(&mut value)?;
    let mut out = Vec::new();
    append_record(&value, &mut out);
    Ok(out)
}

/// A record read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Where the record starts.
    pub offset: u64,
    /// The entry.
    pub entry: Entry<'static>,
}

/// The records of a journal, and the torn tail cut off, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The whole records, in file order.
    pub records: Vec<Record>,
    /// The length of the valid prefix (the file is cut here on open).
    pub valid_len: u64,
    /// Why bytes after `valid_len` were cut off (a torn tail).
    pub torn: Option<String>,
}

/// Why no whole record could be read at an offset.
enum Bad {
    /// What a torn write can leave: a short header, a plausible length
    /// with a short payload, a CRC mismatch.
    Torn(String),
    /// What it cannot: a length beyond [`MAX_PAYLOAD`], a CRC-valid
    /// payload that is not an entry.
    Garbage(String),
}

/// Whether `bytes` can be (a prefix of) a payload keel wrote, some of its
/// blocks possibly never written (read back as zeros): nothing, JSON's `{`
/// first, or a zero first.
fn plausible_payload(bytes: &[u8]) -> bool {
    bytes.first().is_none_or(|&b| b == b'{' || b == 0)
}

/// Tries to read a whole, valid record at `at`.
fn record_at(bytes: &[u8], at: usize) -> Result<(Entry<'static>, usize), Bad> {
    let rest = &bytes[at..];
    if rest.len() < HEADER {
        return Err(Bad::Torn(format!(
            "{} bytes of a record header",
            rest.len()
        )));
    }
    if rest[..HEADER].iter().all(|&b| b == 0) {
        return Err(Bad::Torn("a zero-filled record header".into()));
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if len > MAX_PAYLOAD {
        return Err(Bad::Garbage(format!(
            "a record header claims {len} bytes, more than the largest record keel writes ({MAX_PAYLOAD})"
        )));
    }
    let present = &rest[HEADER..rest.len().min(HEADER + len)];
    if !plausible_payload(present) {
        return Err(Bad::Garbage(format!(
            "a record of {len} bytes whose payload is not a JSON entry"
        )));
    }
    if len > rest.len() - HEADER {
        return Err(Bad::Torn(format!(
            "a record of {len} bytes with {} left",
            rest.len() - HEADER
        )));
    }
    let payload = &rest[HEADER..HEADER + len];
    if crc32c::crc32c(payload) != crc {
        return Err(Bad::Torn("CRC mismatch".into()));
    }
    let entry: Entry<'static> = serde_json::from_slice(payload)
        .map_err(|e| Bad::Garbage(format!("a record with a valid CRC holds no entry: {e}")))?;
    Ok((entry, HEADER + len))
}

/// Decodes a journal. The writer only appends whole framed records, so a
/// crash can leave a prefix of its last append, possibly with zeros where
/// blocks never reached the disk: a short header, a plausible length with a
/// short payload (`{` or a zero first), a CRC mismatch, or zeros. Such a tail is torn: it
/// is reported and cut. Anything else (a length beyond [`MAX_PAYLOAD`], a
/// payload that cannot start an entry, a CRC-valid payload that is no
/// entry) is damage, refused with its offset even at the end of the file,
/// and so is a bad record followed by any good record.
///
/// # Errors
/// [`JournalError::Garbage`] for bytes a torn write cannot leave;
/// [`JournalError::Corrupt`] for damage followed by good records.
pub fn decode(bytes: &[u8]) -> Result<Decoded, JournalError> {
    let mut records = Vec::new();
    let mut at = 0;
    let mut last_seq = 0;
    while at < bytes.len() {
        match record_at(bytes, at) {
            Ok((entry, used)) if entry.seq() > last_seq => {
                last_seq = entry.seq();
                records.push(Record {
                    offset: at as u64,
                    entry,
                });
                at += used;
            }
            Ok((entry, _)) => {
                return Err(JournalError::Corrupt {
                    offset: at as u64,
                    reason: format!("seq {} does not follow seq {last_seq}", entry.seq()),
                })
            }
            Err(Bad::Garbage(reason)) => {
                return Err(JournalError::Garbage {
                    offset: at as u64,
                    reason,
                })
            }
            Err(Bad::Torn(reason)) => {
                // Torn tail, unless a valid record with a later seq starts
                // anywhere after the bad one (none can in zeros).
                let zeros = bytes[at..].iter().all(|&b| b == 0);
                let later = !zeros
                    && (at + 1..bytes.len().saturating_sub(HEADER - 1))
                        .any(|y| matches!(record_at(bytes, y), Ok((e, _)) if e.seq() > last_seq));
                if later {
                    return Err(JournalError::Corrupt {
                        offset: at as u64,
                        reason,
                    });
                }
                return Ok(Decoded {
                    records,
                    valid_len: at as u64,
                    torn: Some(format!(
                        "cut {} bytes of a torn record at byte offset {at} ({reason})",
                        bytes.len() - at
                    )),
                });
            }
        }
    }
    Ok(Decoded {
        records,
        valid_len: at as u64,
        torn: None,
    })
}

impl SnapshotBuilder {
    /// Names a state for the journal.
    pub fn locate(&self, s: &crate::model::step::StateRef) -> Option<Ref> {
        let k = std::sync::Arc::as_ptr(s) as usize;
        self.new_pos
            .get(&k)
            .map(|&i| Ref::New(i))
            .or_else(|| self.old_pos.get(&k).map(|&i| Ref::Base(i)))
    }

    /// The state a journal reference names.
    pub fn resolve(&self, r: Ref) -> Option<crate::model::step::StateRef> {
        match r {
            Ref::Base(i) => self.olds.get(i).cloned(),
            Ref::New(i) => self.news.get(i).cloned(),
        }
    }

    /// Where a state a `keep` (already applied) kept sits in the base
    /// checkpoint: what its record names. `None` when it is not a base
    /// state (a bug, reported by the caller).
    pub fn kept_from(&self, old: &crate::model::step::StateRef) -> Option<Ref> {
        self.old_pos
            .get(&(std::sync::Arc::as_ptr(old) as usize))
            .map(|&i| Ref::Base(i))
    }

    /// The record of a change other than a refresh, outputs or upgrade,
    /// with `written` the state a write writes (borrowed by the caller).
    fn record_change<'a>(
        &self,
        c: &Change,
        written: Option<&'a State>,
    ) -> Option<ChangeRecord<'a>> {
        Some(match c {
            Change::Write {
                old,
                mark_old_delete,
                ..
            } => ChangeRecord::Write {
                old: match old {
                    Some(o) => Some(self.locate(o)?),
                    None => None,
                },
                mark_old_delete: *mark_old_delete,
                state: EntryState::Borrowed(written?),
            },
            // Encoded after it was applied: the kept state now also sits
            // among the written ones; the record names where it came from.
            Change::Keep { old } => ChangeRecord::Keep {
                old: self.kept_from(old)?,
            },
            Change::Remove { old } => ChangeRecord::Remove {
                old: self.locate(old)?,
            },
            Change::MarkPendingReplacement { old } => ChangeRecord::PendingReplacement {
                old: self.locate(old)?,
            },
            Change::Refresh { .. } | Change::Outputs { .. } | Change::Upgrade { .. } => {
                return None
            }
        })
    }

    /// Calls `f` with the journal entry for a mutation already applied to
    /// this builder, and returns what it returns. The entry borrows the
    /// states it records (a written state is read under its lock, held
    /// only for the call: `f` must not lock states). `None` when a state
    /// it names is unknown here (a bug: reported by the caller as a
    /// persistence error).
    pub fn with_entry<R>(
        &self,
        seq: u64,
        m: &Mutation,
        f: impl FnOnce(&Entry<'_>) -> R,
    ) -> Option<R> {
        let entry = match m {
            Mutation::Begin { op, kind, state } => Entry::Begin {
                seq,
                op: *op,
                ty: *kind,
                state: EntryState::Borrowed(state),
            },
            Mutation::Failed { op } => Entry::Failure { seq, op: *op },
            Mutation::Migration(m) => Entry::StateMigration {
                seq,
                op: 0,
                record: Box::new(self.migration_record(m).ok()?),
            },
            Mutation::End { change, .. } | Mutation::Apply(change) => match change {
                Change::Refresh { old, new } => Entry::Refresh {
                    seq,
                    op: mutation_op(m),
                    old: self.locate(old)?,
                    state: new.as_deref().map(EntryState::Borrowed),
                },
                Change::Outputs { state, outputs } => Entry::Outputs {
                    seq,
                    op: mutation_op(m),
                    target: self.locate(state)?,
                    outputs: outputs.clone(),
                },
                Change::Upgrade { states } => Entry::SchemaUpgrade {
                    seq,
                    op: mutation_op(m),
                    states: states
                        .iter()
                        .map(|(s, new)| {
                            Some(UpgradedState {
                                target: self.locate(s)?,
                                state: new.clone(),
                            })
                        })
                        .collect::<Option<_>>()?,
                },
                Change::Write { new, .. } => {
                    let written = crate::model::step::lock(new);
                    let entry = Entry::Success {
                        seq,
                        op: mutation_op(m),
                        change: self.record_change(change, Some(&*written))?,
                    };
                    return Some(f(&entry));
                }
                other => Entry::Success {
                    seq,
                    op: mutation_op(m),
                    change: self.record_change(other, None)?,
                },
            },
        };
        Some(f(&entry))
    }

    /// Replays one entry (the inverse of [`SnapshotBuilder::with_entry`]).
    ///
    /// # Errors
    /// [`ReplayError`] when the entry names a state that does not exist or
    /// is a malformed migration record.
    pub fn replay(&mut self, entry: &Entry<'_>) -> Result<(), ReplayError> {
        let find = |b: &Self, r: Ref| b.resolve(r).ok_or(ReplayError::UnknownState(r));
        let m = match entry {
            Entry::Begin { op, ty, state, .. } => Mutation::Begin {
                op: *op,
                kind: *ty,
                state: std::sync::Arc::new((**state).clone()),
            },
            Entry::Failure { op, .. } => Mutation::Failed { op: *op },
            Entry::Compacted { .. } => return Ok(()),
            Entry::StateMigration { record, .. } => return self.replay_migration(record),
            Entry::Success { op, change, .. } => {
                let change = match change {
                    ChangeRecord::Write {
                        old,
                        mark_old_delete,
                        state,
                    } => Change::Write {
                        old: match old {
                            Some(r) => Some(find(self, *r)?),
                            None => None,
                        },
                        new: share((**state).clone()),
                        mark_old_delete: *mark_old_delete,
                    },
                    ChangeRecord::Keep { old } => Change::Keep {
                        old: find(self, *old)?,
                    },
                    ChangeRecord::Remove { old } => Change::Remove {
                        old: find(self, *old)?,
                    },
                    ChangeRecord::PendingReplacement { old } => Change::MarkPendingReplacement {
                        old: find(self, *old)?,
                    },
                };
                end_or_apply(*op, change)
            }
            Entry::Refresh { op, old, state, .. } => end_or_apply(
                *op,
                Change::Refresh {
                    old: find(self, *old)?,
                    new: state.clone().map(EntryState::into_owned),
                },
            ),
            Entry::SchemaUpgrade { op, states, .. } => {
                let states = states
                    .iter()
                    .map(|u| Ok((find(self, u.target)?, u.state.clone())))
                    .collect::<Result<_, ReplayError>>()?;
                end_or_apply(*op, Change::Upgrade { states })
            }
            Entry::Outputs {
                op,
                target,
                outputs,
                ..
            } => end_or_apply(
                *op,
                Change::Outputs {
                    state: find(self, *target)?,
                    outputs: outputs.clone(),
                },
            ),
        };
        self.apply(&m);
        Ok(())
    }
}

fn mutation_op(m: &Mutation) -> OpId {
    match m {
        Mutation::Begin { op, .. } | Mutation::End { op, .. } | Mutation::Failed { op } => *op,
        Mutation::Apply(_) | Mutation::Migration(_) => 0,
    }
}

fn end_or_apply(op: OpId, change: Change) -> Mutation {
    if op == 0 {
        Mutation::Apply(change)
    } else {
        Mutation::End { op, change }
    }
}

/// Replays records onto a builder over the base checkpoint, skipping those
/// the base already includes (`seq <= base_seq`).
///
/// # Errors
/// [`JournalError::BadEntry`] for an entry that does not apply; the builder
/// is then partially replayed and must be discarded.
pub fn replay(
    builder: &mut SnapshotBuilder,
    records: &[Record],
    base_seq: u64,
) -> Result<(), JournalError> {
    for r in records.iter().filter(|r| r.entry.seq() > base_seq) {
        builder
            .replay(&r.entry)
            .map_err(|reason| JournalError::BadEntry {
                seq: r.entry.seq(),
                offset: r.offset,
                reason,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> Entry<'static> {
        Entry::Failure { seq, op: seq }
    }

    fn journal(n: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for seq in 1..=n {
            starts.push(bytes.len());
            bytes.extend(encode(&entry(seq)));
        }
        (bytes, starts)
    }

    /// A borrowed state encodes exactly as an owned one and reads back
    /// owned and equal.
    #[test]
    fn borrowed_states_encode_as_owned_ones() {
        let mut state = State {
            urn: crate::model::Urn::parse("urn:pulumi:s::p::sim:index:Bucket::b").unwrap(),
            id: "b-1".into(),
            ..State::default()
        };
        state
            .inputs
            .insert("k".into(), crate::model::PropertyValue::from("v"));
        let begin = |state| Entry::Begin {
            seq: 1,
            op: 7,
            ty: OperationType::Creating,
            state,
        };
        let write = |state| Entry::Success {
            seq: 2,
            op: 7,
            change: ChangeRecord::Write {
                old: Some(Ref::Base(3)),
                mark_old_delete: true,
                state,
            },
        };
        for make in [begin, write] {
            let owned = make(EntryState::Owned(Box::new(state.clone())));
            let borrowed = make(EntryState::Borrowed(&state));
            assert_eq!(encode(&borrowed), encode(&owned));
            let back = decode(&encode(&borrowed)).unwrap().records.remove(0).entry;
            assert_eq!(encode(&back), encode(&owned));
            assert!(matches!(
                back,
                Entry::Begin {
                    state: EntryState::Owned(_),
                    ..
                } | Entry::Success {
                    change: ChangeRecord::Write {
                        state: EntryState::Owned(_),
                        ..
                    },
                    ..
                }
            ));
        }
    }

    /// With a secrets manager, an entry with no plaintext secret is written
    /// exactly as without one; one with a plaintext secret is sealed: the
    /// plaintext is nowhere in the record, which reads back (its CRC holds)
    /// with the secret as ciphertext.
    /// A record's room is a little more than the larger of the last two
    /// records, capped; encoding into it gives [`encode_with`]'s bytes,
    /// a secret sealed as there (the refused plaintext attempt, written
    /// into the room, is dropped).
    #[test]
    fn a_records_room_follows_the_last_two_records() {
        use crate::model::property::{PropertyValue, Secret};
        let mut room = RecordRoom::default();
        assert_eq!(room.next(), 0);
        room.saw(800);
        assert_eq!(room.next(), 900);
        room.saw(400);
        assert_eq!(room.next(), 900, "the larger of the last two");
        room.saw(400);
        assert_eq!(room.next(), 450);
        room.saw(10 << 20);
        assert_eq!(room.next(), RecordRoom::MAX);

        let (crypter, mut state) = sealing();
        let mut room = RecordRoom::default();
        for round in 0..3 {
            let plain = Entry::Begin {
                seq: round,
                op: 7,
                ty: OperationType::Creating,
                state: EntryState::Borrowed(&state),
            };
            let bytes = room.encode_with(&plain, &crypter).unwrap();
            assert_eq!(bytes, encode(&plain));
        }
        let hidden = "hunter2-never-on-disk";
        state.inputs.insert(
            "pw".into(),
            PropertyValue::Secret(Secret::plaintext(PropertyValue::from(hidden))),
        );
        let secret = Entry::Begin {
            seq: 9,
            op: 7,
            ty: OperationType::Creating,
            state: EntryState::Borrowed(&state),
        };
        let sealed = room.encode_with(&secret, &crypter).unwrap();
        assert!(memchr::memmem::find(&sealed, hidden.as_bytes()).is_none());
        assert!(memchr::memmem::find(&sealed, b"ciphertext").is_some());
        assert_eq!(decode(&sealed).unwrap().records.len(), 1);
    }

    /// A crypter with a passphrase, and a state with one plain input
    /// (`k` = `v`): what the sealing tests start from.
    fn sealing() -> (crate::secrets::Crypter, State) {
        let crypter = crate::secrets::Crypter::for_stack(
            &crate::model::snapshot::SecretsProviders::default(),
            Some("pw"),
        )
        .unwrap();
        let mut state = State {
            urn: crate::model::Urn::parse("urn:pulumi:s::p::sim:index:Bucket::b").unwrap(),
            ..State::default()
        };
        state
            .inputs
            .insert("k".into(), crate::model::property::PropertyValue::from("v"));
        (crypter, state)
    }

    #[test]
    fn only_entries_with_secrets_are_sealed() {
        use crate::model::property::{PropertyValue, Secret};
        let (crypter, mut state) = sealing();
        let begin = |state: &State| Entry::Begin {
            seq: 1,
            op: 7,
            ty: OperationType::Creating,
            state: EntryState::Owned(Box::new(state.clone())),
        };
        let plain = begin(&state);
        assert_eq!(encode_with(&plain, &crypter).unwrap(), encode(&plain));
        let hidden = "hunter2-never-on-disk";
        state.inputs.insert(
            "pw".into(),
            PropertyValue::Secret(Secret::plaintext(PropertyValue::from(hidden))),
        );
        let secret = begin(&state);
        let sealed = encode_with(&secret, &crypter).unwrap();
        assert!(memchr::memmem::find(&sealed, hidden.as_bytes()).is_none());
        assert!(memchr::memmem::find(&sealed, b"ciphertext").is_some());
        let back = decode(&sealed).unwrap().records.remove(0).entry;
        let Entry::Begin { state: back, .. } = back else {
            panic!("not a begin entry: {back:?}");
        };
        assert!(matches!(
            back.inputs["pw"],
            PropertyValue::Secret(Secret::Ciphertext(_))
        ));
        assert_eq!(back.inputs["k"], PropertyValue::from("v"));

        // Without a manager a plaintext secret is refused, never encoded; a
        // ciphertext (another provider's) is written as held.
        let none = crate::secrets::Crypter::default();
        assert!(matches!(
            encode_with(&secret, &none),
            Err(crate::secrets::SecretsError::NoProvider)
        ));
        let foreign = crate::secrets::Crypter::unsupported("awskms");
        assert!(matches!(
            encode_with(&secret, &foreign),
            Err(crate::secrets::SecretsError::Unsupported(ty)) if ty == "awskms"
        ));
        state.inputs.insert(
            "pw".into(),
            PropertyValue::Secret(Secret::Ciphertext("v1:abc".into())),
        );
        let held = begin(&state);
        assert_eq!(encode_with(&held, &none).unwrap(), encode(&held));
    }

    #[test]
    fn deferred_keeps_encode_as_their_entries_would() {
        let keeps = [(4, Ref::Base(0)), (5, Ref::Base(17)), (9, Ref::Base(3))];
        let mut out = b"prefix".to_vec();
        encode_keeps(&keeps, &mut out);
        let one_by_one: Vec<u8> = keeps
            .iter()
            .flat_map(|&(seq, old)| {
                encode(&Entry::Success {
                    seq,
                    op: 0,
                    change: ChangeRecord::Keep { old },
                })
            })
            .collect();
        assert_eq!(&out[..6], b"prefix", "appended, not overwritten");
        assert_eq!(out[6..], one_by_one[..]);
        let back = decode(&out[6..]).unwrap();
        assert_eq!(back.records.len(), 3);
        assert!(back.torn.is_none());
    }

    #[test]
    fn whole_records_decode() {
        let (bytes, _) = journal(5);
        let d = decode(&bytes).unwrap();
        assert_eq!(d.records.len(), 5);
        assert_eq!(d.valid_len, bytes.len() as u64);
        assert!(d.torn.is_none());
    }

    #[test]
    fn torn_tails_are_cut_without_losing_whole_records() {
        let (bytes, starts) = journal(5);
        let half = encode(&entry(6));
        // What a crash can leave of the last append: a prefix of it, and
        // on some filesystems zeros where the data never reached the disk.
        let zero_filled = [&half[..HEADER + 4], &[0; 9][..]].concat();
        for tail in [
            &half[..3],
            &half[..HEADER],
            &half[..HEADER + 2],
            &half[..half.len() - 1],
            &zero_filled[..],
            &[0; 4096][..],
        ] {
            let mut b = bytes.clone();
            b.extend_from_slice(tail);
            let d = decode(&b).unwrap();
            assert_eq!(d.records.len(), 5, "tail {tail:?}");
            assert_eq!(d.valid_len, bytes.len() as u64);
            assert!(d.torn.is_some());
        }
        // A flipped byte in the last record is a torn tail too.
        let mut b = bytes.clone();
        let last = b.len() - 2;
        b[last] ^= 0x40;
        let d = decode(&b).unwrap();
        assert_eq!(d.records.len(), 4);
        assert_eq!(d.valid_len, starts[4] as u64);
    }

    #[test]
    fn bytes_no_torn_write_can_leave_are_refused_even_at_the_end() {
        let (bytes, _) = journal(3);
        // Random bytes in place of a journal (xorshift, fixed seed).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let not_an_entry = {
            let payload = b"[1,2,3]";
            let mut r = (payload.len() as u32).to_le_bytes().to_vec();
            r.extend(crc32c::crc32c(payload).to_le_bytes());
            r.extend(payload);
            r
        };
        let mut too_long = (MAX_PAYLOAD as u32 + 1).to_le_bytes().to_vec();
        too_long.extend([0; 4]);
        too_long.extend(b"{\"kind\"");
        for (prefix, tail) in [
            (&[][..], &random[..]),
            (&bytes[..], &random[..]),
            (&bytes[..], &b"garbage!!"[..]),
            (&bytes[..], &[0xff; 40][..]),
            (&bytes[..], &too_long[..]),
            (&bytes[..], &not_an_entry[..]),
        ] {
            let b = [prefix, tail].concat();
            match decode(&b) {
                Err(JournalError::Garbage { offset, .. }) => {
                    assert_eq!(offset, prefix.len() as u64, "tail {:?}", &tail[..8])
                }
                other => panic!("tail {:?}: {other:?}", &tail[..8]),
            }
        }
    }

    #[test]
    fn damage_in_the_middle_is_refused_with_its_offset() {
        let (bytes, starts) = journal(6);
        for at in [starts[2] + 1, starts[2] + 5, starts[2] + HEADER + 3] {
            let mut b = bytes.clone();
            b[at] ^= 0x20;
            match decode(&b) {
                Err(JournalError::Corrupt { offset, .. }) => {
                    assert_eq!(offset, starts[2] as u64, "flip at {at}")
                }
                other => panic!("flip at {at}: {other:?}"),
            }
        }
    }
}

/// Property tests: any sequence of mutations, encoded as the journal
/// persister does (applied, then [`SnapshotBuilder::with_entry`] and
/// [`encode`]), decodes and replays onto the base to the deployment the
/// live builder holds; a journal cut anywhere (and possibly zero-filled
/// after the cut) decodes to exactly its whole records, reports a torn tail
/// when it ends inside a record, and replays to the deployment as it was
/// after the last whole record.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use proptest::sample::Index;
    use serde_json::{json, Value};

    use super::*;
    use crate::model::step::{lock, StateRef};
    use crate::model::Deployment;

    /// One step of the generated run, interpreted against the live states.
    #[derive(Clone, Debug)]
    struct Act {
        what: u8,
        a: Index,
        b: Index,
        flag: bool,
        end: bool,
        val: u8,
    }

    fn act() -> impl Strategy<Value = Act> {
        (
            0u8..9,
            any::<Index>(),
            any::<Index>(),
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(what, a, b, flag, end, val)| Act {
                what,
                a,
                b,
                flag,
                end,
                val,
            })
    }

    fn state(name: &str, val: u8) -> State {
        serde_json::from_value(json!({
            "urn": format!("urn:pulumi:dev::app::a:b:T::{name}"),
            "custom": true, "id": format!("id-{name}"), "type": "a:b:T",
            "inputs": {"v": val}, "outputs": {"v": val}
        }))
        .unwrap()
    }

    fn base(n: usize) -> Deployment {
        Deployment {
            resources: (0..n).map(|i| state(&format!("b{i}"), i as u8)).collect(),
            ..Deployment::default()
        }
    }

    fn builder(base: &Deployment) -> SnapshotBuilder {
        let mut d = base.clone();
        let olds = SnapshotBuilder::share_resources(&mut d);
        SnapshotBuilder::new(d, olds)
    }

    /// The builder's deployment, compared by value: which keys a state's
    /// JSON had is forgotten. (A replayed state may differ from the live
    /// one in key presence alone: a state refreshed while marked `delete`
    /// and then marked `pendingReplacement` replays with `"delete": false`
    /// where the live state has no `delete` key.)
    fn as_json(b: &SnapshotBuilder) -> Value {
        let mut d = b.snapshot();
        let states = d
            .resources
            .iter_mut()
            .chain(d.pending_operations.iter_mut().map(|p| &mut p.resource));
        for s in states {
            s.forget_keys();
        }
        serde_json::to_value(d).unwrap()
    }

    /// The live run: the builder, the states a mutation may name, the
    /// operations begun and not ended.
    struct Run {
        builder: SnapshotBuilder,
        live: Vec<StateRef>,
        untouched: Vec<StateRef>,
        open: Vec<OpId>,
        next_op: OpId,
    }

    impl Run {
        fn new(base: &Deployment) -> Self {
            let builder = builder(base);
            let olds: Vec<StateRef> = (0..base.resources.len())
                .map(|i| builder.resolve(Ref::Base(i)).unwrap())
                .collect();
            Self {
                builder,
                live: olds.clone(),
                untouched: olds,
                open: Vec::new(),
                next_op: 1,
            }
        }

        fn forget(&mut self, s: &StateRef) {
            self.live.retain(|x| !std::sync::Arc::ptr_eq(x, s));
            self.untouched.retain(|x| !std::sync::Arc::ptr_eq(x, s));
        }

        /// The mutation `act` stands for here (`None`: nothing to do).
        fn mutation(&mut self, step: usize, act: &Act) -> Option<Mutation> {
            let pick =
                |v: &[StateRef], i: &Index| (!v.is_empty()).then(|| v[i.index(v.len())].clone());
            let live = pick(&self.live, &act.a);
            let change = match act.what {
                0 => {
                    let op = self.next_op;
                    self.next_op += 1;
                    self.open.push(op);
                    let kind = [
                        OperationType::Creating,
                        OperationType::Updating,
                        OperationType::Deleting,
                    ][usize::from(act.val % 3)];
                    let state = match (&live, act.flag) {
                        (Some(s), true) => lock(s).clone(),
                        _ => state(&format!("n{step}"), act.val),
                    };
                    return Some(Mutation::Begin {
                        op,
                        kind,
                        state: std::sync::Arc::new(state),
                    });
                }
                1 => {
                    let old = if act.flag { live } else { None };
                    let mark_old_delete = old.is_some() && act.val.is_multiple_of(2);
                    let new = crate::model::step::share(state(&format!("n{step}"), act.val));
                    if let (Some(o), false) = (&old, mark_old_delete) {
                        self.forget(o);
                    }
                    self.live.push(new.clone());
                    Change::Write {
                        old,
                        new,
                        mark_old_delete,
                    }
                }
                2 => {
                    if self.open.is_empty() {
                        return None;
                    }
                    let op = self.open.remove(act.b.index(self.open.len()));
                    return Some(Mutation::Failed { op });
                }
                3 => {
                    let old = pick(&self.untouched, &act.a)?;
                    self.untouched.retain(|x| !std::sync::Arc::ptr_eq(x, &old));
                    Change::Keep { old }
                }
                4 => {
                    let old = live?;
                    self.forget(&old);
                    Change::Remove { old }
                }
                5 => Change::MarkPendingReplacement { old: live? },
                6 => {
                    let old = live?;
                    let new = if act.flag {
                        let mut s = lock(&old).clone();
                        s.outputs
                            .insert("refreshed".into(), i64::from(act.val).into());
                        Some(Box::new(s))
                    } else {
                        self.forget(&old);
                        None
                    };
                    Change::Refresh { old, new }
                }
                7 => {
                    let mut outputs = PropertyMap::new();
                    outputs.insert("o".into(), i64::from(act.val).into());
                    Change::Outputs {
                        state: live?,
                        outputs,
                    }
                }
                _ => {
                    let old = live?;
                    let mut s = lock(&old).clone();
                    s.inputs
                        .insert("upgraded".into(), i64::from(act.val).into());
                    Change::Upgrade {
                        states: vec![(old, Box::new(s))],
                    }
                }
            };
            if act.end && !self.open.is_empty() {
                let op = self.open.remove(act.b.index(self.open.len()));
                Some(Mutation::End { op, change })
            } else {
                Some(Mutation::Apply(change))
            }
        }
    }

    /// The journal of a run: its bytes, where each record ends, and the
    /// deployment after each record (the base's first).
    fn run(base: &Deployment, acts: &[Act]) -> (Vec<u8>, Vec<usize>, Vec<Value>) {
        let mut r = Run::new(base);
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        let mut snaps = vec![as_json(&r.builder)];
        for (step, act) in acts.iter().enumerate() {
            let Some(m) = r.mutation(step, act) else {
                continue;
            };
            r.builder.apply(&m);
            let seq = ends.len() as u64 + 1;
            let record = r.builder.with_entry(seq, &m, encode);
            bytes.extend(record.expect("every state is known"));
            ends.push(bytes.len());
            snaps.push(as_json(&r.builder));
        }
        (bytes, ends, snaps)
    }

    fn replayed(base: &Deployment, records: &[Record]) -> Value {
        let mut b = builder(base);
        replay(&mut b, records, 0).unwrap();
        as_json(&b)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn replaying_the_encoded_mutations_gives_the_live_deployment(
            n in 0usize..5,
            acts in proptest::collection::vec(act(), 0..24),
        ) {
            let base = base(n);
            let (bytes, ends, snaps) = run(&base, &acts);
            let d = decode(&bytes).unwrap();
            prop_assert!(d.torn.is_none());
            prop_assert_eq!(d.valid_len, bytes.len() as u64);
            prop_assert_eq!(d.records.len(), ends.len());
            prop_assert_eq!(&replayed(&base, &d.records), snaps.last().unwrap());
        }

        #[test]
        fn a_cut_journal_is_torn_and_replays_its_whole_records(
            n in 0usize..4,
            acts in proptest::collection::vec(act(), 1..16),
            cut in any::<Index>(),
            zeros in 0usize..64,
        ) {
            let base = base(n);
            let (bytes, ends, snaps) = run(&base, &acts);
            let cut = cut.index(bytes.len() + 1);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let valid = if whole == 0 { 0 } else { ends[whole - 1] };
            let mut b = bytes[..cut].to_vec();
            b.resize(cut + zeros, 0);
            let d = decode(&b).unwrap();
            prop_assert_eq!(d.records.len(), whole);
            prop_assert_eq!(d.valid_len, valid as u64);
            prop_assert_eq!(d.torn.is_some(), b.len() > valid);
            prop_assert_eq!(&replayed(&base, &d.records), &snaps[whole]);
        }
    }
}
