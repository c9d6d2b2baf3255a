//! The binary-trie state in memory (no MDBX): a few accounts, one revm transaction, the root.
//!
//! `cargo run -p bintrie-revm --no-default-features --example in_memory`

use alloy_primitives::{U256, address};
use bintrie_keys::AccountState;
use bintrie_revm::{BlockDbOptions, MemoryState};
use revm::{ExecuteCommitEvm, MainBuilder, MainContext, context::Context, context::TxEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (alice, bob, carol) = (
        address!("0x1000000000000000000000000000000000000001"),
        address!("0x2000000000000000000000000000000000000002"),
        address!("0x3000000000000000000000000000000000000003"),
    );
    let mut state = MemoryState::new(8)?;
    let accounts =
        [(alice, 10u64.pow(18)), (bob, 5 * 10u64.pow(17)), (carol, 1)].map(|(a, balance)| {
            (
                a,
                AccountState {
                    balance: U256::from(balance),
                    ..Default::default()
                },
            )
        });
    let genesis = state
        .import_accounts(accounts.iter().map(|(a, s)| (a, s)), 0)?
        .root;
    println!("genesis root {genesis}");

    // One block: alice sends bob 1000 wei through revm over the block database.
    let mut db = state.block_db(BlockDbOptions::default())?;
    let tx = TxEnv::builder()
        .caller(alice)
        .to(bob)
        .value(U256::from(1000))
        .gas_limit(21_000)
        .gas_price(0)
        .build()
        .map_err(|e| format!("{e:?}"))?;
    let result = Context::mainnet()
        .with_db(&mut db)
        .build_mainnet()
        .transact_commit(tx)?;
    println!(
        "success: {}, gas used: {}",
        result.is_success(),
        result.tx_gas_used()
    );
    let changes = db.into_changes()?;
    let simulated = state.root_with(&changes)?;
    let root = state.commit_block(changes, 1)?.root;
    assert_eq!(root, simulated, "the simulated root is the committed one");
    println!("block 1 root {root}");
    Ok(())
}
