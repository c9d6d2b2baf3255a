//! Geth genesis allocs (`alloc`, or a whole genesis file holding one) as tree writes.

use crate::json::{Spellings, json_hex_bytes, json_u256};
use alloy_primitives::Address;
use anyhow::{Result, anyhow, bail};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use serde_json::Value;

/// Parses a geth genesis alloc (or a whole genesis file with an `alloc` field) into tree writes.
///
/// Follows geth's genesis semantics: a storage slot whose value is zero is not written (zero
/// over zero is a no-op, SPEC §4). Errors name the JSON path of the bad field. An address or a
/// slot given twice in different spellings is an error.
pub fn alloc_writes(json: &Value) -> Result<Vec<(TreeKey, [u8; 32])>> {
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
mod tests {
    use super::*;
    use crate::testing::{arb_hexish, arb_json, arb_key};
    use proptest::prelude::*;

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
