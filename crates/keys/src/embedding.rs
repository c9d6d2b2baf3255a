//! Embedding a whole account into tree writes (SPEC §4).

use std::collections::HashMap;

use alloy_primitives::{Address, U256, keccak256};

use crate::{
    BasicData, EMPTY_CODE_HASH, KeyError, TreeKey, basic_data_key, chunkify_code, code_chunk_key,
    code_hash_key, storage_slot_key,
};

/// One account's full state for building a tree from scratch (genesis alloc, tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountState {
    /// Account nonce.
    pub nonce: u64,
    /// Balance in wei; must be `< 2^128`.
    pub balance: U256,
    /// Contract code (empty for an externally owned account); must be shorter than 2^24 bytes.
    pub code: Vec<u8>,
    /// Storage slots present in the tree, as `(slot, value)`. A slot listed with value zero is
    /// written as a present zero leaf (a slot that was cleared after being non-zero). If a slot
    /// is listed more than once, the last value wins.
    pub storage: Vec<(U256, U256)>,
}

/// The tree writes that put this account into an empty tree, following SPEC §4.
///
/// In order: BASIC_DATA (version 0, code size, nonce, balance), CODE_HASH (keccak256 of the
/// code, [`EMPTY_CODE_HASH`] when there is no code), every code chunk of
/// [`chunkify_code`] at [`code_chunk_key`], then every listed storage slot at
/// [`storage_slot_key`] with its value as 32-byte big-endian, in first-listed order.
///
/// Storage slots whose value is zero ARE written, as present zero leaves: this is what the
/// conformance vectors (`state_vectors`, case `storage_cleared_after_nonzero`) require, since
/// `storage` lists the slots present in the tree. A caller importing a geth genesis alloc,
/// where a zero value means "never written", must drop such slots before calling this.
///
/// The keys of the result are pairwise distinct (duplicate slots are merged, last value wins).
///
/// Errors: [`KeyError::BalanceTooLarge`] if `balance >= 2^128`, [`KeyError::CodeTooLarge`] if
/// the code is 2^24 bytes or longer.
pub fn account_entries(
    address: &Address,
    account: &AccountState,
) -> Result<Vec<(TreeKey, [u8; 32])>, KeyError> {
    let code_len = account.code.len();
    let code_size =
        u32::try_from(code_len).map_err(|_| KeyError::CodeTooLarge { len: code_len })?;
    let basic = BasicData {
        version: 0,
        code_size,
        nonce: account.nonce,
        balance: account.balance,
    }
    .encode()
    .map_err(|e| match e {
        KeyError::CodeTooLarge { .. } => KeyError::CodeTooLarge { len: code_len },
        other => other,
    })?;
    let code_hash = if account.code.is_empty() {
        EMPTY_CODE_HASH
    } else {
        keccak256(&account.code)
    };

    let chunks = chunkify_code(&account.code);
    let mut entries = Vec::with_capacity(2 + chunks.len() + account.storage.len());
    entries.push((basic_data_key(address), basic));
    entries.push((code_hash_key(address), code_hash.0));
    entries.extend(
        chunks
            .into_iter()
            .zip(0u64..)
            .map(|(chunk, i)| (code_chunk_key(address, i), chunk)),
    );

    // Storage keys never collide with header/code keys (distinct sub-indices or stems),
    // but a slot may be listed twice: keep its first position and its last value.
    let mut position: HashMap<U256, usize> = HashMap::with_capacity(account.storage.len());
    for (slot, value) in &account.storage {
        let bytes = value.to_be_bytes::<32>();
        match position.get(slot) {
            Some(&at) => entries[at].1 = bytes,
            None => {
                position.insert(*slot, entries.len());
                entries.push((storage_slot_key(address, slot), bytes));
            }
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;
    use std::collections::HashSet;

    const A: Address = address!("0x1234567890abcdef1234567890abcdef12345678");

    #[test]
    fn eoa_has_two_entries() {
        let acct = AccountState {
            nonce: 7,
            balance: U256::from(10),
            ..Default::default()
        };
        let e = account_entries(&A, &acct).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, basic_data_key(&A));
        assert_eq!(
            BasicData::decode(&e[0].1).unwrap(),
            BasicData {
                version: 0,
                code_size: 0,
                nonce: 7,
                balance: U256::from(10)
            }
        );
        assert_eq!(e[1], (code_hash_key(&A), EMPTY_CODE_HASH.0));
    }

    #[test]
    fn empty_account_still_writes_header() {
        let e = account_entries(&A, &AccountState::default()).unwrap();
        assert_eq!(
            e,
            vec![
                (basic_data_key(&A), [0u8; 32]),
                (code_hash_key(&A), EMPTY_CODE_HASH.0)
            ]
        );
    }

    #[test]
    fn contract_with_code_and_storage() {
        let code = vec![0x60u8; 200];
        let acct = AccountState {
            nonce: 1,
            balance: U256::ZERO,
            code: code.clone(),
            storage: vec![
                (U256::from(1), U256::from(2)),
                (U256::from(1000), U256::ZERO),
            ],
        };
        let e = account_entries(&A, &acct).unwrap();
        let chunks = chunkify_code(&code);
        assert_eq!(e.len(), 2 + chunks.len() + 2);
        assert_eq!(e[1].1, keccak256(&code).0);
        assert_eq!(BasicData::decode(&e[0].1).unwrap().code_size, 200);
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(e[2 + i], (code_chunk_key(&A, i as u64), *c));
        }
        let n = 2 + chunks.len();
        assert_eq!(e[n].0, storage_slot_key(&A, &U256::from(1)));
        assert_eq!(e[n].1, U256::from(2).to_be_bytes::<32>());
        // Zero value: present zero leaf.
        assert_eq!(
            e[n + 1],
            (storage_slot_key(&A, &U256::from(1000)), [0u8; 32])
        );
        let keys: HashSet<_> = e.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys.len(), e.len());
    }

    #[test]
    fn duplicate_slots_last_value_wins() {
        let acct = AccountState {
            storage: vec![
                (U256::from(5), U256::from(1)),
                (U256::from(6), U256::from(3)),
                (U256::from(5), U256::from(2)),
            ],
            ..Default::default()
        };
        let e = account_entries(&A, &acct).unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[2],
            (
                storage_slot_key(&A, &U256::from(5)),
                U256::from(2).to_be_bytes::<32>()
            )
        );
        assert_eq!(
            e[3],
            (
                storage_slot_key(&A, &U256::from(6)),
                U256::from(3).to_be_bytes::<32>()
            )
        );
    }

    #[test]
    fn errors() {
        let rich = AccountState {
            balance: U256::from(1) << 128usize,
            ..Default::default()
        };
        assert_eq!(account_entries(&A, &rich), Err(KeyError::BalanceTooLarge));
        let huge = AccountState {
            code: vec![0u8; 1 << 24],
            ..Default::default()
        };
        assert_eq!(
            account_entries(&A, &huge),
            Err(KeyError::CodeTooLarge { len: 1 << 24 })
        );
    }
}
