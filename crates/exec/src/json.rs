//! JSON values in fixtures and allocs: numbers, hex bytes, and keys that must not repeat. Every
//! error names where in the input the value is (`at`), and quotes at most a short prefix of it.

use alloy_primitives::{U256, hex};
use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// At most this many characters of a bad input are quoted in an error message.
const SHOWN_CHARS: usize = 80;

/// `s` quoted for an error message, cut after 80 characters.
pub fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        None => format!("{s:?}"),
        Some((i, _)) => format!("{:?}… ({} bytes)", &s[..i], s.len()),
    }
}

/// Why `s` is not hex: the first character of its digits (after one `0x`/`0X`) that is not a
/// hex digit, as the text spells it, and its position in `s` as written, counted in characters
/// from 0 (the `0x` included: the position in the string the error shows); or, when every
/// character is a hex digit, that their number is odd. (The hex decoder names a byte, which
/// misreads a non-ASCII character: `é` came out as `Ã`.)
pub fn hex_fault(s: &str) -> String {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let prefix = s.len() - digits.len();
    match digits
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_hexdigit())
    {
        Some((i, c)) => format!("invalid character {c:?} at position {}", prefix + i),
        None => format!("odd number of digits ({})", digits.len()),
    }
}

/// A uint from a JSON number, a decimal string or a 0x-hex string (`0x` alone is zero); errors
/// name `at`. Strings must be plain digits: no sign, no `_`, no whitespace.
pub fn json_u256(v: &Value, at: &str) -> Result<U256> {
    match v {
        Value::Number(n) => n.as_u64().map(U256::from).ok_or_else(|| {
            // Not a u64: a negative integer, or a float (every other number is one; one past
            // u64 arrives as a float, and is said to be too large, as the user wrote it).
            let f = n.as_f64().unwrap_or(f64::NAN);
            let why = if n.is_i64() || f.is_sign_negative() {
                "is negative"
            } else if f >= 18_446_744_073_709_551_616.0 {
                "is too large for a JSON number (above 2^64 - 1): write it as a string, decimal \
                 or 0x-hex"
            } else if f.fract() == 0.0 {
                "is written as a float (a fraction or an exponent): write it as an integer or a \
                 string"
            } else {
                "is not an integer"
            };
            anyhow!("{at}: {n} {why}")
        }),
        Value::String(s) => {
            let (digits, radix, plain): (&str, u64, fn(&u8) -> bool) =
                match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                    Some("") => return Ok(U256::ZERO),
                    Some(h) => (h, 16, u8::is_ascii_hexdigit),
                    None => (s.as_str(), 10, u8::is_ascii_digit),
                };
            if digits.is_empty() || !digits.as_bytes().iter().all(plain) {
                bail!(
                    "{at}: {} is not a number: expected decimal digits, or 0x and hex digits",
                    shown(s)
                );
            }
            U256::from_str_radix(digits, radix)
                .map_err(|e| anyhow!("{at}: {} is not a 256-bit number: {e}", shown(s)))
        }
        other => bail!("{at}: expected a number or a string, got {other}"),
    }
}

/// Bytes from a hex string (0x optional, even digit count); errors name `at`.
pub fn json_hex_bytes(v: &Value, at: &str) -> Result<Vec<u8>> {
    let s = v
        .as_str()
        .ok_or_else(|| anyhow!("{at}: expected a hex string, got {}", shown(&v.to_string())))?;
    hex::decode(s).map_err(|_| anyhow!("{at}: not hex: {} ({})", shown(s), hex_fault(s)))
}

/// Remembers the spelling of each parsed key, to refuse one key spelled twice (`0xaa…` and
/// `aa…`, a different hex case, `0x1` and `0x01`): a JSON object would merge them silently.
pub struct Spellings<K>(BTreeMap<K, String>);

impl<K: Ord> Default for Spellings<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord> Spellings<K> {
    /// No key seen yet.
    pub fn new() -> Self {
        Spellings(BTreeMap::new())
    }

    /// Records `spelling` for `key`; errors naming both spellings when `key` was seen before.
    pub fn insert(&mut self, key: K, spelling: &str, at: &str, what: &str) -> Result<()> {
        match self.0.entry(key) {
            Entry::Vacant(e) => {
                e.insert(spelling.to_string());
                Ok(())
            }
            Entry::Occupied(e) => bail!(
                "{at}: {} and {} are the same {what}, given twice",
                shown(e.get()),
                shown(spelling)
            ),
        }
    }
}

/// The most JSON values (numbers, strings, arrays, objects, ... and object keys) one input
/// may hold: far above any test file or fixture (the largest here holds under 100,000), and a
/// bound on what a small input can make a parse allocate: a 250 MB array of zeros, two bytes
/// of text a value, took 6.6 GB (about 50 bytes a value), so the bound is about 1 GB.
pub const MAX_JSON_VALUES: u64 = 1 << 24;

/// Parses JSON text like `serde_json::from_str`, except that an object giving one key twice is
/// an error naming the key (and, through serde_json, the line and column), at any depth: a
/// plain parse keeps the last value silently, so a genesis that lists one address twice would
/// lose an account without a word. Text holding more than [`MAX_JSON_VALUES`] values is refused
/// when it passes that count, before the memory they would take.
pub fn parse_unique_keys(text: &str) -> serde_json::Result<Value> {
    parse_at_most(text, MAX_JSON_VALUES)
}

/// [`parse_unique_keys`] with at most `most` values.
fn parse_at_most(text: &str, most: u64) -> serde_json::Result<Value> {
    use serde::de::DeserializeSeed;
    let left = std::cell::Cell::new(most);
    let mut de = serde_json::Deserializer::from_str(text);
    let v = UniqueKeys { left: &left }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// The seed and visitor of [`parse_unique_keys`]: builds a [`Value`], refusing repeated keys
/// and more values than `left` allows.
#[derive(Clone, Copy)]
struct UniqueKeys<'a> {
    /// The values the input may still hold.
    left: &'a std::cell::Cell<u64>,
}

impl UniqueKeys<'_> {
    /// Counts one value: an error once the input holds more than [`MAX_JSON_VALUES`].
    fn spend<E: serde::de::Error>(self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "more JSON values than any input this reads holds (at most 16,777,216)",
            )),
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(b))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(n))
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(n))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(n))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(s))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.spend()?;
            let v = map.next_value_seed(self)?;
            match out.entry(key) {
                serde_json::map::Entry::Vacant(e) => {
                    e.insert(v);
                }
                serde_json::map::Entry::Occupied(e) => {
                    return Err(serde::de::Error::custom(format_args!(
                        "{} is given twice in one object",
                        shown(e.key())
                    )));
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value counts, object keys included, at any depth; one over the bound is refused
    /// (with the line and column), the bound itself parses.
    #[test]
    fn parse_refuses_more_values_than_its_bound() {
        // 1 object + 2 keys + 1 array + 3 numbers + 1 string = 8.
        let text = r#"{"a": [1, 2, 3], "b": "x"}"#;
        assert_eq!(parse_at_most(text, 8).unwrap()["a"][2], 3);
        let err = parse_at_most(text, 7).unwrap_err().to_string();
        assert!(err.contains("more JSON values than any input"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        let zeros = format!("[{}0]", "0,".repeat(99));
        assert!(parse_at_most(&zeros, 101).is_ok());
        assert!(parse_at_most(&zeros, 100).is_err());
        assert_eq!(MAX_JSON_VALUES, 16_777_216, "the message names it");
    }
    use crate::testing::{arb_hexish, arb_json};
    use proptest::prelude::*;

    #[test]
    fn json_u256_takes_plain_digits_only() {
        let n = |s: &str| json_u256(&Value::from(s), "x");
        assert_eq!(n("0x").unwrap(), U256::ZERO);
        assert_eq!(n("0x1F").unwrap(), U256::from(31));
        assert_eq!(n("0X1f").unwrap(), U256::from(31));
        assert_eq!(n("031").unwrap(), U256::from(31));
        assert_eq!(json_u256(&Value::from(7u64), "x").unwrap(), U256::from(7));
        assert_eq!(n(&format!("0x{}", "f".repeat(64))).unwrap(), U256::MAX);
        assert!(n(&format!("0x1{}", "0".repeat(64))).is_err());
        for bad in [
            "", "+1", "-1", "-0", "1_000", "0x1_0", "_1", "0x_1", "0x+1", " 1", "1 ", "0x 1",
            "1 2", "\t1", "1\n", "0x1g", "1e3", "1.0", "0b1", "0o7", "٣", "0x０",
        ] {
            let err = n(bad).unwrap_err().to_string();
            assert!(err.starts_with("x: "), "{bad:?}: {err}");
        }
        let num = |text: &str| {
            let v: Value = serde_json::from_str(text).unwrap();
            json_u256(&v, "x").unwrap_err().to_string()
        };
        assert!(num("-1").contains("is negative"), "{}", num("-1"));
        assert!(num("-1.5").contains("is negative"));
        assert!(num("1.5").contains("is not an integer"));
        // 2^64: an integer the user wrote, too large for a JSON number here.
        assert!(num("18446744073709551616").contains("too large"));
        assert!(num("1e100").contains("too large"));
        // Below 2^64, but floats to serde_json: not "too large".
        for float in ["1e18", "2.0", "0.0"] {
            assert!(num(float).contains("written as a float"), "{}", num(float));
        }
        assert!(num("-0.0").contains("is negative"));
        assert_eq!(
            json_u256(&serde_json::from_str("18446744073709551615").unwrap(), "x").unwrap(),
            U256::from(u64::MAX)
        );
        assert!(json_u256(&Value::Null, "x").is_err());
    }

    /// Every value parses as serde_json parses it, and a key repeated in any object is an
    /// error naming it and its line.
    #[test]
    fn repeated_keys_are_refused_at_any_depth() {
        let text =
            r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": {"d": 18446744073709551615}}"#;
        assert_eq!(
            parse_unique_keys(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        for (bad, key) in [
            (r#"{"a": 1, "a": 1}"#, "\"a\""),
            ("{\"a\": {\"b\": 1,\n \"b\": 2}}", "\"b\""),
            (r#"[{"x": 1}, {"é": 1, "é": 2}]"#, "\"é\""),
        ] {
            let err = parse_unique_keys(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{key} is given twice")),
                "{bad}: {err}"
            );
            assert!(err.contains("line"), "{err}");
        }
        assert!(parse_unique_keys(r#"{"a": 1} x"#).is_err());
        assert!(parse_unique_keys("").is_err());
    }

    /// The error names the character as written (a non-ASCII one whole, not its first byte)
    /// and its position in the string as shown, `0x` included; an odd count of good digits
    /// says so.
    #[test]
    fn a_hex_error_names_the_character_as_written() {
        let k = "ab".repeat(32);
        let accented = format!("é{}", &k[2..]);
        assert_eq!(accented.len(), 64, "passes a byte-length check");
        let err = crate::kv::parse_b32(&accented).unwrap_err().to_string();
        assert!(err.contains("invalid character 'é' at position 0"), "{err}");
        let signed = format!("0x+{}", &k[1..]);
        let err = crate::kv::parse_b32(&signed).unwrap_err().to_string();
        assert!(err.contains("invalid character '+' at position 2"), "{err}");
        let err = json_hex_bytes(&Value::from("0x12٣4"), "code").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("code: not hex: \"0x12٣4\" (invalid character '٣' at position 4)"),
            "{err}"
        );
        let err = json_hex_bytes(&Value::from("0xabc"), "code").unwrap_err();
        assert!(
            err.to_string().contains("(odd number of digits (3))"),
            "{err}"
        );
    }

    #[test]
    fn shown_cuts_long_input_on_a_char_boundary() {
        assert_eq!(shown("ab"), "\"ab\"");
        let s = "é".repeat(200);
        let got = shown(&s);
        assert!(
            got.contains("(400 bytes)") && got.chars().count() < 100,
            "{got}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn json_u256_never_panics(s in arb_hexish()) {
            if json_u256(&Value::String(s.clone()), "x").is_ok() {
                let (d, hex) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                    Some(h) => (h, true),
                    None => (s.as_str(), false),
                };
                prop_assert!(
                    d.bytes().all(|c| if hex { c.is_ascii_hexdigit() } else { c.is_ascii_digit() })
                        && (hex || !d.is_empty()),
                    "accepted {s:?}"
                );
            }
        }

        #[test]
        fn json_hex_bytes_never_panics(v in prop_oneof![
            arb_hexish().prop_map(Value::String),
            arb_json(),
        ]) {
            if let (Ok(b), Some(s)) = (json_hex_bytes(&v, "c"), v.as_str()) {
                prop_assert_eq!(b.len() * 2, s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s).len());
            }
        }
    }
}
