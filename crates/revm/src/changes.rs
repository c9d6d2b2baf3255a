//! Tree writes with geth's semantics (SPEC §4): [`BlockChanges`], built from a [`crate::BlockDb`]
//! ([`crate::BlockDb::into_changes`]) or from revm's [`BundleState`]
//! ([`TrieDb::bundle_changes`]) by the same rules.

use crate::{StateError, StateSnapshot, TrieDb};
use alloy_primitives::{Address, B256, U256, keccak256};
use bintrie_keys::{
    AccountState, BasicData, EMPTY_CODE_HASH, TreeKey, account_entries, basic_data_key,
    chunkify_code, code_chunk_key, code_hash_key, storage_slot_key,
};
use revm::bytecode::Bytecode;
use revm::database::BundleState;
use revm::state::AccountInfo;

/// The tree writes of one block (or of any set of changes), ready to commit
/// (`BinTrieState::commit_block`, [`crate::MemoryState::commit_block`]) or to root
/// without committing (`BinTrieState::root_with`, [`crate::MemoryState::root_with`]).
#[derive(Clone, Debug, Default)]
pub struct BlockChanges {
    /// Tree writes (SPEC §4), one per key.
    pub writes: Vec<(TreeKey, [u8; 32])>,
    /// New bytecode by hash.
    pub code: Vec<(B256, Vec<u8>)>,
    /// Accounts whose header leaves are written.
    pub accounts_written: usize,
    /// Storage slots written.
    pub slots_written: usize,
}

impl BlockChanges {
    /// Writes BASIC_DATA and CODE_HASH of an account that exists after the changes, and, when
    /// `new_code` is given, all its code chunks and the code itself.
    pub(crate) fn write_account(
        &mut self,
        address: &Address,
        info: &AccountInfo,
        code_size: u32,
        new_code: Option<&Bytecode>,
    ) -> Result<(), StateError> {
        let basic = BasicData {
            version: 0,
            code_size,
            nonce: info.nonce,
            balance: info.balance,
        }
        .encode()
        .map_err(|reason| StateError::Encode {
            address: *address,
            reason,
        })?;
        self.writes.push((basic_data_key(address), basic));
        self.writes.push((code_hash_key(address), info.code_hash.0));
        self.accounts_written += 1;
        if let Some(code) = new_code {
            let bytes = code.original_bytes();
            for (i, chunk) in chunkify_code(&bytes).into_iter().enumerate() {
                self.writes.push((code_chunk_key(address, i as u64), chunk));
            }
            self.code.push((info.code_hash, bytes.to_vec()));
        }
        Ok(())
    }

    /// A deleted account: zeroes BASIC_DATA and CODE_HASH only (storage and code chunks stay).
    pub(crate) fn delete_account(&mut self, address: &Address) {
        self.writes.push((basic_data_key(address), [0; 32]));
        self.writes.push((code_hash_key(address), [0; 32]));
        self.accounts_written += 1;
    }

    /// A storage slot's new value (a zero is written as a present zero leaf).
    pub(crate) fn write_slot(&mut self, address: &Address, slot: &U256, value: U256) {
        self.writes
            .push((storage_slot_key(address, slot), value.to_be_bytes()));
        self.slots_written += 1;
    }

    /// Whole accounts as written by a genesis or pre-state import: every account's header, code
    /// chunks and non-zero storage (SPEC §4), and its code. Zero slots are dropped first (geth's
    /// genesis semantics).
    pub fn from_accounts<'a>(
        accounts: impl IntoIterator<Item = (&'a Address, &'a AccountState)>,
    ) -> Result<Self, StateError> {
        let mut out = BlockChanges::default();
        for (address, acct) in accounts {
            let mut acct = acct.clone();
            acct.storage.retain(|(_, v)| !v.is_zero());
            let entries = account_entries(address, &acct).map_err(|reason| StateError::Encode {
                address: *address,
                reason,
            })?;
            out.writes.extend(entries);
            out.accounts_written += 1;
            out.slots_written += acct.storage.len();
            if !acct.code.is_empty() {
                out.code.push((keccak256(&acct.code), acct.code.clone()));
            }
        }
        Ok(out)
    }
}

impl<S: StateSnapshot> TrieDb<S> {
    /// The tree writes of revm's `bundle` (from `State` with bundle tracking, after
    /// `merge_transitions`), by the rules [`crate::BlockDb::into_changes`] applies: an account
    /// whose balance, nonce or code hash changed (or whose code was (re)created) writes
    /// BASIC_DATA and CODE_HASH; new code writes all its chunks; an account that existed and
    /// no longer does zeroes BASIC_DATA and CODE_HASH only; a slot writes its value when it
    /// differs from its original value (after a self-destruct: when it is not zero, as revm's
    /// `BundleState::to_plain_state` does), a cleared slot as a present zero leaf.
    ///
    /// `self` must be the database the bundle was built over (its block-start state): the
    /// code size of an account whose code did not change is read from it (BASIC_DATA), and so
    /// is new code the bundle does not carry ([`StateError::MissingCode`] if nowhere).
    pub fn bundle_changes(&self, bundle: &BundleState) -> Result<BlockChanges, StateError> {
        let mut out = BlockChanges::default();
        for (address, acct) in &bundle.state {
            let destroyed = acct.was_destroyed();
            match (&acct.original_info, &acct.info) {
                (original, Some(info)) => {
                    let code_changed = info.code_hash != EMPTY_CODE_HASH
                        && info.code_hash != B256::ZERO
                        && (destroyed
                            || original.as_ref().map(|o| o.code_hash) != Some(info.code_hash));
                    if !acct.is_info_changed() && !code_changed {
                        // Unchanged header; its storage is handled below.
                    } else if code_changed {
                        let code =
                            match bundle.contracts.get(&info.code_hash).or(info.code.as_ref()) {
                                Some(c) => c.clone(),
                                None => self.read_code(&info.code_hash)?,
                            };
                        let size = code.original_bytes().len() as u32;
                        out.write_account(address, info, size, Some(&code))?;
                    } else {
                        let size = self.code_size(address, &info.code_hash)?;
                        out.write_account(address, info, size, None)?;
                    }
                }
                (Some(_), None) => out.delete_account(address),
                (None, None) => {}
            }
            for (slot, s) in &acct.storage {
                let write = if destroyed {
                    !s.present_value.is_zero()
                } else {
                    s.is_changed()
                };
                if write {
                    out.write_slot(address, slot, s.present_value);
                }
            }
        }
        Ok(out)
    }

    /// The code size of `address` whose code hash is `code_hash` and unchanged: BASIC_DATA's,
    /// or the stored code's length if the header does not carry that hash.
    fn code_size(&self, address: &Address, code_hash: &B256) -> Result<u32, StateError> {
        if *code_hash == EMPTY_CODE_HASH || *code_hash == B256::ZERO {
            return Ok(0);
        }
        match self.read_account(address)? {
            Some(a) if a.info.code_hash == *code_hash => Ok(a.code_size),
            _ => Ok(self.read_code(code_hash)?.original_bytes().len() as u32),
        }
    }
}
