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

/// The random state: `stems` random stems, a quarter of them accounts.
pub fn random_entries(stems: u64, seed: u64) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(stems as usize * 5 / 4);
    for i in 0..stems {
        if i % 4 == 0 {
            let address = Address::from(rng.random::<[u8; 20]>());
            let acct = AccountState {
                nonce: rng.random_range(0..1_000),
                balance: U256::from(rng.random::<u64>()),
                ..Default::default()
            };
            out.extend(account_entries(&address, &acct)?);
        } else {
            let mut value = rng.random::<[u8; 32]>();
            value[0] |= 1;
            out.push((
                TreeKey {
                    stem: rng.random(),
                    sub_index: rng.random(),
                },
                value,
            ));
        }
    }
    Ok(out)
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
