//! Bounded reads of input files: a file, or the text its gzip compression holds, larger than a
//! cap is an error naming it, read no further than one byte past the cap, so `/dev/zero` or a
//! gzip bomb cannot fill memory.

use anyhow::{Context, Result, bail};
use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

/// All of `r`; an error naming `what` when it holds more than `cap` bytes, or when a read
/// fails (`reading WHAT: …`). The buffer doubles as it fills, but never past `cap` bytes (one
/// more byte is read aside to tell a stream over the cap): `read_to_end`'s doubling held up
/// to twice the cap, and three times while it moved (1.6 GB peak for a 512 MiB cap on
/// `/dev/zero`).
pub fn read_at_most(mut r: impl Read, what: &str, cap: u64) -> Result<Vec<u8>> {
    let limit = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut out: Vec<u8> = Vec::new();
    let mut len = 0;
    let mut read = |buf: &mut [u8]| loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other.with_context(|| format!("reading {what}")),
        }
    };
    loop {
        if len == out.len() {
            if len == limit {
                // Full: one byte more is a stream over the cap.
                if read(&mut [0u8])? > 0 {
                    bail!("{what}: larger than {cap} bytes");
                }
                break;
            }
            let grow = len.max(8 << 10).min(limit - len);
            out.try_reserve_exact(grow)
                .with_context(|| format!("reading {what}: no memory for {} bytes", len + grow))?;
            out.resize(len + grow, 0);
        }
        match read(&mut out[len..])? {
            0 => break,
            n => len += n,
        }
    }
    out.truncate(len);
    Ok(out)
}

/// The bytes of the file at `path`, at most `cap` ([`read_at_most`], naming the path).
pub fn read_file_at_most(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let what = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("reading {what}"))?;
    read_at_most(file, &what, cap)
}

/// `raw` decompressed when it starts with the gzip magic bytes, at most `cap` bytes of it
/// (errors name `WHAT (decompressing gzip)`); otherwise `raw` as it is, not copied.
pub fn gunzip_at_most<'a>(raw: &'a [u8], what: &str, cap: u64) -> Result<Cow<'a, [u8]>> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        read_at_most(
            // Every member (a concatenation is one stream, as gzip -d reads it), and bytes
            // after the last that are no member are an error, never silently dropped.
            flate2::read::MultiGzDecoder::new(raw),
            &format!("{what} (decompressing gzip)"),
            cap,
        )
        .map_err(|e| {
            // The decoder's own words ("unexpected end of file") fit a short file, not bytes
            // after the last member, which it reads as a member cut short.
            let damaged = e
                .chain()
                .filter_map(|c| c.downcast_ref::<std::io::Error>())
                .any(|io| {
                    matches!(
                        io.kind(),
                        std::io::ErrorKind::UnexpectedEof
                            | std::io::ErrorKind::InvalidInput
                            | std::io::ErrorKind::InvalidData
                    )
                });
            if damaged {
                e.context(format!(
                    "{what}: not a whole gzip file (cut short, damaged, or with bytes after \
                     its last member)"
                ))
            } else {
                e
            }
        })
        .map(Cow::Owned)
    } else {
        Ok(Cow::Borrowed(raw))
    }
}

/// JSON from a file's bytes `raw`, gzip-compressed or not (told by the gzip magic bytes), the
/// text at most `cap` bytes; objects giving one key twice are refused
/// ([`crate::json::parse_unique_keys`]). Errors name `what`.
///
/// (Parsing the text as it is decompressed, never held whole, was measured and not kept: a
/// bomb of one long string still peaked at 549 MB against 818, since the parser gathers a
/// string whole, and the parse ran 15 times slower.)
pub fn decode_json_at_most(raw: &[u8], what: &str, cap: u64) -> Result<serde_json::Value> {
    let bytes = gunzip_at_most(raw, what, cap)?;
    let text = std::str::from_utf8(&bytes).with_context(|| format!("{what}: not UTF-8"))?;
    crate::json::parse_unique_keys(text).with_context(|| format!("{what}: not valid JSON"))
}

/// The JSON in the file at `path` ([`read_file_at_most`], then [`decode_json_at_most`]), the
/// file and its text each at most `cap` bytes.
pub fn read_json_at_most(path: &Path, cap: u64) -> Result<serde_json::Value> {
    let raw = read_file_at_most(path, cap)?;
    decode_json_at_most(&raw, &path.display().to_string(), cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exactly the cap is read; one byte more is refused, naming what; an endless reader stops.
    #[test]
    fn reads_stop_one_byte_past_the_cap() {
        assert_eq!(read_at_most(&b"abc"[..], "x", 3).unwrap(), b"abc");
        let err = format!("{:#}", read_at_most(&b"abcd"[..], "x", 3).unwrap_err());
        assert_eq!(err, "x: larger than 3 bytes");
        let err = format!(
            "{:#}",
            read_at_most(std::io::repeat(0), "/dev/zero", 1 << 20).unwrap_err()
        );
        assert_eq!(err, "/dev/zero: larger than 1048576 bytes");
        assert!(read_at_most(&b""[..], "x", 0).unwrap().is_empty());
        assert!(read_at_most(&b"a"[..], "x", u64::MAX).is_ok());
        let err = format!(
            "{:#}",
            read_file_at_most(Path::new("/nonexistent/f"), 9).unwrap_err()
        );
        assert!(err.starts_with("reading /nonexistent/f: "), "{err}");
        assert_eq!(&*gunzip_at_most(b"plain", "x", 1).unwrap(), b"plain");
    }

    /// Concatenated gzip members are one stream, as `gzip -d` reads them; bytes after the last
    /// member that are no member are an error, not silently dropped (a first member holding a
    /// whole JSON value made a partial alloc pass).
    #[test]
    fn every_gzip_member_is_read_and_trailing_junk_refused() {
        use std::io::Write as _;
        let gz = |text: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(text).unwrap();
            e.finish().unwrap()
        };
        let two = [gz(b"{\"a\": "), gz(b"1}")].concat();
        assert_eq!(&*gunzip_at_most(&two, "x", 100).unwrap(), b"{\"a\": 1}");
        assert_eq!(
            decode_json_at_most(&two, "x", 100).unwrap(),
            serde_json::json!({"a": 1})
        );
        let junk = [gz(b"{}"), b"junk".to_vec()].concat();
        let err = format!("{:#}", decode_json_at_most(&junk, "x", 100).unwrap_err());
        assert!(err.contains("x (decompressing gzip)"), "{err}");
        // Said as what it may be, not only as the decoder's "unexpected end of file".
        assert!(err.contains("bytes after its last member"), "{err}");
        let whole = gz(b"{}");
        let short = &whole[..whole.len() - 3];
        let err = format!("{:#}", decode_json_at_most(short, "x", 100).unwrap_err());
        assert!(err.contains("not a whole gzip file (cut short"), "{err}");
        // Past the cap is said as that, without the hint.
        let big = gz(&[b' '; 200]);
        let err = format!("{:#}", decode_json_at_most(&big, "x", 100).unwrap_err());
        assert!(
            err.contains("larger than 100 bytes") && !err.contains("whole gzip"),
            "{err}"
        );
    }
}
