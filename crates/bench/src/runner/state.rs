//! The study's state: random stems, and the workload accounts (sender, ERC-20, driver).

use super::*;

/// Loop counts of one workload, sized from gas.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    /// Iterations of the workload's loop (balanceOf, approve, sload, or sstore per phase).
    pub count: u64,
    /// For `mixed`: approve iterations after `count` balanceOf iterations.
    pub writes: u64,
}

/// The random state: `stems` random stems, a quarter of them accounts, each write handed to
/// `sink` as it is made (in no particular order; the same writes for the same `seed`).
pub fn random_state(
    stems: u64,
    seed: u64,
    mut sink: impl FnMut(TreeKey, [u8; 32]) -> Result<()>,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..stems {
        if i % 4 == 0 {
            let address = Address::from(rng.random::<[u8; 20]>());
            let acct = AccountState {
                nonce: rng.random_range(0..1_000),
                balance: U256::from(rng.random::<u64>()),
                ..Default::default()
            };
            for (k, v) in account_entries(&address, &acct)? {
                sink(k, v)?;
            }
        } else {
            let mut value = rng.random::<[u8; 32]>();
            value[0] |= 1;
            let key = TreeKey {
                stem: rng.random(),
                sub_index: rng.random(),
            };
            sink(key, value)?;
        }
    }
    Ok(())
}

/// Disk a random stem needs while its database is built: the database's ~285 bytes, the sort
/// runs' ~90, and a margin.
const BYTES_PER_STEM: u64 = 420;

/// Disk any database takes however few its stems: MDBX grows its file in steps of up to
/// 64 MiB (measured: 65 MB for 20k stems, where the per-stem estimate says 8.4 MB).
const DATABASE_FLOOR_BYTES: u64 = 64 << 20;

/// Bytes of blobs per write transaction of the streaming build.
const BUILD_BATCH_BYTES: usize = 64 << 20;

/// Builds a study database in `dir` (new, opened with `store_options`) as block 1: the random
/// state of `config` and the workload accounts (see [`build_random_state`]). Returns the root.
pub fn build_database(
    dir: &Path,
    store_options: &StoreOptions,
    config: &StudyConfig,
    memory_budget: usize,
    progress: &dyn Fn(u64),
) -> Result<B256> {
    build_random_state(
        dir,
        store_options,
        config.stems,
        config.seed,
        &workload_accounts(config.holders),
        memory_budget,
        progress,
    )
}

/// Builds a database in `dir` (new, opened with `store_options`) as block 1: [`random_state`]
/// of `stems` and `seed`, plus `accounts` (which win over a random write to the same key), every
/// write through an [`ExternalSort`] of `memory_budget` bytes (runs spilled into `dir`) and
/// then the streaming build, so memory stays near the budget at any state size. Refuses up
/// front when the disk lacks the room. `progress` gets the stems placed so far. Returns the
/// root.
pub fn build_random_state(
    dir: &Path,
    store_options: &StoreOptions,
    stems: u64,
    seed: u64,
    accounts: &[(Address, AccountState)],
    memory_budget: usize,
    progress: &dyn Fn(u64),
) -> Result<B256> {
    let mut store = StateStore::open(dir, store_options)
        .with_context(|| format!("creating the database in {}", dir.display()))?;
    // The database takes ~285 bytes per random stem (measured at 16M stems, GD-5) and the
    // sort's runs ~90 more while it builds: refuse up front rather than fill the disk. Each
    // account and storage slot of `accounts` (the ERC-20's holders: one stem each, about)
    // counts as a stem.
    let extra: u64 = accounts
        .iter()
        .map(|(_, a)| 1 + a.storage.len() as u64)
        .sum();
    let need = stems
        .saturating_add(extra)
        .saturating_mul(BYTES_PER_STEM)
        .saturating_add(DATABASE_FLOOR_BYTES);
    if let Some(free) = bintrie_store::free_bytes(dir) {
        ensure!(
            free >= need,
            "building {stems} stems and {extra} accounts and slots needs about {} free in {} \
             (database and sort runs); {} are free",
            indicatif::DecimalBytes(need),
            dir.display(),
            indicatif::DecimalBytes(free)
        );
    }
    let mut sorter = ExternalSort::new(dir, memory_budget);
    random_state(stems, seed, |k, v| {
        super::check_stop()?;
        Ok(sorter.push(k, v)?)
    })?;
    let mut code = Vec::new();
    for (address, acct) in accounts {
        for (k, v) in account_entries(address, acct)? {
            sorter.push(k, v)?;
        }
        code.push((keccak256(&acct.code).0, acct.code.clone()));
    }
    let sorted = sorter.finish()?;
    let root = store.build_sorted(stems_of(sorted), &code, 1, BUILD_BATCH_BYTES, &mut |n| {
        progress(n)
    })?;
    Ok(B256::from(root))
}

/// The workload accounts: the sender, the ERC-20 with its holders, and the driver with its
/// pre-populated storage regions.
pub fn workload_accounts(holders: u64) -> Vec<(Address, AccountState)> {
    let per_holder = U256::from(1_000_000_000_000_000_000u128);
    let mut token_storage: Vec<(U256, U256)> = (0..holders)
        .map(|i| {
            let holder = contracts::counter_address(U256::from(HOLDER_BASE + i));
            (contracts::balance_slot(holder), per_holder)
        })
        .collect();
    token_storage.extend([
        (
            U256::from(contracts::TOTAL_SUPPLY_SLOT),
            per_holder * U256::from(holders),
        ),
        (
            U256::from(contracts::NAME_SLOT),
            contracts::short_string("Bench Token"),
        ),
        (
            U256::from(contracts::SYMBOL_SLOT),
            contracts::short_string("BENCH"),
        ),
    ]);
    let mut driver_storage: Vec<(U256, U256)> = (0..SLOAD_SLOTS)
        .map(|i| (U256::from(i), U256::from(i + 1)))
        .collect();
    for i in 0..SSTORE_REGION {
        driver_storage.push((U256::from(OTHER_BASE + i), U256::from(1)));
        driver_storage.push((U256::from(SAME_BASE + i), U256::from(SAME_VALUE)));
    }
    vec![
        (
            SENDER,
            AccountState {
                balance: U256::from(1_000_000_000_000_000_000_000u128),
                ..Default::default()
            },
        ),
        (
            TOKEN,
            AccountState {
                code: contracts::token_code(),
                storage: token_storage,
                ..Default::default()
            },
        ),
        (
            DRIVER,
            AccountState {
                code: contracts::driver_code(),
                storage: driver_storage,
                ..Default::default()
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use bintrie_trie::{MemoryStore, Trie};

    /// The streamed database (a budget small enough to spill many runs) holds exactly the
    /// state the writes give in memory, the workload accounts winning.
    #[test]
    fn the_streamed_database_has_the_in_memory_root() {
        let config = StudyConfig {
            stems: 20_000,
            holders: 50,
            ..StudyConfig::for_scale(crate::model::Scale::Smoke)
        };
        let mut writes = Vec::new();
        random_state(config.stems, config.seed, |k, v| {
            writes.push((k, v));
            Ok(())
        })
        .unwrap();
        for (address, acct) in workload_accounts(config.holders) {
            writes.extend(account_entries(&address, &acct).unwrap());
        }
        let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
        trie.update(writes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            group_depth: Some(5),
            ..Default::default()
        };
        let placed = std::sync::atomic::AtomicU64::new(0);
        let root = build_database(dir.path(), &options, &config, 0, &|n| {
            placed.store(n, std::sync::atomic::Ordering::Relaxed)
        })
        .unwrap();
        assert_eq!(root, B256::from(trie.root()));
        assert!(placed.into_inner() > 0);
        let store = StateStore::open_read_only(dir.path()).unwrap();
        assert_eq!(store.verify(&|_| {}).unwrap().root, root.0);
        // Only the database's own files are left (MDBX's two and the empty write journal):
        // the sort's runs are gone.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(
            left.iter()
                .all(|n| ["mdbx.dat", "mdbx.lck", "journal"].contains(&n.as_str()))
        );
    }
}
