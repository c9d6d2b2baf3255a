//! Plug the binary-trie state into a revm EVM and run one transaction.
//!
//! `cargo run -p bintrie-revm --example transfer`

use alloy_primitives::{U256, address};
use bintrie_keys::AccountState;
use bintrie_revm::{BinTrieState, BlockDbOptions, PrefetchList};
use revm::{ExecuteCommitEvm, MainBuilder, MainContext, context::Context, context::TxEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (alice, bob) = (
        address!("0x1000000000000000000000000000000000000001"),
        address!("0x2000000000000000000000000000000000000002"),
    );
    let dir = tempfile::tempdir()?;
    let mut state = BinTrieState::open(dir.path(), &Default::default())?;
    let funded = AccountState {
        balance: U256::from(10u64.pow(18)),
        ..Default::default()
    };
    state.import_accounts([(&alice, &funded)], 0)?;

    let mut db = state.block_db(BlockDbOptions::default())?; // cache on, flat read path
    db.prefetch(PrefetchList::new().account(alice).account(bob), 4)?;
    let tx = TxEnv::builder()
        .caller(alice)
        .to(bob)
        .value(U256::from(1000))
        .gas_limit(21_000)
        .gas_price(0)
        .build()
        .unwrap();
    let result = Context::mainnet()
        .with_db(&mut db)
        .build_mainnet()
        .transact_commit(tx)?;
    println!(
        "success: {}, gas used: {}",
        result.is_success(),
        result.tx_gas_used()
    );

    let stats = db.stats();
    let report = state.commit_block(db.into_changes()?, 1)?;
    println!(
        "store reads {}, read amplification {:.2}",
        stats.store_reads,
        stats.read_amplification()
    );
    println!("block 1 root {}", report.root);
    Ok(())
}
