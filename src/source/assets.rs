//! Content hashes of the assets and archives a program registers.
//!
//! An SDK sends an asset as its source only (`text`, `path` or `uri`); the
//! engine fills in the SHA-256 of its contents (Pulumi's `hash` field,
//! hex), so that a diff sees a change of content behind an unchanged path:
//! two assets are equal when all their fields, the hash included, are.
//!
//! - A text asset hashes its UTF-8 text; a path asset the file's bytes (a
//!   directory is refused: it needs an archive); a `file://` URI is read
//!   as a path.
//! - An archive that is an archive file (`.tar`, `.tgz`, `.tar.gz`, `.zip`,
//!   `.jar`) hashes the file's bytes. A directory or a map of assets hashes
//!   the tar stream of its members as Pulumi writes it (Go's `archive/tar`
//!   in USTAR form: members in name order, mode `0600`, no owner, time 0),
//!   so a hash keel computes equals the one Pulumi stores.
//! - keel does not fetch `http(s)` URIs: such an asset or archive keeps the
//!   hash the program gave (none from the SDKs) and is stored without one,
//!   so its diff compares the URI. An archive holding such a member, a
//!   nested archive file (keel does not expand zip or tar files) or a name
//!   USTAR cannot hold gets keel's own hash over the same tar stream, with
//!   the nested file's bytes as one member: deterministic and sensitive to
//!   content, but not the hash Pulumi would compute.
//!
//! A hash the program gave is kept, as Pulumi's engine keeps it. Relative
//! paths resolve against the program's directory. Reading files is
//! blocking: callers on an async runtime run [`ensure_hashes`] on the
//! blocking pool.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::model::property::{Archive, Asset, Secret};
use crate::model::{PropertyMap, PropertyValue};

/// An asset or archive whose contents cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssetError {
    /// A file could not be read.
    #[error("`{key}`: cannot read {}: {message}", .path.display())]
    Read {
        /// The property (`key.sub[0]`).
        key: String,
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// A path asset names a directory.
    #[error("`{key}`: the asset path {} is a directory; use an archive (FileArchive) for a directory", .path.display())]
    Directory {
        /// The property.
        key: String,
        /// The directory.
        path: PathBuf,
    },
    /// A path archive is neither a directory nor an archive file.
    #[error("`{key}`: {} is neither a directory nor an archive file (.tar, .tgz, .tar.gz, .zip, .jar)", .path.display())]
    NotArchive {
        /// The property.
        key: String,
        /// The path.
        path: PathBuf,
    },
    /// A URI of a scheme keel does not read.
    #[error("`{key}`: unsupported URI `{uri}` (keel reads file:// URIs; http and https are kept without a hash)")]
    BadUri {
        /// The property.
        key: String,
        /// The URI.
        uri: String,
    },
}

/// True when some asset or archive in `map` has no hash yet (so that
/// [`ensure_hashes`], which may read files, is worth running).
pub fn needs_hashes(map: &PropertyMap) -> bool {
    fn value(v: &PropertyValue) -> bool {
        match v {
            PropertyValue::Asset(a) => a.hash.is_none(),
            PropertyValue::Archive(a) => a.hash.is_none(),
            PropertyValue::Array(items) => items.iter().any(value),
            PropertyValue::Object(m) => m.values().any(value),
            PropertyValue::Secret(Secret::Plaintext(p)) => value(p.value()),
            PropertyValue::Output(o) => o.value.as_deref().is_some_and(value),
            _ => false,
        }
    }
    map.values().any(value)
}

/// Fills in the hash of every asset and archive in `map` that has none,
/// reading relative paths under `root`.
///
/// # Errors
/// [`AssetError`] naming the property when a file cannot be read, a path
/// asset is a directory, or a URI has an unsupported scheme.
pub fn ensure_hashes(map: &mut PropertyMap, root: &Path) -> Result<(), AssetError> {
    for (k, v) in map.iter_mut() {
        ensure_value(v, root, k)?;
    }
    Ok(())
}

fn ensure_value(v: &mut PropertyValue, root: &Path, key: &str) -> Result<(), AssetError> {
    match v {
        PropertyValue::Asset(a) if a.hash.is_none() => {
            a.hash = asset_bytes(a, root, key)?.map(|b| sha256_hex(&b));
        }
        PropertyValue::Archive(a) if a.hash.is_none() => a.hash = archive_hash(a, root, key)?,
        PropertyValue::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                ensure_value(item, root, &format!("{key}[{i}]"))?;
            }
        }
        PropertyValue::Object(m) => {
            for (k, item) in m.iter_mut() {
                ensure_value(item, root, &format!("{key}.{k}"))?;
            }
        }
        PropertyValue::Secret(Secret::Plaintext(p)) => {
            let mut inner = p.value().clone();
            ensure_value(&mut inner, root, key)?;
            if inner != *p.value() {
                p.set_value(inner);
            }
        }
        PropertyValue::Output(o) => {
            if let Some(inner) = o.value.as_deref_mut() {
                ensure_value(inner, root, key)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `path` under `root` unless it is absolute.
fn resolve(root: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_owned()
    } else {
        root.join(p)
    }
}

/// Where a URI points: `Ok(Some(path))` for `file://`, `Ok(None)` for a
/// remote URI keel does not fetch.
fn uri_path(uri: &str, key: &str) -> Result<Option<PathBuf>, AssetError> {
    if let Some(rest) = uri.strip_prefix("file://") {
        // `file:///abs` (empty host) only, as Pulumi requires.
        if rest.starts_with('/') && !rest.contains(['?', '#']) {
            return Ok(Some(PathBuf::from(rest)));
        }
    } else if uri.starts_with("http://") || uri.starts_with("https://") {
        return Ok(None);
    }
    Err(AssetError::BadUri {
        key: key.to_owned(),
        uri: uri.to_owned(),
    })
}

fn read_file(path: &Path, key: &str) -> Result<Vec<u8>, AssetError> {
    if path.is_dir() {
        return Err(AssetError::Directory {
            key: key.to_owned(),
            path: path.to_owned(),
        });
    }
    std::fs::read(path).map_err(|e| AssetError::Read {
        key: key.to_owned(),
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// An asset's contents; `None` for a remote URI (not fetched) or an asset
/// with no source at all.
fn asset_bytes(a: &Asset, root: &Path, key: &str) -> Result<Option<Vec<u8>>, AssetError> {
    if let Some(t) = &a.text {
        return Ok(Some(t.as_bytes().to_vec()));
    }
    if let Some(p) = a.path.as_deref().filter(|p| !p.is_empty()) {
        return read_file(&resolve(root, p), key).map(Some);
    }
    if let Some(u) = a.uri.as_deref().filter(|u| !u.is_empty()) {
        return match uri_path(u, key)? {
            Some(p) => read_file(&p, key).map(Some),
            None => Ok(None),
        };
    }
    // Pulumi's empty asset is an empty text.
    Ok(Some(Vec::new()))
}

/// Whether `name` is an archive file by its extension (Pulumi's list).
fn is_archive_file(name: &str) -> bool {
    [".tar", ".tgz", ".tar.gz", ".zip", ".jar"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// The hash of an archive; `None` when it is remote (not fetched).
fn archive_hash(a: &Archive, root: &Path, key: &str) -> Result<Option<String>, AssetError> {
    let mut tar = TarHasher::default();
    if let Some(p) = a.path.as_deref().filter(|p| !p.is_empty()) {
        let path = resolve(root, p);
        if is_archive_file(p) {
            return read_file(&path, key).map(|b| Some(sha256_hex(&b)));
        }
        if !path.is_dir() {
            return Err(AssetError::NotArchive {
                key: key.to_owned(),
                path,
            });
        }
        add_directory(&mut tar, "", &path, key)?;
    } else if let Some(u) = a.uri.as_deref().filter(|u| !u.is_empty()) {
        return match uri_path(u, key)? {
            None => Ok(None),
            Some(path) if is_archive_file(u) => read_file(&path, key).map(|b| Some(sha256_hex(&b))),
            Some(path) => Err(AssetError::NotArchive {
                key: key.to_owned(),
                path,
            }),
        };
    } else if let Some(m) = &a.assets {
        add_members(&mut tar, "", m, root, key)?;
    }
    Ok(Some(tar.finish()))
}

/// Adds an asset map's members in name order, flattening archives.
fn add_members(
    tar: &mut TarHasher,
    prefix: &str,
    members: &PropertyMap,
    root: &Path,
    key: &str,
) -> Result<(), AssetError> {
    for (name, member) in members {
        let full = join(prefix, name);
        let member_key = format!("{key}.assets[{name:?}]");
        match member {
            PropertyValue::Asset(a) => match asset_bytes(a, root, &member_key)? {
                Some(bytes) => tar.add(&full, &bytes),
                // A remote member: its URI stands for it.
                None => tar.add_own(&full, a.uri.as_deref().unwrap_or_default().as_bytes()),
            },
            PropertyValue::Archive(sub) => {
                if let Some(p) = sub.path.as_deref().filter(|p| !p.is_empty()) {
                    let path = resolve(root, p);
                    if is_archive_file(p) {
                        tar.add_own(&full, &read_file(&path, &member_key)?);
                    } else if path.is_dir() {
                        add_directory(tar, &full, &path, &member_key)?;
                    } else {
                        return Err(AssetError::NotArchive {
                            key: member_key,
                            path,
                        });
                    }
                } else if let Some(u) = sub.uri.as_deref().filter(|u| !u.is_empty()) {
                    match uri_path(u, &member_key)? {
                        Some(path) => tar.add_own(&full, &read_file(&path, &member_key)?),
                        None => tar.add_own(&full, u.as_bytes()),
                    }
                } else if let Some(m) = &sub.assets {
                    add_members(tar, &full, m, root, &member_key)?;
                }
            }
            // Not an asset or archive: Pulumi refuses such an archive; keel
            // hashes its JSON so that the hash still follows the value.
            other => tar.add_own(&full, other.to_json().to_string().as_bytes()),
        }
    }
    Ok(())
}

/// Adds a directory's files (recursively, in name order; `.pulumi`
/// skipped; a symlink to a file is followed, one to a directory skipped),
/// named by their path relative to `dir` under `prefix`.
fn add_directory(
    tar: &mut TarHasher,
    prefix: &str,
    dir: &Path,
    key: &str,
) -> Result<(), AssetError> {
    let read_err = |path: &Path, e: std::io::Error| AssetError::Read {
        key: key.to_owned(),
        path: path.to_owned(),
        message: e.to_string(),
    };
    let mut entries: Vec<(Vec<u8>, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| read_err(dir, e))?
        .map(|e| {
            e.map(|e| {
                let name = e.file_name();
                (name.as_encoded_bytes().to_vec(), e.path())
            })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| read_err(dir, e))?;
    entries.sort();
    for (name, path) in entries {
        let name = String::from_utf8_lossy(&name).into_owned();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| read_err(&path, e))?;
        if name == ".pulumi" {
            continue;
        }
        let full = join(prefix, &name);
        if meta.is_dir() {
            add_directory(tar, &full, &path, key)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::metadata(&path).map_err(|e| read_err(&path, e))?;
            if !target.is_dir() {
                let mut bytes = Vec::new();
                std::fs::File::open(&path)
                    .and_then(|mut f| f.read_to_end(&mut bytes))
                    .map_err(|e| read_err(&path, e))?;
                tar.add(&full, &bytes);
            }
        } else {
            tar.add(&full, &read_file(&path, key)?);
        }
    }
    Ok(())
}

/// `a` joined with `b` and cleaned (Go's `filepath.Join`).
fn join(a: &str, b: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in a.split('/').chain(b.split('/')) {
        match seg {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// The SHA-256 of a tar stream written as Go's `archive/tar` writes
/// Pulumi's archives, without building the stream.
#[derive(Default)]
struct TarHasher {
    hasher: Sha256,
    seen: HashSet<String>,
    /// A member Pulumi's stream would not hold the same way was added.
    own: bool,
}

/// A tar block.
const BLOCK: usize = 512;

impl TarHasher {
    /// Adds a regular file (the first member of a name wins, as Pulumi's
    /// writer skips repeats).
    fn add(&mut self, name: &str, bytes: &[u8]) {
        if !self.seen.insert(name.to_owned()) {
            return;
        }
        match ustar_header(name, bytes.len() as u64) {
            Some(h) => self.hasher.update(h),
            None => {
                // USTAR cannot hold the name (Go would write a PAX header):
                // keel's own record, still naming the member exactly.
                self.own = true;
                self.hasher.update(b"keel-member\0");
                self.hasher.update((name.len() as u64).to_be_bytes());
                self.hasher.update(name.as_bytes());
                self.hasher.update((bytes.len() as u64).to_be_bytes());
            }
        }
        self.hasher.update(bytes);
        let pad = (BLOCK - bytes.len() % BLOCK) % BLOCK;
        self.hasher.update(&[0u8; BLOCK][..pad]);
    }

    /// Adds a member Pulumi would have expanded or fetched.
    fn add_own(&mut self, name: &str, bytes: &[u8]) {
        self.own = true;
        self.add(name, bytes);
    }

    /// The hex hash of the stream with its end-of-archive blocks. A stream
    /// holding keel's own members is marked by a distinct trailer, so it
    /// never equals a hash Pulumi computed over other contents.
    fn finish(mut self) -> String {
        self.hasher.update([0u8; 2 * BLOCK]);
        if self.own {
            self.hasher.update(b"keel");
        }
        hex::encode(self.hasher.finalize())
    }
}

/// Go's USTAR header of a regular file of `size` bytes with mode `0600`,
/// no owner and time 0; `None` when USTAR cannot hold the name (non-ASCII,
/// or too long to split into prefix and name).
fn ustar_header(name: &str, size: u64) -> Option<[u8; BLOCK]> {
    if !name.is_ascii() || size >= 1 << 33 {
        return None;
    }
    let (prefix, base) = if name.len() <= 100 {
        ("", name)
    } else {
        split_ustar(name)?
    };
    let mut h = [0u8; BLOCK];
    let put = |h: &mut [u8; BLOCK], at: usize, s: &[u8]| h[at..at + s.len()].copy_from_slice(s);
    let octal = |width: usize, n: u64| format!("{n:0w$o}", w = width - 1).into_bytes();
    put(&mut h, 0, base.as_bytes());
    put(&mut h, 100, &octal(8, 0o600));
    put(&mut h, 108, &octal(8, 0));
    put(&mut h, 116, &octal(8, 0));
    put(&mut h, 124, &octal(12, size));
    put(&mut h, 136, &octal(12, 0));
    h[156] = b'0';
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    put(&mut h, 329, &octal(8, 0));
    put(&mut h, 337, &octal(8, 0));
    put(&mut h, 345, prefix.as_bytes());
    // The checksum counts its own field as spaces; written as six octal
    // digits, a NUL and a space.
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(b)
            }
        })
        .sum();
    put(&mut h, 148, &octal(7, sum));
    h[155] = b' ';
    Some(h)
}

/// Go's split of a long name into a USTAR prefix (at most 155 bytes) and
/// name (at most 100) at a `/`.
fn split_ustar(name: &str) -> Option<(&str, &str)> {
    let mut len = name.len();
    if len > 156 {
        len = 156;
    } else if name.ends_with('/') {
        len -= 1;
    }
    let i = name[..len].rfind('/')?;
    let (plen, nlen) = (i, name.len() - i - 1);
    if i == 0 || nlen > 100 || nlen == 0 || plen > 155 {
        return None;
    }
    Some((&name[..i], &name[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset(f: impl FnOnce(&mut Asset)) -> PropertyValue {
        let mut a = Asset::default();
        f(&mut a);
        PropertyValue::Asset(Box::new(a))
    }

    fn hashed(v: PropertyValue, root: &Path) -> Result<Option<String>, AssetError> {
        let mut m = PropertyMap::from([("p".to_owned(), v)]);
        ensure_hashes(&mut m, root)?;
        Ok(match &m["p"] {
            PropertyValue::Asset(a) => a.hash.clone(),
            PropertyValue::Archive(a) => a.hash.clone(),
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn asset_hashes_are_the_sha256_of_their_contents() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("index.html"), "<h1>hi</h1>").unwrap();
        // sha256("hello"), as `printf hello | sha256sum` prints it.
        let hello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        let check = |v: PropertyValue, want: Option<&str>| {
            assert_eq!(hashed(v, d.path()).unwrap().as_deref(), want);
        };
        check(asset(|a| a.text = Some("hello".into())), Some(hello));
        let html = sha256_hex(b"<h1>hi</h1>");
        check(asset(|a| a.path = Some("index.html".into())), Some(&html));
        let abs = d.path().join("index.html").display().to_string();
        check(
            asset(|a| a.uri = Some(format!("file://{abs}"))),
            Some(&html),
        );
        // Remote: not fetched, no hash; a given hash is kept.
        check(
            asset(|a| a.uri = Some("https://example.com/x".into())),
            None,
        );
        check(
            asset(|a| {
                a.text = Some("hello".into());
                a.hash = Some("given".into());
            }),
            Some("given"),
        );
        // A path asset naming a directory or nothing is an error naming
        // the property.
        let e = hashed(asset(|a| a.path = Some(".".into())), d.path()).unwrap_err();
        assert!(matches!(e, AssetError::Directory { .. }), "{e}");
        let e = hashed(asset(|a| a.path = Some("nope".into())), d.path()).unwrap_err();
        assert!(e.to_string().starts_with("`p`: cannot read"), "{e}");
        let e = hashed(asset(|a| a.uri = Some("ftp://x/y".into())), d.path()).unwrap_err();
        assert!(matches!(e, AssetError::BadUri { .. }), "{e}");
    }

    #[test]
    fn assets_inside_values_are_hashed_and_need_hashes_sees_them() {
        let d = tempfile::tempdir().unwrap();
        let nested = PropertyValue::Object(PropertyMap::from([(
            "files".to_owned(),
            PropertyValue::Array(vec![asset(|a| a.text = Some("x".into()))]),
        )]));
        let secret = PropertyValue::Secret(Secret::plaintext(asset(|a| a.text = Some("y".into()))));
        let mut m = PropertyMap::from([("n".to_owned(), nested), ("s".to_owned(), secret)]);
        assert!(needs_hashes(&m));
        ensure_hashes(&mut m, d.path()).unwrap();
        assert!(!needs_hashes(&m));
        let json = serde_json::to_string(&PropertyValue::Object(m)).unwrap();
        assert!(json.contains(&sha256_hex(b"x")), "{json}");
    }

    #[test]
    fn ustar_headers_match_the_format() {
        let h = ustar_header("a.txt", 5).unwrap();
        assert_eq!(&h[..5], b"a.txt");
        assert_eq!(&h[100..108], b"0000600\0");
        assert_eq!(&h[124..136], b"00000000005\0");
        assert_eq!(&h[257..265], b"ustar\x0000");
        assert_eq!(h[155], b' ');
        // The checksum is the sum of the bytes with its field as spaces.
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        let written = std::str::from_utf8(&h[148..154]).unwrap();
        assert_eq!(u32::from_str_radix(written, 8).unwrap(), sum);
        // Long names split at a slash; unsplittable or non-ASCII ones are
        // not USTAR.
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(20));
        let h = ustar_header(&long, 0).unwrap();
        assert_eq!(&h[..20], "f".repeat(20).as_bytes());
        assert_eq!(&h[345..465], "d".repeat(120).as_bytes());
        assert!(ustar_header(&"x".repeat(101), 0).is_none());
        assert!(ustar_header("é", 0).is_none());
    }

    /// The empty archive's hash is the one Pulumi knows as "empty assets"
    /// (`archive.go`: two zero blocks).
    #[test]
    fn the_empty_archive_has_pulumis_empty_hash() {
        let d = tempfile::tempdir().unwrap();
        let empty = PropertyValue::Archive(Box::new(Archive {
            assets: Some(PropertyMap::new()),
            ..Archive::default()
        }));
        assert_eq!(
            hashed(empty, d.path()).unwrap().as_deref(),
            Some("5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef")
        );
    }

    #[test]
    fn archives_hash_their_members_in_name_order() {
        let d = tempfile::tempdir().unwrap();
        let site = d.path().join("site");
        std::fs::create_dir_all(site.join("css")).unwrap();
        std::fs::create_dir_all(site.join(".pulumi")).unwrap();
        std::fs::write(site.join("index.html"), "<h1>hi</h1>").unwrap();
        std::fs::write(site.join("css/a.css"), "a{}").unwrap();
        std::fs::write(site.join(".pulumi/skip"), "no").unwrap();
        std::fs::write(d.path().join("bundle.zip"), "PK-bytes").unwrap();
        let dir = |p: &str| {
            PropertyValue::Archive(Box::new(Archive {
                path: Some(p.into()),
                ..Archive::default()
            }))
        };
        let from_dir = hashed(dir("site"), d.path()).unwrap().unwrap();
        // The same members as a map of assets: the same stream.
        let map = PropertyValue::Archive(Box::new(Archive {
            assets: Some(PropertyMap::from([
                (
                    "index.html".to_owned(),
                    asset(|a| a.text = Some("<h1>hi</h1>".into())),
                ),
                (
                    "css".to_owned(),
                    PropertyValue::Archive(Box::new(Archive {
                        assets: Some(PropertyMap::from([(
                            "a.css".to_owned(),
                            asset(|a| a.text = Some("a{}".into())),
                        )])),
                        ..Archive::default()
                    })),
                ),
            ])),
            ..Archive::default()
        }));
        assert_eq!(hashed(map, d.path()).unwrap().unwrap(), from_dir);
        // A change of content changes the hash.
        std::fs::write(site.join("css/a.css"), "b{}").unwrap();
        assert_ne!(hashed(dir("site"), d.path()).unwrap().unwrap(), from_dir);
        // An archive file hashes its bytes.
        assert_eq!(
            hashed(dir("bundle.zip"), d.path()).unwrap().unwrap(),
            sha256_hex(b"PK-bytes")
        );
        let e = hashed(dir("site/index.html"), d.path()).unwrap_err();
        assert!(matches!(e, AssetError::NotArchive { .. }), "{e}");
    }

    #[test]
    fn join_cleans_like_go() {
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("a/", "./b"), "a/b");
        assert_eq!(join("a", "../b"), "b");
    }
}
