//! What to read before a block executes.

use alloy_primitives::{Address, B256, U256, address};
use bintrie_keys::{Stem, basic_data_key, storage_slot_key};

/// EIP-4788 beacon roots contract.
pub const BEACON_ROOTS_ADDRESS: Address = address!("0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935 history storage contract.
pub const HISTORY_STORAGE_ADDRESS: Address = address!("0x0000F90827F1C53a10cb7A02335B175320002935");
/// EIP-7002 withdrawal requests contract.
pub const WITHDRAWAL_REQUEST_ADDRESS: Address =
    address!("0x00000961Ef480Eb55e80D19ad83579A64c007002");
/// EIP-7251 consolidation requests contract.
pub const CONSOLIDATION_REQUEST_ADDRESS: Address =
    address!("0x0000BBdDc7CE488642fb579F8B00f3a590007251");

/// The accounts and slots a block is expected to touch: senders, recipients, EIP-2930 access
/// lists, the coinbase, withdrawal recipients, the system contracts, and an EIP-7928 block
/// access list when there is one. Duplicates are fine: [`PrefetchList::stems`] dedupes.
#[derive(Clone, Debug, Default)]
pub struct PrefetchList {
    accounts: Vec<Address>,
    slots: Vec<(Address, U256)>,
}

impl PrefetchList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an account (its header stem: BASIC_DATA, CODE_HASH, slots 0..63, first code chunks).
    pub fn account(&mut self, address: Address) -> &mut Self {
        self.accounts.push(address);
        self
    }

    /// Adds a storage slot (and its account).
    pub fn slot(&mut self, address: Address, slot: U256) -> &mut Self {
        self.accounts.push(address);
        self.slots.push((address, slot));
        self
    }

    /// Adds an EIP-2930 access list (or an EIP-7928 block access list's reads): each address
    /// with its storage keys.
    pub fn access_list<'a>(
        &mut self,
        list: impl IntoIterator<Item = (Address, &'a [B256])>,
    ) -> &mut Self {
        for (address, keys) in list {
            self.accounts.push(address);
            self.slots
                .extend(keys.iter().map(|k| (address, U256::from_be_bytes(k.0))));
        }
        self
    }

    /// Adds the system contracts called around every block (EIP-4788, EIP-2935, EIP-7002,
    /// EIP-7251). Their slots depend on the block, so only the accounts are listed.
    pub fn system_contracts(&mut self) -> &mut Self {
        self.accounts.extend([
            BEACON_ROOTS_ADDRESS,
            HISTORY_STORAGE_ADDRESS,
            WITHDRAWAL_REQUEST_ADDRESS,
            CONSOLIDATION_REQUEST_ADDRESS,
        ]);
        self
    }

    /// Number of accounts and slots listed (with duplicates).
    pub fn len(&self) -> usize {
        self.accounts.len() + self.slots.len()
    }

    /// True when nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.slots.is_empty()
    }

    /// The stems to read, sorted and deduplicated, each marked with its account when it is an
    /// account's header stem (the only stems whose sub-index 1 is a CODE_HASH; a storage
    /// stem's sub-index 1 is an ordinary slot): [`PrefetchList::stems_by_account`], sorted.
    pub fn stems(&self) -> Vec<ListedStem> {
        let mut stems = self.stems_by_account();
        stems.sort_unstable_by_key(|l| l.stem);
        stems
    }

    /// The stems to read in the order execution is likely to want them: each account in the
    /// order it was first listed (the system contracts, the coinbase and the transactions'
    /// accounts in block order, when the list was built that way), its header stem followed
    /// by its slots' stems in the order they were listed; each stem once, marked as a header
    /// when it is one. Each distinct address and slot is hashed once.
    pub fn stems_by_account(&self) -> Vec<ListedStem> {
        use alloy_primitives::map::{HashMap, HashSet};
        let mut slots_of: HashMap<Address, Vec<U256>> = HashMap::default();
        let mut seen_slots: HashSet<(Address, U256)> = HashSet::default();
        for (a, s) in &self.slots {
            if seen_slots.insert((*a, *s)) {
                slots_of.entry(*a).or_default().push(*s);
            }
        }
        let mut seen_accounts: HashSet<Address> = HashSet::default();
        let mut at: HashMap<Stem, usize> = HashMap::default();
        let mut out: Vec<ListedStem> = Vec::new();
        let mut push = |stem: Stem, account: Option<Address>| match at.get(&stem) {
            Some(&i) => out[i].account = out[i].account.or(account),
            None => {
                at.insert(stem, out.len());
                out.push(ListedStem { stem, account });
            }
        };
        for a in self.accounts.iter().filter(|a| seen_accounts.insert(**a)) {
            push(basic_data_key(a).stem, Some(*a));
            for s in slots_of.remove(a).unwrap_or_default() {
                push(storage_slot_key(a, &s).stem, None);
            }
        }
        out
    }

    /// The stems to read, sorted and deduplicated, without the header marks: what the trie
    /// prefetch of [`crate::BlockPlan::write_stems`] takes.
    pub fn stem_keys(&self) -> Vec<Stem> {
        self.stems().into_iter().map(|l| l.stem).collect()
    }
}

/// One stem of a [`PrefetchList`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedStem {
    /// The stem.
    pub stem: Stem,
    /// The account whose header stem this is (its BASIC_DATA and CODE_HASH, whose code is
    /// prefetched too); `None` for a storage stem.
    pub account: Option<Address>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stems_by_account` holds the stems `stems` holds, each once with the same header mark,
    /// ordered by account in first-listed order, each header before its slots.
    #[test]
    fn stems_by_account_are_the_stems_in_listed_account_order() {
        let (a, b, c) = (
            Address::repeat_byte(0xa),
            Address::repeat_byte(0xb),
            Address::repeat_byte(0xc),
        );
        let mut list = PrefetchList::new();
        list.account(c)
            .slot(a, U256::from(1_000))
            .slot(c, U256::from(5)) // on c's header stem
            .account(b)
            .slot(c, U256::from(2_000))
            .slot(a, U256::from(1_000))
            .account(a);
        let ordered = list.stems_by_account();
        let header = |x: &Address| ListedStem {
            stem: basic_data_key(x).stem,
            account: Some(*x),
        };
        let slot = |x: &Address, k: u64| ListedStem {
            stem: storage_slot_key(x, &U256::from(k)).stem,
            account: None,
        };
        let want = vec![
            header(&c),
            slot(&c, 2_000),
            header(&a),
            slot(&a, 1_000),
            header(&b),
        ];
        assert_eq!(ordered, want);
        // `stems` holds the same, sorted by stem.
        let mut sorted = want;
        sorted.sort_unstable_by_key(|l| l.stem);
        assert_eq!(list.stems(), sorted);
    }
}
