//! [`TrieDb`]: revm's `DatabaseRef` straight over one state snapshot, no cache.

use crate::{SnapshotIo, StateBackend, StateError, StateSnapshot};
use alloy_primitives::{Address, B256, Bytes, U256};
use bintrie_keys::{
    BasicData, CODE_HASH_LEAF_KEY, EMPTY_CODE_HASH, Stem, basic_data_key, storage_slot_key,
};
use bintrie_node::StemValues;
use revm::bytecode::Bytecode;
use revm::database_interface::DatabaseRef;
use revm::state::AccountInfo;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// revm's `DatabaseRef` over one [`StateSnapshot`]: every call reads the snapshot (no cache;
/// wrap it in revm's `CacheDB` or `State`, or use [`crate::BlockDb`]).
///
/// `basic_ref` reads BASIC_DATA and CODE_HASH with one stem read; `storage_ref` reads the slot's
/// stem (SPEC §1); `code_by_hash_ref` reads the code (which must hash to its code hash);
/// `block_hash_ref` answers from the hashes the caller supplied ([`TrieDb::with_block_hashes`]).
///
/// `Send + Sync` (the counters are atomic), and `'static` when the snapshot is (the in-memory
/// [`crate::MemorySnapshot`]), so it can sit behind an `Arc` or in revm's `State` on any thread.
pub struct TrieDb<S> {
    snapshot: S,
    block_hashes: HashMap<u64, B256>,
    stem_reads: AtomicU64,
    code_reads: AtomicU64,
}

impl<S> std::fmt::Debug for TrieDb<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrieDb")
            .field("stem_reads", &self.stem_reads.load(Ordering::Relaxed))
            .field("code_reads", &self.code_reads.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "mdbx")]
impl<'s> TrieDb<crate::MdbxSnapshot<'s>> {
    /// A database over a new read transaction of the MDBX `store` at the block the handle holds
    /// (an error, [`bintrie_store::StoreError::Moved`], once another writer committed past it),
    /// finding stems by `read_path`.
    pub fn new(
        store: &'s bintrie_store::StateStore,
        read_path: bintrie_store::ReadPath,
    ) -> Result<Self, StateError> {
        Ok(Self::from_snapshot(crate::MdbxSnapshot::new(
            store, read_path,
        )?))
    }

    /// Lookups and bytes of the underlying read transaction.
    pub fn store_stats(&self) -> bintrie_store::ReadStats {
        self.snapshot.store_stats()
    }
}

impl<S: StateSnapshot> TrieDb<S> {
    /// A database over `snapshot`.
    pub fn from_snapshot(snapshot: S) -> Self {
        TrieDb {
            snapshot,
            block_hashes: HashMap::new(),
            stem_reads: AtomicU64::new(0),
            code_reads: AtomicU64::new(0),
        }
    }

    /// A database over a new snapshot of `backend`.
    pub fn open<B: StateBackend<Snapshot = S> + ?Sized>(backend: &B) -> Result<Self, StateError> {
        Ok(Self::from_snapshot(backend.snapshot()?))
    }

    /// The snapshot it reads.
    pub fn snapshot(&self) -> &S {
        &self.snapshot
    }

    /// Supplies the hashes BLOCKHASH may ask for (recent ancestors).
    pub fn with_block_hashes(mut self, hashes: impl IntoIterator<Item = (u64, B256)>) -> Self {
        self.block_hashes.extend(hashes);
        self
    }

    /// Reads one stem from the snapshot (counted).
    pub fn read_stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
        self.stem_reads.fetch_add(1, Ordering::Relaxed);
        self.snapshot.stem(stem)
    }

    /// Reads code by hash from the snapshot (counted); it must hash to `hash` and decode
    /// ([`StateError::CorruptCode`]), and be there ([`StateError::MissingCode`]). The empty-code
    /// hash (and zero) needs no read.
    pub fn read_code(&self, hash: &B256) -> Result<Bytecode, StateError> {
        if *hash == EMPTY_CODE_HASH || *hash == B256::ZERO {
            return Ok(Bytecode::default());
        }
        self.code_reads.fetch_add(1, Ordering::Relaxed);
        let raw = self
            .snapshot
            .code(hash)?
            .ok_or(StateError::MissingCode(*hash))?;
        decode_code(hash, raw)
    }

    /// Reads and decodes an account, with the code size from BASIC_DATA.
    pub fn read_account(&self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        let basic = basic_data_key(address);
        self.snapshot.check_leaf(&basic)?;
        self.snapshot.check_leaf(&bintrie_keys::TreeKey {
            sub_index: bintrie_keys::CODE_HASH_LEAF_KEY,
            ..basic
        })?;
        let stem = self.read_stem(&basic.stem)?;
        decode_account(address, stem.as_ref())
    }

    /// Snapshot reads so far: (stem reads, code reads).
    pub fn reads(&self) -> (u64, u64) {
        (
            self.stem_reads.load(Ordering::Relaxed),
            self.code_reads.load(Ordering::Relaxed),
        )
    }

    /// Lookups and bytes the snapshot's storage served so far.
    pub fn io(&self) -> SnapshotIo {
        self.snapshot.io()
    }

    /// The block hash the caller supplied for `number`.
    pub fn block_hash(&self, number: u64) -> Result<B256, StateError> {
        self.block_hashes
            .get(&number)
            .copied()
            .ok_or(StateError::MissingBlockHash(number))
    }
}

impl<S: StateSnapshot> DatabaseRef for TrieDb<S> {
    type Error = StateError;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        Ok(self.read_account(&address)?.map(|a| a.info))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, StateError> {
        self.read_code(&code_hash)
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, StateError> {
        let key = storage_slot_key(&address, &index);
        self.snapshot.check_leaf(&key)?;
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
pub fn decode_code(hash: &B256, raw: Bytes) -> Result<Bytecode, StateError> {
    let got = alloy_primitives::keccak256(&raw);
    if got != *hash {
        return Err(StateError::CorruptCode {
            hash: *hash,
            reason: format!("the stored bytes hash to {got}"),
        });
    }
    Bytecode::new_raw_checked(raw).map_err(|e| StateError::CorruptCode {
        hash: *hash,
        reason: format!("does not decode: {e:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TrieDb` is `Send + Sync` over every backend, and `'static` over the in-memory one.
    #[test]
    fn trie_db_is_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        fn send_sync_static<T: Send + Sync + 'static>() {}
        send_sync_static::<TrieDb<crate::MemorySnapshot>>();
        send_sync_static::<std::sync::Arc<TrieDb<crate::MemorySnapshot>>>();
        #[cfg(feature = "mdbx")]
        send_sync::<TrieDb<crate::MdbxSnapshot<'_>>>();
        send_sync::<TrieDb<crate::MemorySnapshot>>();
    }

    #[test]
    fn code_that_does_not_hash_to_its_key_is_an_error_not_empty_code() {
        let code = vec![0x60, 0x00, 0x60, 0x00, 0xf3];
        let wrong = alloy_primitives::keccak256([0x00]);
        let err = decode_code(&wrong, code.clone().into()).unwrap_err();
        assert!(matches!(err, StateError::CorruptCode { .. }), "{err}");
        let right = alloy_primitives::keccak256(&code);
        assert_eq!(
            decode_code(&right, code.into())
                .unwrap()
                .original_bytes()
                .len(),
            5
        );
    }

    #[test]
    fn code_that_does_not_decode_is_an_error_not_empty_code() {
        // An EIP-7702 delegation prefix with a wrong length hashes fine but does not decode.
        let code = vec![0xef, 0x01, 0x00, 0x01];
        let hash = alloy_primitives::keccak256(&code);
        let err = decode_code(&hash, code.into()).unwrap_err();
        assert!(matches!(err, StateError::CorruptCode { .. }), "{err}");
    }

    /// Through a real database: a flipped byte in the code table makes revm's code lookup fail.
    #[cfg(feature = "mdbx")]
    #[test]
    fn a_flipped_byte_in_stored_code_fails_the_lookup() {
        use bintrie_store::{ReadPath, StateStore, StoreOptions};
        use bintrie_trie::Trie;
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
