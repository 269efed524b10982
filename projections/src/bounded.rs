//! Reading a file a person can edit with a bound: never more than the limit
//! plus one byte is read, so a huge file (or a link to an endless one such
//! as `/dev/zero`) costs no more memory than the limit.

use std::io::Read;
use std::path::Path;

/// The bytes of `path` when there are at most `max`; otherwise
/// `Err(Over(n))`, `n` being its size when the file says it, else `max + 1`.
pub fn read(path: &Path, max: usize) -> std::io::Result<Result<Vec<u8>, Over>> {
    let file = std::fs::File::open(path)?;
    let said = file.metadata().map(|m| m.len()).unwrap_or(0);
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        let size = usize::try_from(said).unwrap_or(usize::MAX).max(bytes.len());
        return Ok(Err(Over(size)));
    }
    Ok(Ok(bytes))
}

/// A file over its limit, and its size as far as it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over(pub usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_over_the_limit_after_reading_just_past_it() {
        assert_eq!(
            read(Path::new("/dev/zero"), 1000).expect("readable"),
            Err(Over(1001))
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").expect("write");
        assert_eq!(read(&file, 5).expect("read"), Ok(b"12345".to_vec()));
        assert_eq!(read(&file, 4).expect("read"), Err(Over(5)));
    }
}
