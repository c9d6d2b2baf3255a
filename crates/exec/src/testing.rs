//! Test support (feature `testing`): proptest strategies for the parsers' never-panic tests
//! (JSON trees, strings near the hex and number syntax), where Ethereum's blockchain tests
//! are, and a FIFO made without a child process.

use proptest::prelude::*;
use serde_json::Value;

/// Strings near the hex/number syntax: digits, prefixes, signs, separators, non-ASCII.
pub fn arb_hexish() -> impl Strategy<Value = String> {
    prop_oneof![
        "(0[xX])?[0-9a-fA-F]{0,70}",
        "(0[xX])?[0-9a-fA-F+\\-_ é\u{0}\u{ffff}xX]{0,70}",
        "[0-9]{0,80}",
        any::<String>(),
    ]
}

/// Arbitrary JSON trees whose strings are often hex-like and whose keys are often field
/// names or addresses.
pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        arb_hexish().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Keys of JSON objects: field names, addresses, hex-like strings.
pub fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "alloc",
            "balance",
            "nonce",
            "code",
            "storage",
            "privateKey",
            "hash",
        ])
        .prop_map(String::from),
        "(0[xX])?[0-9a-fA-F]{40}",
        arb_hexish(),
    ]
}

/// Ethereum's blockchain tests: `$BINTRIE_ETHEREUM_TESTS`, else
/// `../shared/fixtures/ethereum-tests` next to the repository. Panics saying so when neither
/// exists (a test that needs them fails with that message).
pub fn ethereum_tests_dir() -> std::path::PathBuf {
    if let Ok(d) = std::env::var("BINTRIE_ETHEREUM_TESTS") {
        return d.into();
    }
    let d = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/ethereum-tests"
    ));
    assert!(
        d.is_dir(),
        "Ethereum's blockchain tests not found: set BINTRIE_ETHEREUM_TESTS or provide \
         ../shared/fixtures/ethereum-tests next to the repository (looked at {})",
        d.display()
    );
    d
}

/// The recorded mainnet fixtures: `$BINTRIE_FIXTURES`, else `../shared/fixtures/mainnet` next to
/// the repository; `None`, saying so on stderr, when neither is a directory (a test that needs
/// them then skips).
pub fn mainnet_fixtures_dir() -> Option<std::path::PathBuf> {
    let d = match std::env::var("BINTRIE_FIXTURES") {
        Ok(d) => std::path::PathBuf::from(d),
        Err(_) => std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/mainnet"
        )),
    };
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!(
            "skipped: the mainnet fixtures are not here (set BINTRIE_FIXTURES or provide \
             ../shared/fixtures/mainnet next to the repository; looked at {})",
            d.display()
        );
        None
    }
}

/// Makes a FIFO at `path` by the call, not the `mkfifo` command: a child process holds every
/// descriptor of the test process, other tests' lock files among them, between its fork and
/// its exec, so a lock could outlive its close. Panics if it cannot (a test's setup).
pub fn make_fifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap_or_else(|e| panic!("making a FIFO at {}: {e}", path.display()));
}
