//! [`TrieDb`]: revm's `DatabaseRef` straight over one store snapshot, no cache.

use crate::StateError;
use alloy_primitives::{Address, B256, U256};
use bintrie_keys::{
    BasicData, CODE_HASH_LEAF_KEY, EMPTY_CODE_HASH, Stem, basic_data_key, storage_slot_key,
};
use bintrie_node::StemValues;
use bintrie_store::{ReadPath, Reader, StateStore};
use revm::bytecode::Bytecode;
use revm::database_interface::DatabaseRef;
use revm::state::AccountInfo;
use std::cell::Cell;
use std::collections::HashMap;

/// An account decoded from its header stem, with the code size BASIC_DATA records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAccount {
    /// Balance, nonce and code hash (code is loaded separately by hash).
    pub info: AccountInfo,
    /// Code size from BASIC_DATA.
    pub code_size: u32,
}

/// Decodes an account from its header stem (SPEC §2, §4): absent when the stem or both header
/// leaves are absent, or when both are zero (a deleted account).
pub fn decode_account(
    address: &Address,
    stem: Option<&StemValues>,
) -> Result<Option<StoredAccount>, StateError> {
    let Some(values) = stem else { return Ok(None) };
    let basic = values.get(bintrie_keys::BASIC_DATA_LEAF_KEY);
    let code_hash = values.get(CODE_HASH_LEAF_KEY);
    if basic.is_none() && code_hash.is_none() {
        return Ok(None);
    }
    let zero = [0u8; 32];
    if basic.unwrap_or(&zero) == &zero && code_hash.unwrap_or(&zero) == &zero {
        return Ok(None);
    }
    let basic =
        BasicData::decode(basic.unwrap_or(&zero)).map_err(|e| StateError::CorruptAccount {
            address: *address,
            reason: e.to_string(),
        })?;
    let code_hash = code_hash.map(|h| B256::from(*h)).unwrap_or(EMPTY_CODE_HASH);
    let mut info = AccountInfo::default()
        .with_balance(basic.balance)
        .with_nonce(basic.nonce);
    if code_hash != EMPTY_CODE_HASH {
        info = info.with_code_hash(code_hash);
    }
    Ok(Some(StoredAccount {
        info,
        code_size: basic.code_size,
    }))
}

/// The value of a storage slot inside its stem (zero when absent).
pub(crate) fn slot_value(values: Option<&StemValues>, sub_index: u8) -> U256 {
    values
        .and_then(|v| v.get(sub_index))
        .map_or(U256::ZERO, |v| U256::from_be_bytes(*v))
}

/// revm's `DatabaseRef` over one read transaction of a [`StateStore`]: every call reads the
/// store (no cache; wrap it in revm's `CacheDB` or `State`, or use [`crate::BlockDb`]).
///
/// `basic_ref` reads BASIC_DATA and CODE_HASH with one stem read; `storage_ref` reads the slot's
/// stem (SPEC §1); `code_by_hash_ref` reads the code table; `block_hash_ref` answers from the
/// hashes the caller supplied ([`TrieDb::with_block_hashes`]).
pub struct TrieDb<'s> {
    reader: Reader<'s>,
    read_path: ReadPath,
    block_hashes: HashMap<u64, B256>,
    stem_reads: Cell<u64>,
    code_reads: Cell<u64>,
}

impl std::fmt::Debug for TrieDb<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrieDb")
            .field("read_path", &self.read_path)
            .field("stem_reads", &self.stem_reads.get())
            .field("code_reads", &self.code_reads.get())
            .finish_non_exhaustive()
    }
}

impl<'s> TrieDb<'s> {
    /// A database over a new snapshot of `store`, finding stems by `read_path`.
    pub fn new(store: &'s StateStore, read_path: ReadPath) -> Result<Self, StateError> {
        Ok(TrieDb {
            reader: store.reader()?,
            read_path,
            block_hashes: HashMap::new(),
            stem_reads: Cell::new(0),
            code_reads: Cell::new(0),
        })
    }

    /// Supplies the hashes BLOCKHASH may ask for (recent ancestors).
    pub fn with_block_hashes(mut self, hashes: impl IntoIterator<Item = (u64, B256)>) -> Self {
        self.block_hashes.extend(hashes);
        self
    }

    /// Reads one stem from the store (counted).
    pub fn read_stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
        self.stem_reads.set(self.stem_reads.get() + 1);
        Ok(self.reader.get_stem(stem, self.read_path)?)
    }

    /// Reads code by hash from the store (counted). The empty-code hash needs no read.
    pub fn read_code(&self, hash: &B256) -> Result<Bytecode, StateError> {
        if *hash == EMPTY_CODE_HASH || *hash == B256::ZERO {
            return Ok(Bytecode::default());
        }
        self.code_reads.set(self.code_reads.get() + 1);
        let raw = self
            .reader
            .get_code(&hash.0)?
            .ok_or(StateError::MissingCode(*hash))?;
        decode_code(hash, raw)
    }

    /// Reads and decodes an account, with the code size from BASIC_DATA.
    pub fn read_account(&self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        let stem = self.read_stem(&basic_data_key(address).stem)?;
        decode_account(address, stem.as_ref())
    }

    /// Store reads so far: (stem reads, code reads).
    pub fn reads(&self) -> (u64, u64) {
        (self.stem_reads.get(), self.code_reads.get())
    }

    /// Lookups and bytes of the underlying read transaction.
    pub fn store_stats(&self) -> bintrie_store::ReadStats {
        self.reader.stats()
    }

    /// The block hash the caller supplied for `number`.
    pub fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        self.block_hashes
            .get(&number)
            .copied()
            .ok_or(StateError::MissingBlockHash(number))
    }
}

impl DatabaseRef for TrieDb<'_> {
    type Error = StateError;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        Ok(self.read_account(&address)?.map(|a| a.info))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, StateError> {
        self.read_code(&code_hash)
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, StateError> {
        let key = storage_slot_key(&address, &index);
        Ok(slot_value(
            self.read_stem(&key.stem)?.as_ref(),
            key.sub_index,
        ))
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, StateError> {
        self.block_hash(number)
    }
}

/// Stored code as revm bytecode: it must hash (keccak256) to `hash`, the code hash it is
/// stored under, and decode; otherwise [`StateError::CorruptCode`] (never empty code in its
/// place, which would execute as a different contract).
pub(crate) fn decode_code(hash: &B256, raw: Vec<u8>) -> Result<Bytecode, StateError> {
    let got = alloy_primitives::keccak256(&raw);
    if got != *hash {
        return Err(StateError::CorruptCode {
            hash: *hash,
            reason: format!("the stored bytes hash to {got}"),
        });
    }
    Bytecode::new_raw_checked(raw.into()).map_err(|e| StateError::CorruptCode {
        hash: *hash,
        reason: format!("does not decode: {e:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bintrie_store::StoreOptions;
    use bintrie_trie::Trie;

    #[test]
    fn code_that_does_not_hash_to_its_key_is_an_error_not_empty_code() {
        let code = vec![0x60, 0x00, 0x60, 0x00, 0xf3];
        let wrong = alloy_primitives::keccak256([0x00]);
        let err = decode_code(&wrong, code.clone()).unwrap_err();
        assert!(matches!(err, StateError::CorruptCode { .. }), "{err}");
        let right = alloy_primitives::keccak256(&code);
        assert_eq!(decode_code(&right, code).unwrap().original_bytes().len(), 5);
    }

    #[test]
    fn code_that_does_not_decode_is_an_error_not_empty_code() {
        // An EIP-7702 delegation prefix with a wrong length hashes fine but does not decode.
        let code = vec![0xef, 0x01, 0x00, 0x01];
        let hash = alloy_primitives::keccak256(&code);
        let err = decode_code(&hash, code).unwrap_err();
        assert!(matches!(err, StateError::CorruptCode { .. }), "{err}");
    }

    /// Through a real database: a flipped byte in the code table makes revm's code lookup fail.
    #[test]
    fn a_flipped_byte_in_stored_code_fails_the_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), &StoreOptions::default()).unwrap();
        let code = vec![0x60, 0x01, 0x60, 0x00, 0x55, 0x00];
        let hash = alloy_primitives::keccak256(&code);
        let mut flipped = code.clone();
        flipped[2] ^= 0x01;
        let mut trie: Trie<StateStore> = Trie::new(store, 5).unwrap();
        trie.insert(bintrie_keys::TreeKey::from_bytes([7; 32]), [1; 32])
            .unwrap();
        trie.commit_with(|s, set| s.write_block(set, 1, &[(hash.0, flipped)]))
            .unwrap();
        let db = TrieDb::new(trie.store(), ReadPath::Flat).unwrap();
        let err = db.code_by_hash_ref(hash).unwrap_err();
        assert!(matches!(err, StateError::CorruptCode { .. }), "{err}");
    }
}
