//! keel's passphrase key derivation: PBKDF2-HMAC-SHA256 (RustCrypto's
//! `pbkdf2` and `sha2`) behind one non-generic function.
//!
//! Why a crate of its own: `pbkdf2_hmac::<Sha256>` is generic, so it is
//! compiled in the crate that names the hash, at that crate's
//! optimization level. In keel's unoptimized test builds the million
//! rounds Pulumi's passphrase format asks for took seconds per key; here
//! they are compiled once, optimized (`[profile.dev.package.keel-kdf]`),
//! whatever profile keel itself is built with.

/// Fills `out` with PBKDF2-HMAC-SHA256 of `password` and `salt` over
/// `rounds` iterations.
pub fn pbkdf2_sha256(password: &[u8], salt: &[u8], rounds: u32, out: &mut [u8]) {
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, rounds, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7914 §11's PBKDF2-HMAC-SHA256 vector ("passwd", "salt", 1).
    #[test]
    fn matches_the_rfc_7914_vector() {
        let mut out = [0u8; 64];
        pbkdf2_sha256(b"passwd", b"salt", 1, &mut out);
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc\
             49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783"
        );
    }
}
