//! Parsing user input: key/value lines and geth-style genesis allocs.

use alloy_primitives::{Address, U256};
use anyhow::{Context, Result, anyhow, bail};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use serde_json::Value;
use std::io::BufRead;

/// Parses 32 bytes of hex (0x optional, exactly 64 digits).
pub fn parse_b32(s: &str) -> Result<[u8; 32]> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if h.len() != 64 {
        bail!(
            "expected 32 bytes of hex (64 digits), got {} digits",
            h.len()
        );
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&h[2 * i..2 * i + 2], 16)
            .map_err(|_| anyhow!("not hex: {:?}", &h[2 * i..2 * i + 2]))?;
    }
    Ok(out)
}

/// Parses one input line: `None` for blank lines and `#` comments; errors name `source:line`.
pub fn parse_kv_line(line: &str, source: &str, n: usize) -> Result<Option<(TreeKey, [u8; 32])>> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    let mut parts = t.split_whitespace();
    let (Some(k), Some(v), None) = (parts.next(), parts.next(), parts.next()) else {
        bail!("{source}:{n}: expected `KEY VALUE` (two 32-byte hex words), got {t:?}");
    };
    let key = parse_b32(k).with_context(|| format!("{source}:{n}: bad key"))?;
    let value = parse_b32(v).with_context(|| format!("{source}:{n}: bad value"))?;
    Ok(Some((TreeKey::from_bytes(key), value)))
}

/// Reads `KEY VALUE` lines (see [`parse_kv_line`]). Returns the writes in input order (a later
/// write to the same key wins when applied).
pub fn read_kv_lines(reader: impl BufRead, source: &str) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{source}: reading line {}", n + 1))?;
        if let Some(kv) = parse_kv_line(&line, source, n + 1)? {
            out.push(kv);
        }
    }
    Ok(out)
}

/// A uint from a JSON number, a decimal string or a 0x-hex string (`0x` alone is zero); errors
/// name `at`.
pub fn json_u256(v: &Value, at: &str) -> Result<U256> {
    match v {
        Value::Number(n) => n.as_u64().map(U256::from).ok_or_else(|| {
            anyhow!("{at}: {n} is not a non-negative integer (use a string for big numbers)")
        }),
        Value::String(s) => {
            let s = s.trim();
            let parsed = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                if h.is_empty() {
                    Ok(U256::ZERO)
                } else {
                    U256::from_str_radix(h, 16)
                }
            } else {
                U256::from_str_radix(s, 10)
            };
            parsed.map_err(|e| anyhow!("{at}: {s:?} is not a 256-bit number: {e}"))
        }
        other => bail!("{at}: expected a number or a string, got {other}"),
    }
}

/// Bytes from a hex string (0x optional, even digit count); errors name `at`.
pub fn json_hex_bytes(v: &Value, at: &str) -> Result<Vec<u8>> {
    let s = v
        .as_str()
        .ok_or_else(|| anyhow!("{at}: expected a hex string, got {v}"))?;
    let h = s.strip_prefix("0x").unwrap_or(s);
    if h.len() % 2 != 0 {
        bail!("{at}: odd number of hex digits");
    }
    (0..h.len() / 2)
        .map(|i| {
            u8::from_str_radix(&h[2 * i..2 * i + 2], 16)
                .map_err(|_| anyhow!("{at}: not hex at byte {i}"))
        })
        .collect()
}

/// Parses a geth genesis alloc (or a whole genesis file with an `alloc` field) into tree writes.
///
/// Follows geth's genesis semantics: a storage slot whose value is zero is not written (zero
/// over zero is a no-op, SPEC §4). Errors name the JSON path of the bad field.
pub fn alloc_writes(json: &Value) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let (alloc, prefix) = match json.get("alloc") {
        Some(a) => (a, "alloc"),
        None => (json, ""),
    };
    let obj = alloc.as_object().ok_or_else(|| {
        anyhow!(
            "{}: expected an object of address -> account",
            if prefix.is_empty() {
                "(top level)"
            } else {
                prefix
            }
        )
    })?;
    let mut writes = Vec::new();
    for (addr_str, acct) in obj {
        let at = if prefix.is_empty() {
            addr_str.clone()
        } else {
            format!("{prefix}.{addr_str}")
        };
        let with_0x = if addr_str.starts_with("0x") {
            addr_str.clone()
        } else {
            format!("0x{addr_str}")
        };
        let address: Address = with_0x
            .parse()
            .map_err(|e| anyhow!("{at}: not a 20-byte address: {e}"))?;
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
            for (slot, value) in s {
                let sat = format!("{at}.storage.{slot}");
                let slot = json_u256(&Value::String(slot.clone()), &sat)?;
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
mod tests {
    use super::*;

    #[test]
    fn kv_lines() {
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
}
