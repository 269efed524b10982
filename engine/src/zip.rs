//! A minimal zip writer: every entry stored (no compression), names in
//! UTF-8, a fixed 1980-01-01 timestamp so the same files give the same
//! bytes. Without zip64, so at most 65,535 entries and 4 GiB in all.

/// Why the archive could not be written.
#[derive(Debug, thiserror::Error)]
#[error("zip: {0}")]
pub struct ZipError(String);

fn u16_le(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn u32_le(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// DOS date of 1980-01-01 (day 1, month 1, year 0).
const DOS_DATE: u16 = (1 << 5) | 1;
/// UTF-8 names.
const FLAGS: u16 = 1 << 11;

/// The archive of `entries` (name, bytes), in the order given.
pub fn write(entries: &[(String, Vec<u8>)]) -> Result<Vec<u8>, ZipError> {
    let count = u16::try_from(entries.len())
        .map_err(|_| ZipError(format!("{} entries, over 65535", entries.len())))?;
    let too_big = || ZipError("the archive would pass 4 GiB".into());
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, bytes) in entries {
        let offset = u32::try_from(out.len()).map_err(|_| too_big())?;
        let size = u32::try_from(bytes.len()).map_err(|_| too_big())?;
        let name_len =
            u16::try_from(name.len()).map_err(|_| ZipError(format!("name too long: {name}")))?;
        let crc = crc32fast::hash(bytes);
        // Local file header.
        u32_le(&mut out, 0x0403_4b50);
        u16_le(&mut out, 20);
        u16_le(&mut out, FLAGS);
        u16_le(&mut out, 0);
        u16_le(&mut out, 0);
        u16_le(&mut out, DOS_DATE);
        u32_le(&mut out, crc);
        u32_le(&mut out, size);
        u32_le(&mut out, size);
        u16_le(&mut out, name_len);
        u16_le(&mut out, 0);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(bytes);
        // Its central directory entry.
        u32_le(&mut central, 0x0201_4b50);
        u16_le(&mut central, 20);
        u16_le(&mut central, 20);
        u16_le(&mut central, FLAGS);
        u16_le(&mut central, 0);
        u16_le(&mut central, 0);
        u16_le(&mut central, DOS_DATE);
        u32_le(&mut central, crc);
        u32_le(&mut central, size);
        u32_le(&mut central, size);
        u16_le(&mut central, name_len);
        u16_le(&mut central, 0);
        u16_le(&mut central, 0);
        u16_le(&mut central, 0);
        u16_le(&mut central, 0);
        u32_le(&mut central, 0o100_644 << 16);
        u32_le(&mut central, offset);
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = u32::try_from(out.len()).map_err(|_| too_big())?;
    let central_size = u32::try_from(central.len()).map_err(|_| too_big())?;
    out.extend_from_slice(&central);
    // End of central directory.
    u32_le(&mut out, 0x0605_4b50);
    u16_le(&mut out, 0);
    u16_le(&mut out, 0);
    u16_le(&mut out, count);
    u16_le(&mut out, count);
    u32_le(&mut out, central_size);
    u32_le(&mut out, central_offset);
    u16_le(&mut out, 0);
    u32::try_from(out.len()).map_err(|_| too_big())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_reads_the_archive_back() {
        let bytes = write(&[
            ("01-intake.md".into(), b"# Intake\n".to_vec()),
            ("report.html".into(), "<p>caf\u{e9}</p>".as_bytes().to_vec()),
            ("empty.txt".into(), Vec::new()),
        ])
        .expect("written");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run.zip");
        std::fs::write(&path, &bytes).expect("write");
        let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nfor i in z.infolist(): print(i.filename, z.read(i).decode())";
        let output = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&path)
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "01-intake.md # Intake\n\nreport.html <p>caf\u{e9}</p>\nempty.txt \n"
        );
        assert_eq!(write(&[]).expect("empty").len(), 22);
    }
}
