//! The `KEY VALUE` line format of `bintrie root` and `bintrie import`, and fixed-length hex.
//!
//! One tree write per line: two 32-byte hex words (0x optional) separated by whitespace; blank
//! lines and lines starting with `#` are skipped. Every parser here returns an error on bad input
//! and never panics (they are property-tested on arbitrary input below). Hex is decoded with
//! alloy's `hex` (const-hex), never by hand.

use crate::json::{hex_fault, shown};
use alloy_primitives::hex;
use anyhow::{Context, Result, anyhow, bail};
use bintrie_keys::TreeKey;
use std::io::{BufRead, Read};

/// The longest `KEY VALUE` line accepted, in bytes (without its line ending). A valid line is
/// 130 bytes (two 0x-prefixed words and a space) plus optional whitespace, or a comment.
pub const MAX_LINE_BYTES: usize = 4096;

/// `s` without a leading `0x` or `0X`.
fn strip_0x(s: &str) -> &str {
    s.strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s)
}

/// Parses 32 bytes of hex (0x optional, exactly 64 digits).
pub fn parse_b32(s: &str) -> Result<[u8; 32]> {
    parse_hex_array(s)
}

/// Exactly `N` bytes of hex (0x optional); errors say how many digits were given.
pub fn parse_hex_array<const N: usize>(s: &str) -> Result<[u8; N]> {
    let hex = strip_0x(s);
    // The decoder checks every digit itself (vectorised): the checks below only word an error.
    if hex.len() == 2 * N
        && let Ok(bytes) = hex::decode_to_array::<_, N>(hex)
    {
        return Ok(bytes);
    }
    // A character that is no hex digit is named first: counted as a length, "é" among 63
    // digits read "got 64 characters" where 64 were asked for.
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("not hex: {} ({})", shown(s), hex_fault(s));
    }
    // Every character a hex digit: the decoder above refused the length.
    bail!(
        "expected {N} bytes of hex ({} digits), got {} digits",
        2 * N,
        hex.len()
    )
}

/// Parses one input line: `None` for blank lines and `#` comments; errors name `source:line`.
pub fn parse_kv_line(line: &str, source: &str, n: usize) -> Result<Option<(TreeKey, [u8; 32])>> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    let mut parts = t.split_whitespace();
    let (Some(k), Some(v), None) = (parts.next(), parts.next(), parts.next()) else {
        bail!(
            "{source}:{n}: expected `KEY VALUE` (two 32-byte hex words), got {}",
            shown(t)
        );
    };
    let key = parse_b32(k).with_context(|| format!("{source}:{n}: bad key"))?;
    let value = parse_b32(v).with_context(|| format!("{source}:{n}: bad value"))?;
    Ok(Some((TreeKey::from_bytes(key), value)))
}

/// One line read by [`kv_lines`]: its number (1-based) and its entry (`None` for a blank or
/// comment line).
pub type KvLine = (usize, Option<(TreeKey, [u8; 32])>);

/// The `KEY VALUE` lines of `reader`, parsed one at a time: see [`kv_lines`].
pub struct KvLines<R> {
    reader: R,
    source: String,
    /// The number of the line read last (1-based).
    line: usize,
    buf: Vec<u8>,
    /// Set after the end of input or an error: the iterator is fused.
    done: bool,
}

/// Reads `KEY VALUE` lines from `reader`, one at a time and without ever buffering more than
/// [`MAX_LINE_BYTES`] (+ 2 for the line ending) bytes of a line.
///
/// Yields `Ok((n, entry))` for line `n` (1-based), with `entry` as [`parse_kv_line`] returns it
/// (`None` for a blank or comment line). A line longer than [`MAX_LINE_BYTES`] (e.g. from
/// `/dev/zero`), a line that is not UTF-8, a read error or a bad line is yielded once as an
/// `Err` naming `source:n`, and the iteration ends there. Line endings are `\n` or `\r\n`.
pub fn kv_lines<R: BufRead>(reader: R, source: &str) -> KvLines<R> {
    KvLines {
        reader,
        source: source.to_string(),
        line: 0,
        buf: Vec::new(),
        done: false,
    }
}

impl<R: BufRead> KvLines<R> {
    fn next_line(&mut self) -> Result<Option<KvLine>> {
        let (source, n) = (&self.source, self.line + 1);
        self.buf.clear();
        // Room for the longest line and its `\r\n`: more means the line is too long.
        let limit = MAX_LINE_BYTES as u64 + 2;
        let read = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .with_context(|| format!("{source}: reading line {n}"))?;
        if read == 0 {
            return Ok(None);
        }
        self.line = n;
        let mut content: &[u8] = &self.buf;
        if let Some(c) = content.strip_suffix(b"\n") {
            content = c.strip_suffix(b"\r").unwrap_or(c);
        }
        if content.len() > MAX_LINE_BYTES {
            bail!("{source}:{n}: line longer than {MAX_LINE_BYTES} bytes");
        }
        let line =
            std::str::from_utf8(content).map_err(|e| anyhow!("{source}:{n}: not UTF-8 ({e})"))?;
        Ok(Some((n, parse_kv_line(line, source, n)?)))
    }
}

impl<R: BufRead> Iterator for KvLines<R> {
    type Item = Result<KvLine>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_line().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

impl<R: BufRead> std::iter::FusedIterator for KvLines<R> {}

impl<R: BufRead> KvLines<R> {
    /// The next up to `n` entries (fewer only at the end of input; empty when it is over).
    /// An error ends the iteration, as for single lines.
    pub fn next_batch(&mut self, n: usize) -> Result<Vec<(TreeKey, [u8; 32])>> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.next() {
                None => break,
                Some(item) => out.extend(item?.1),
            }
        }
        Ok(out)
    }
}

/// Opens `input` for [`kv_lines`]: `-` is stdin (named `<stdin>` in errors), anything else a
/// file path (its name). Errors name the file that cannot be opened.
pub fn open_input(input: &str) -> Result<(Box<dyn BufRead + Send>, String)> {
    if input == "-" {
        return Ok((
            Box::new(std::io::BufReader::new(std::io::stdin())),
            "<stdin>".to_string(),
        ));
    }
    let f = std::fs::File::open(input).with_context(|| format!("opening {input}"))?;
    Ok((Box::new(std::io::BufReader::new(f)), input.to_string()))
}

/// Reads `KEY VALUE` lines (see [`kv_lines`]). Returns the writes in input order (a later
/// write to the same key wins when applied).
pub fn read_kv_lines(reader: impl BufRead, source: &str) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let mut out = Vec::new();
    for item in kv_lines(reader, source) {
        if let (_, Some(kv)) = item? {
            out.push(kv);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::json_hex_bytes;
    use crate::testing::arb_hexish;
    use proptest::prelude::*;
    use serde_json::Value;
    use std::io::BufReader;

    fn word(n: u8) -> String {
        format!("{n:064x}")
    }

    #[test]
    fn batches_split_the_entries_and_skip_comments() {
        let text = format!(
            "{} {}\n# c\n\n{} {}\n{} {}\n",
            word(1),
            word(2),
            word(3),
            word(4),
            word(5),
            word(6)
        );
        let mut lines = kv_lines(BufReader::new(text.as_bytes()), "t");
        assert_eq!(lines.next_batch(2).unwrap().len(), 2);
        assert_eq!(lines.next_batch(2).unwrap().len(), 1);
        assert!(lines.next_batch(2).unwrap().is_empty());
        let bad = format!("{} {}\nnope\n", word(1), word(2));
        let mut lines = kv_lines(BufReader::new(bad.as_bytes()), "t");
        assert!(format!("{:#}", lines.next_batch(5).unwrap_err()).contains("t:2"));
        assert!(open_input("/nonexistent/x").is_err());
    }

    #[test]
    fn read_kv_lines_parses_and_names_lines() {
        let text = format!("# comment\n\n0x01{} {:0>64}\n", "0".repeat(62), "2");
        let got = read_kv_lines(text.as_bytes(), "t").unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.stem[0], 0x01);
        assert_eq!(got[0].1[31], 2);
        let err = read_kv_lines("abc def\n".as_bytes(), "in").unwrap_err();
        assert!(format!("{err:#}").contains("in:1: bad key"), "{err:#}");
        let err = read_kv_lines("x\n".as_bytes(), "in").unwrap_err();
        assert!(
            format!("{err:#}").contains("in:1: expected `KEY VALUE`"),
            "{err:#}"
        );
    }

    #[test]
    fn kv_lines_yields_line_numbers_and_handles_crlf() {
        let text = format!(
            "# c\r\n{} 0X{}\r\n\n{} {}",
            word(1),
            word(2),
            word(3),
            word(4)
        );
        let got: Vec<_> = kv_lines(text.as_bytes(), "t")
            .map(|r| r.unwrap())
            .map(|(n, kv)| (n, kv.map(|(k, v)| (k.stem[30], v[31]))))
            .collect();
        assert_eq!(
            got,
            vec![(1, None), (2, Some((0, 2))), (3, None), (4, Some((0, 4)))]
        );
    }

    /// `-i /dev/zero`: an endless line is an error after MAX_LINE_BYTES, not an endless buffer.
    #[test]
    fn endless_line_is_an_error_not_an_endless_buffer() {
        let err = read_kv_lines(BufReader::new(std::io::repeat(0)), "/dev/zero").unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "/dev/zero:1: line longer than 4096 bytes"
        );
        let mut it = kv_lines(BufReader::new(std::io::repeat(b'a')), "z");
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none(), "fused after an error");
    }

    #[test]
    fn line_length_cap_is_exact() {
        let kv = format!("{} {}", word(1), word(2));
        for ending in ["\n", "\r\n"] {
            // A line of exactly MAX_LINE_BYTES, then a valid line.
            let ok = format!("#{}{ending}{kv}{ending}", "c".repeat(MAX_LINE_BYTES - 1));
            assert_eq!(
                read_kv_lines(ok.as_bytes(), "t").unwrap().len(),
                1,
                "{ending:?}"
            );
            let long = format!("#{}{ending}{kv}{ending}", "c".repeat(MAX_LINE_BYTES));
            let err = read_kv_lines(long.as_bytes(), "t").unwrap_err();
            assert_eq!(
                format!("{err:#}"),
                "t:1: line longer than 4096 bytes",
                "{ending:?}"
            );
        }
        // The last line, without a line ending.
        let ok = format!("{kv}\n#{}", "c".repeat(MAX_LINE_BYTES - 1));
        assert_eq!(read_kv_lines(ok.as_bytes(), "t").unwrap().len(), 1);
        // The cap counts each line from its own start.
        let long = format!("{kv}\n#{}", "c".repeat(MAX_LINE_BYTES));
        let err = read_kv_lines(long.as_bytes(), "t").unwrap_err();
        assert_eq!(format!("{err:#}"), "t:2: line longer than 4096 bytes");
    }

    #[test]
    fn invalid_utf8_line_is_named() {
        let mut text = format!("{} {}\n", word(1), word(2)).into_bytes();
        text.extend_from_slice(b"# caf\xe9\n");
        let err = read_kv_lines(text.as_slice(), "in").unwrap_err();
        assert!(format!("{err:#}").starts_with("in:2: not UTF-8"), "{err:#}");
    }

    /// A 2-byte UTF-8 character at an odd byte index used to panic ("not a char boundary").
    #[test]
    fn non_ascii_hex_is_an_error_not_a_panic() {
        let s = format!("0é{}", "0".repeat(61));
        assert_eq!(s.len(), 64);
        assert!(parse_b32(&s).is_err());
        assert!(parse_b32(&format!("0x{s}")).is_err());
        let line = format!("{s} {}", word(1));
        assert!(parse_kv_line(&line, "t", 1).is_err());
        for code in ["0é0", "0x0é0", "é", "0xé"] {
            let err = json_hex_bytes(&Value::from(code), "a.code").unwrap_err();
            assert!(err.to_string().starts_with("a.code: "), "{err}");
        }
    }

    /// A non-hex character is named, not counted: 63 digits and an "é" are not "64 characters".
    #[test]
    fn a_bad_character_is_named_before_the_length() {
        let s = format!("{}é", "0".repeat(63));
        let e = parse_b32(&s).unwrap_err().to_string();
        assert!(e.contains("invalid character 'é' at position 63"), "{e}");
        let e = parse_b32(&"0".repeat(63)).unwrap_err().to_string();
        assert!(e.contains("(64 digits), got 63 digits"), "{e}");
    }

    /// `u8::from_str_radix("+1", 16)` is `Ok(1)`: a sign is not a hex digit.
    #[test]
    fn plus_is_not_a_hex_digit() {
        let s = format!("+1{}", "0".repeat(62));
        assert!(parse_b32(&s).is_err());
        assert!(parse_b32(&format!("0x{s}")).is_err());
        assert!(json_hex_bytes(&Value::from("+1"), "c").is_err());
        assert!(json_hex_bytes(&Value::from("0x+1"), "c").is_err());
    }

    #[test]
    fn hex_still_parses() {
        let mut want = [0u8; 32];
        want[0] = 0xab;
        want[31] = 0xcd;
        let lower = format!("ab{}cd", "0".repeat(60));
        for s in [
            lower.clone(),
            format!("0x{lower}"),
            format!("0X{}", lower.to_uppercase()),
        ] {
            assert_eq!(parse_b32(&s).unwrap(), want, "{s}");
        }
        assert!(parse_b32(&format!("0x0x{}", "0".repeat(62))).is_err());
        assert!(parse_b32(&"0".repeat(63)).is_err());
        assert_eq!(
            json_hex_bytes(&Value::from("0xABcd"), "c").unwrap(),
            [0xab, 0xcd]
        );
        assert_eq!(json_hex_bytes(&Value::from("ab"), "c").unwrap(), [0xab]);
        assert!(json_hex_bytes(&Value::from("0x"), "c").unwrap().is_empty());
        assert!(json_hex_bytes(&Value::from("abc"), "c").is_err());
    }

    // -----------------------------------------------------------------------------------------
    // Property tests: arbitrary input gives a value or an error, never a panic.

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn parse_b32_never_panics(s in arb_hexish()) {
            if let Ok(b) = parse_b32(&s) {
                // Accepted: exactly 64 hex digits after an optional prefix.
                let h = strip_0x(&s);
                prop_assert!(h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit()), "{s:?}");
                prop_assert_eq!(hex::encode(b), h.to_ascii_lowercase());
            }
        }

        #[test]
        fn parse_b32_on_64_bytes_never_panics(
            prefix in "(0[xX])?",
            chars in prop::collection::vec(prop_oneof![
                "[0-9a-fA-F]", "[+\\-_ xé€😀\u{80}]", any::<char>().prop_map(String::from),
            ], 0..66),
        ) {
            let s = prefix + &chars.concat();
            let _ = parse_b32(&s);
            let _ = parse_kv_line(&format!("{s} {s}"), "t", 1);
        }

        #[test]
        fn parse_kv_line_never_panics(line in prop_oneof![
            any::<String>(),
            concat!(
                "[ \t#]{0,2}(0[xX])?[0-9a-fA-F+é]{60,66}",
                "[ \t]{1,3}(0[xX])?[0-9a-fA-F+é]{60,66}( .{0,3})?",
            ),
        ]) {
            if let Some((_, v)) = parse_kv_line(&line, "t", 1).unwrap_or(None) {
                prop_assert_eq!(v.len(), 32);
            }
        }

        #[test]
        fn kv_lines_never_panic(
            bytes in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..6000),
                prop::collection::vec(
                    prop_oneof![
                        Just(b"\n".to_vec()), Just(b"\r\n".to_vec()), Just(b"#".to_vec()),
                        Just(b" ".to_vec()), Just(vec![0xe9]), Just(vec![0xc3, 0xa9]),
                        Just(b"0x".to_vec()), Just(vec![b'a'; 64]), Just(vec![b'0'; 1000]),
                        Just(vec![b'c'; 4096]),
                    ],
                    0..40,
                ).prop_map(|v| v.concat()),
            ],
            capacity in 1usize..300,
        ) {
            let reader = BufReader::with_capacity(capacity, bytes.as_slice());
            let mut last = 0;
            for item in kv_lines(reader, "t") {
                match item {
                    Ok((n, _)) => {
                        prop_assert_eq!(n, last + 1);
                        last = n;
                    }
                    Err(e) => {
                        let msg = format!("{e:#}");
                        prop_assert!(msg.starts_with("t:"), "{}", msg);
                    }
                }
            }
            let _ = read_kv_lines(bytes.as_slice(), "t");
        }

    }
}
