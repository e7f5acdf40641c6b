//! A base checkpoint encoded on two cores, byte for byte what the serial
//! encoder writes.
//!
//! A large `up` ends with a compaction that encodes every state into the
//! new base: at 100,000 states the encoding and write were 222-294 ms of a
//! 1.9 s run (BENCHMARKS.md, "Issue 20, tenth slice"), on one core while
//! the other waited. [`export_to_writer`] splits the states into chunks and
//! encodes every other chunk on a second thread while this one encodes the
//! rest, writing them in order. At most a few chunks are encoded ahead, so
//! the peak memory (the compaction is P6's peak) grows by those, not by a
//! copy of the base.
//!
//! The deployment's own fields (manifest, pending operations, unmodeled
//! keys) keep their encoder: a shell of the deployment whose one state is
//! a sentinel (a URN carrying a fresh random name) is encoded as usual,
//! and the states' chunks are written where the sentinel's bytes are. A
//! shell whose bytes do not hold the sentinel exactly once (which a random
//! 128-bit name makes impossible in practice) is encoded serially.

use std::io::Write;
use std::sync::mpsc;

use crate::model::property::{
    note_refused, plaintexts_refused, refusing_plaintexts, PlaintextRefused,
};
use crate::model::property_map::with_raw_writes;
use crate::model::{CheckpointFile, Deployment, State};

/// Below this many states the serial encoder is used: a thread costs more
/// than it saves.
pub(crate) const PARALLEL_FROM: usize = 4096;

/// States per chunk.
const CHUNK: usize = 1024;

/// Chunks the second thread may have encoded ahead of the writer.
const AHEAD: usize = 2;

/// Writes the checkpoint file of `deployment` with the `extra` top-level
/// keys to `w`: the bytes [`CheckpointFile::export_to_writer`] writes, with
/// the states encoded on two threads when there are at least
/// [`PARALLEL_FROM`] of them.
///
/// # Errors
/// What writing to `w` returns, or an encoding error.
pub(crate) fn export_to_writer(
    deployment: &Deployment,
    extra: &std::collections::BTreeMap<String, serde_json::Value>,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    export_chunked(deployment, extra, w, PARALLEL_FROM, CHUNK)
}

/// [`export_to_writer`] with its thresholds as arguments (the tests use
/// small ones).
fn export_chunked(
    deployment: &Deployment,
    extra: &std::collections::BTreeMap<String, serde_json::Value>,
    w: &mut dyn Write,
    from: usize,
    chunk: usize,
) -> std::io::Result<()> {
    let states = &deployment.resources;
    if states.len() < from.max(1) {
        return CheckpointFile::export_to_writer(deployment, extra, w);
    }
    let Some((head, tail)) = shell_around_states(deployment, extra)? else {
        return CheckpointFile::export_to_writer(deployment, extra, w);
    };
    w.write_all(&head)?;
    let chunk = chunk.max(1);
    let chunks: Vec<&[State]> = states.chunks(chunk).collect();
    // The second thread refuses plaintext secrets as this one does, and a
    // refusal there is one of this thread's encode.
    let refused = plaintexts_refused();
    std::thread::scope(|scope| -> std::io::Result<()> {
        let (tx, rx) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(AHEAD);
        let odd = &chunks;
        scope.spawn(move || {
            for c in odd.iter().skip(1).step_by(2) {
                let encoded = if refused {
                    refusing_plaintexts(|| encode_chunk(c))
                        .unwrap_or_else(|r| Err(std::io::Error::other(r)))
                } else {
                    encode_chunk(c)
                };
                // A closed channel: the writer failed and stopped reading.
                if tx.send(encoded).is_err() {
                    return;
                }
            }
        });
        for (i, c) in chunks.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            if i % 2 == 0 {
                w.write_all(&encode_chunk(c)?)?;
            } else {
                let bytes = rx
                    .recv()
                    .map_err(|_| {
                        std::io::Error::other("the checkpoint encoder's second thread stopped")
                    })?
                    .inspect_err(|e| {
                        if e.get_ref().is_some_and(|e| e.is::<PlaintextRefused>()) {
                            note_refused();
                        }
                    })?;
                w.write_all(&bytes)?;
            }
        }
        Ok(())
    })?;
    w.write_all(&tail)
}

/// The states of `chunk`, encoded and separated by commas.
fn encode_chunk(chunk: &[State]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(chunk.len() * 512);
    for (i, s) in chunk.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        with_raw_writes(|| crate::model::json_write::append(&mut out, s))
            .map_err(std::io::Error::from)?;
    }
    Ok(out)
}

/// The file's bytes before and after its states: a shell of `d` with one
/// sentinel state is encoded and cut where the sentinel is. `None` when
/// the sentinel's bytes are not found exactly once.
fn shell_around_states(
    d: &Deployment,
    extra: &std::collections::BTreeMap<String, serde_json::Value>,
) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let sentinel = sentinel()?;
    let marker = serde_json::to_vec(&sentinel).map_err(std::io::Error::from)?;
    let shell = Deployment {
        manifest: d.manifest.clone(),
        secrets_providers: d.secrets_providers.clone(),
        resources: vec![sentinel],
        pending_operations: d.pending_operations.clone(),
        metadata: d.metadata.clone(),
        snippets: d.snippets.clone(),
        extensions: d.extensions.clone(),
        keys: d.keys,
        extra: d.extra.clone(),
    };
    let mut bytes = Vec::new();
    CheckpointFile::export_to_writer(&shell, extra, &mut bytes)?;
    // Serde's JSON is UTF-8: searched as text, in linear time (two-way).
    let (Ok(text), Ok(marker)) = (std::str::from_utf8(&bytes), std::str::from_utf8(&marker)) else {
        return Ok(None);
    };
    let (Some(at), Some(last)) = (text.find(marker), text.rfind(marker)) else {
        return Ok(None);
    };
    if at != last {
        return Ok(None);
    }
    let marker_len = marker.len();
    let tail = bytes.split_off(at + marker_len);
    bytes.truncate(at);
    Ok(Some((bytes, tail)))
}

/// A state no real state encodes to the bytes of.
fn sentinel() -> std::io::Result<State> {
    crate::model::checkpoint::sentinel()
        .ok_or_else(|| std::io::Error::other("the OS gave no random bytes for a sentinel"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TypeToken, Urn};

    /// Every fixture written by Pulumi, and a synthetic deployment, encode
    /// to the serial encoder's bytes at every chunk size.
    #[test]
    fn check() {
        // Read in place, as tests/checkpoint_fixtures.rs reads them.
        let dir = std::env::var_os("KEEL_FIXTURES").map_or_else(
            || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pulumi"),
            std::path::PathBuf::from,
        );
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        let mut deployments = Vec::new();
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_file()) {
            let bytes = std::fs::read(&path).expect("a fixture");
            if let Ok(file) = CheckpointFile::from_slice(&bytes) {
                if let Some(d) = file.deployment_ref() {
                    deployments.push((path.display().to_string(), d.clone()));
                }
            }
        }
        assert!(deployments.len() > 5, "fixtures decode");
        let mut extra = std::collections::BTreeMap::new();
        extra.insert("keel".to_owned(), serde_json::json!({"seq": 7}));
        for (name, d) in &deployments {
            let mut serial = Vec::new();
            CheckpointFile::export_to_writer(d, &extra, &mut serial).expect("serial");
            for chunk in [1, 2, 3, 7, 1024] {
                let mut parallel = Vec::new();
                export_chunked(d, &extra, &mut parallel, 0, chunk).expect("parallel");
                assert!(
                    parallel == serial,
                    "{name}: chunks of {chunk} differ from the serial bytes"
                );
            }
        }
    }

    /// A writer that fails is an error, not a hang or a panic, whichever
    /// thread's chunk it fails on.
    #[test]
    fn a_failing_writer_fails_the_export() {
        struct FailAfter(usize);
        impl Write for FailAfter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(std::io::Error::other("disk full"));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let d = many_states(40);
        let mut serial = Vec::new();
        CheckpointFile::export_to_writer(&d, &Default::default(), &mut serial).expect("serial");
        for limit in [0, 10, serial.len() / 3, serial.len() / 2, serial.len() - 1] {
            let mut w = FailAfter(limit);
            let r = export_chunked(&d, &Default::default(), &mut w, 0, 3);
            assert!(r.is_err(), "a writer failing after {limit} bytes");
        }
        let mut w = FailAfter(serial.len());
        export_chunked(&d, &Default::default(), &mut w, 0, 3).expect("exactly enough room");
    }

    fn many_states(n: usize) -> Deployment {
        let ty = TypeToken::parse("aws:s3/bucket:Bucket").expect("type");
        let mut d = Deployment::default();
        for i in 0..n {
            let urn =
                Urn::parse(&format!("urn:pulumi:dev::p::aws:s3/bucket:Bucket::b{i}")).expect("urn");
            let mut s = State::new(urn, ty.clone(), true);
            s.id = format!("id-{i}");
            d.resources.push(s);
        }
        d
    }
}
