//! Helpers the adapter's integration tests share: transactions and the reference root that a
//! revm `CacheDB`'s state must have when built from scratch.
#![allow(dead_code)]

use alloy_primitives::{Address, B256, Bytes, U256};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use bintrie_trie::{MemoryStore, Trie};
use revm::context::TxEnv;
use revm::database::{CacheDB, EmptyDB};

/// The gas price of every test transaction (wei).
pub(crate) const GAS_PRICE: u128 = 2;

/// A transaction on chain 1 with a 1M gas limit at [`GAS_PRICE`]; `to: None` deploys.
pub(crate) fn tx(
    caller: Address,
    nonce: u64,
    to: Option<Address>,
    value: u128,
    data: Bytes,
) -> TxEnv {
    let b = TxEnv::builder()
        .caller(caller)
        .nonce(nonce)
        .value(U256::from(value))
        .data(data)
        .gas_limit(1_000_000)
        .gas_price(GAS_PRICE)
        .chain_id(Some(1));
    match to {
        Some(to) => b.to(to),
        None => b.create(),
    }
    .build()
    .unwrap()
}

/// The tree writes that build the reference database's state from scratch (zero slots and
/// empty accounts left out).
pub(crate) fn scratch_writes(db: &CacheDB<EmptyDB>) -> Vec<(TreeKey, [u8; 32])> {
    let mut writes = Vec::new();
    for (a, acct) in &db.cache.accounts {
        if acct.info.is_empty() && acct.storage.values().all(|v| v.is_zero()) {
            continue;
        }
        let code = db
            .cache
            .contracts
            .get(&acct.info.code_hash)
            .map(|c| c.original_bytes().to_vec())
            .unwrap_or_default();
        let state = AccountState {
            nonce: acct.info.nonce,
            balance: acct.info.balance,
            code,
            storage: acct
                .storage
                .iter()
                .filter(|(_, v)| !v.is_zero())
                .map(|(k, v)| (*k, *v))
                .collect(),
        };
        writes.extend(account_entries(a, &state).unwrap());
    }
    writes
}

/// The root of `writes` applied to an empty tree (group depth 5; the root is the same at any).
pub(crate) fn root_of(writes: Vec<(TreeKey, [u8; 32])>) -> B256 {
    let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
    t.update(writes).unwrap();
    B256::from(t.root())
}

/// The root of the reference database's state, built from scratch.
pub(crate) fn scratch_root(db: &CacheDB<EmptyDB>) -> B256 {
    root_of(scratch_writes(db))
}
