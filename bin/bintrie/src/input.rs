//! Parsing user input: key/value lines and geth-style genesis allocs.
//!
//! Every parser here returns an error on bad input and never panics (they are property-tested
//! on arbitrary input below). Hex is decoded with alloy's `hex` (const-hex), never by hand.

use alloy_primitives::{Address, hex};
use anyhow::{Context, Result, anyhow, bail};
pub(crate) use bintrie_exec::json::{Spellings, json_hex_bytes, json_u256, shown};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use serde_json::Value;
use std::io::{BufRead, Read};

/// The longest `KEY VALUE` line accepted, in bytes (without its line ending). A valid line is
/// 130 bytes (two 0x-prefixed words and a space) plus optional whitespace, or a comment.
pub(crate) const MAX_LINE_BYTES: usize = 4096;

/// `s` without a leading `0x` or `0X`.
fn strip_0x(s: &str) -> &str {
    s.strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s)
}

/// Parses 32 bytes of hex (0x optional, exactly 64 digits).
pub(crate) fn parse_b32(s: &str) -> Result<[u8; 32]> {
    parse_hex_array(s)
}

/// Exactly `N` bytes of hex (0x optional); errors say how many digits were given.
pub(crate) fn parse_hex_array<const N: usize>(s: &str) -> Result<[u8; N]> {
    let digits = strip_0x(s).chars().count();
    if digits != 2 * N {
        bail!(
            "expected {N} bytes of hex ({} digits), got {digits} characters",
            2 * N
        );
    }
    // `decode_to_array` strips one 0x/0X prefix itself.
    hex::decode_to_array::<_, N>(s).map_err(|e| anyhow!("not hex: {} ({e})", shown(s)))
}

/// Parses one input line: `None` for blank lines and `#` comments; errors name `source:line`.
pub(crate) fn parse_kv_line(
    line: &str,
    source: &str,
    n: usize,
) -> Result<Option<(TreeKey, [u8; 32])>> {
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
pub(crate) type KvLine = (usize, Option<(TreeKey, [u8; 32])>);

/// The `KEY VALUE` lines of `reader`, parsed one at a time: see [`kv_lines`].
pub(crate) struct KvLines<R> {
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
pub(crate) fn kv_lines<R: BufRead>(reader: R, source: &str) -> KvLines<R> {
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

/// Reads `KEY VALUE` lines (see [`kv_lines`]). Returns the writes in input order (a later
/// write to the same key wins when applied).
pub(crate) fn read_kv_lines(
    reader: impl BufRead,
    source: &str,
) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let mut out = Vec::new();
    for item in kv_lines(reader, source) {
        if let (_, Some(kv)) = item? {
            out.push(kv);
        }
    }
    Ok(out)
}

/// Parses a geth genesis alloc (or a whole genesis file with an `alloc` field) into tree writes.
///
/// Follows geth's genesis semantics: a storage slot whose value is zero is not written (zero
/// over zero is a no-op, SPEC §4). Errors name the JSON path of the bad field. An address or a
/// slot given twice in different spellings is an error.
pub(crate) fn alloc_writes(json: &Value) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let (alloc, prefix) = match json.get("alloc") {
        Some(a) => (a, "alloc"),
        None => (json, ""),
    };
    let top = if prefix.is_empty() {
        "(top level)"
    } else {
        prefix
    };
    let obj = alloc
        .as_object()
        .ok_or_else(|| anyhow!("{top}: expected an object of address -> account"))?;
    let mut addresses = Spellings::new();
    let mut writes = Vec::new();
    for (addr_str, acct) in obj {
        let at = if prefix.is_empty() {
            addr_str.clone()
        } else {
            format!("{prefix}.{addr_str}")
        };
        // 0x optional, either case.
        let address: Address = addr_str
            .parse()
            .map_err(|e| anyhow!("{at}: not a 20-byte address: {e}"))?;
        addresses.insert(address, addr_str, top, "address")?;
        let fields = acct
            .as_object()
            .ok_or_else(|| anyhow!("{at}: expected an object"))?;
        for key in fields.keys() {
            if ![
                "balance",
                "nonce",
                "code",
                "storage",
                "privateKey",
                "secretKey",
            ]
            .contains(&key.as_str())
            {
                bail!("{at}.{key}: unknown account field");
            }
        }
        let balance = match fields.get("balance") {
            Some(b) => json_u256(b, &format!("{at}.balance"))?,
            None => bail!("{at}.balance: missing"),
        };
        let nonce = match fields.get("nonce") {
            Some(n) => {
                let v = json_u256(n, &format!("{at}.nonce"))?;
                u64::try_from(v).map_err(|_| anyhow!("{at}.nonce: does not fit in 64 bits"))?
            }
            None => 0,
        };
        let code = match fields.get("code") {
            Some(c) => json_hex_bytes(c, &format!("{at}.code"))?,
            None => Vec::new(),
        };
        let mut storage = Vec::new();
        if let Some(s) = fields.get("storage") {
            let s = s
                .as_object()
                .ok_or_else(|| anyhow!("{at}.storage: expected an object of slot -> value"))?;
            let mut slots = Spellings::new();
            for (slot_str, value) in s {
                let sat = format!("{at}.storage.{slot_str}");
                let slot = json_u256(&Value::String(slot_str.clone()), &sat)?;
                slots.insert(slot, slot_str, &format!("{at}.storage"), "slot")?;
                let value = json_u256(value, &sat)?;
                if !value.is_zero() {
                    storage.push((slot, value));
                }
            }
        }
        let state = AccountState {
            nonce,
            balance,
            code,
            storage,
        };
        writes.extend(account_entries(&address, &state).map_err(|e| anyhow!("{at}: {e}"))?);
    }
    Ok(writes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bintrie_exec::testing::{arb_hexish, arb_json, arb_key};
    use proptest::prelude::*;
    use std::io::BufReader;

    fn word(n: u8) -> String {
        format!("{n:064x}")
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

    #[test]
    fn alloc_errors_name_the_path() {
        let j: Value = serde_json::from_str(
            r#"{"alloc": {"0x00000000000000000000000000000000000000aa": {"balance": "12x"}}}"#,
        )
        .unwrap();
        let err = alloc_writes(&j).unwrap_err().to_string();
        assert!(
            err.starts_with("alloc.0x00000000000000000000000000000000000000aa.balance"),
            "{err}"
        );
        let j: Value = serde_json::from_str(r#"{"zz": {"balance": "1"}}"#).unwrap();
        assert!(
            alloc_writes(&j)
                .unwrap_err()
                .to_string()
                .contains("not a 20-byte address")
        );
        let j: Value = serde_json::from_str(
            r#"{"00000000000000000000000000000000000000aa": {"balance": "0x10", "nonce": "0x2", "storage": {"0x1": "0x0"}}}"#,
        )
        .unwrap();
        // BASIC_DATA + CODE_HASH; the zero slot is not written.
        assert_eq!(alloc_writes(&j).unwrap().len(), 2);
    }

    /// One address spelled twice (with and without 0x, or in another hex case) is refused, not
    /// merged.
    #[test]
    fn alloc_refuses_an_address_spelled_twice() {
        let a = "00000000000000000000000000000000000000aa";
        for (x, y) in [
            (format!("0x{a}"), a.to_string()),
            (format!("0x{a}"), format!("0x{}", a.to_uppercase())),
            (format!("0x{a}"), format!("0X{a}")),
        ] {
            let j = serde_json::json!({ "alloc": { &x: {"balance": "1"}, &y: {"balance": "2"} } });
            let err = alloc_writes(&j).unwrap_err().to_string();
            assert!(
                err.starts_with("alloc: ") && err.contains(&x) && err.contains(&y),
                "{err}"
            );
            assert!(err.contains("same address"), "{err}");
        }
    }

    /// One slot spelled twice (`0x1`, `0x01`, `1`) is refused, zero values included.
    #[test]
    fn alloc_refuses_a_slot_spelled_twice() {
        for (x, y, vy) in [
            ("0x1", "0x01", "0x2"),
            ("0x1", "1", "0x0"),
            ("0xA", "0xa", "0xa"),
        ] {
            let j = serde_json::json!({
                "0x00000000000000000000000000000000000000aa":
                    {"balance": "1", "storage": { x: "0x5", y: vy }}
            });
            let err = alloc_writes(&j).unwrap_err().to_string();
            assert!(
                err.contains(".storage: ") && err.contains(x) && err.contains(y),
                "{err}"
            );
        }
        let j = serde_json::json!({
            "0x00000000000000000000000000000000000000aa":
                {"balance": "1", "storage": { "0x1": "0x5", "0x2": "0x6" }}
        });
        assert_eq!(alloc_writes(&j).unwrap().len(), 4);
    }

    // -----------------------------------------------------------------------------------------
    // Property tests: arbitrary input gives a value or an error, never a panic.

    /// A number-like JSON value: mostly well-formed, sometimes not.
    fn arb_uintish() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => "0x[0-9a-f]{0,64}".prop_map(Value::String),
            1 => "[0-9]{1,78}".prop_map(Value::String),
            1 => any::<u64>().prop_map(Value::from),
            1 => arb_hexish().prop_map(Value::String),
            1 => arb_json(),
        ]
    }

    /// Alloc-shaped JSON: addresses in various spellings, accounts with well- or ill-formed
    /// fields.
    fn arb_alloc() -> impl Strategy<Value = Value> {
        let account = (
            prop::option::of(arb_uintish()),
            prop::option::of(arb_uintish()),
            prop::option::of(prop_oneof![
                "0x([0-9a-f]{2}){0,40}".prop_map(Value::String),
                arb_hexish().prop_map(Value::String),
                arb_json(),
            ]),
            prop::option::of(prop::collection::vec(
                (
                    prop_oneof!["0x0{0,3}[0-9a-f]{1,3}", "0{0,2}[0-9]{1,3}", arb_hexish()],
                    arb_uintish(),
                ),
                0..5,
            )),
            prop::option::of((arb_key(), arb_json())),
        )
            .prop_map(|(balance, nonce, code, storage, extra)| {
                let mut m = serde_json::Map::new();
                balance.map(|v| m.insert("balance".into(), v));
                nonce.map(|v| m.insert("nonce".into(), v));
                code.map(|v| m.insert("code".into(), v));
                storage.map(|s| m.insert("storage".into(), Value::Object(s.into_iter().collect())));
                extra.map(|(k, v)| m.insert(k, v));
                Value::Object(m)
            });
        let address = prop_oneof![
            "(0[xX])?00{0,2}[0-9a-fA-F]{37,38}",
            "(0[xX])?[0-9a-fA-F]{40}",
            arb_hexish(),
        ];
        (
            prop::collection::vec((address, prop_oneof![4 => account, 1 => arb_json()]), 0..4),
            any::<bool>(),
        )
            .prop_map(|(accounts, wrapped)| {
                let alloc = Value::Object(accounts.into_iter().collect());
                if wrapped {
                    serde_json::json!({ "config": {}, "alloc": alloc })
                } else {
                    alloc
                }
            })
    }

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

        #[test]
        fn alloc_writes_never_panics_on_json_trees(j in arb_json()) {
            let _ = alloc_writes(&j);
            let _ = alloc_writes(&serde_json::json!({ "alloc": j }));
        }

        #[test]
        fn alloc_writes_never_panics_on_alloc_shaped_json(j in arb_alloc()) {
            let _ = alloc_writes(&j);
        }

        #[test]
        fn alloc_writes_never_panics_on_strings_parsed_as_json(s in prop_oneof![
            any::<String>(),
            arb_alloc().prop_flat_map(|j| {
                let text = j.to_string();
                // A cut or a one-character change of alloc-shaped JSON text.
                let len = text.len();
                (Just(text), 0..=len, any::<char>()).prop_map(|(t, i, c)| {
                    let i = (0..=i).rev().find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                    let mut out = t[..i].to_string();
                    out.push(c);
                    let mut rest = t[i..].chars();
                    rest.next();
                    out.push_str(rest.as_str());
                    out
                })
            }),
        ]) {
            if let Ok(j) = serde_json::from_str::<Value>(&s) {
                let _ = alloc_writes(&j);
            }
        }
    }
}
