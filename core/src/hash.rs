//! The SHA-256 of some bytes: how blobs are named, how a step's input is
//! compared, how a named plan remembers every content it held.

/// The SHA-256 of a text: how a named plan remembers every content it held
/// without keeping the texts.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// The hash of `text`'s UTF-8 bytes.
    pub fn of(text: &str) -> ContentHash {
        ContentHash::of_bytes(text.as_bytes())
    }

    /// The SHA-256 of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> ContentHash {
        use sha2::Digest;
        ContentHash(sha2::Sha256::digest(bytes).into())
    }

    /// The 64 lowercase hex digits (the blob store's file names).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…")
    }
}
