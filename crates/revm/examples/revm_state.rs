//! revm's `State` with bundle tracking over [`TrieDb`](bintrie_revm::TrieDb), then the root of
//! the bundle's changes, computed without committing them (what a block builder needs).
//!
//! `cargo run -p bintrie-revm --example revm_state` (add `--no-default-features` to skip MDBX)

use alloy_primitives::{U256, address};
use bintrie_keys::AccountState;
use bintrie_revm::MemoryState;
use revm::database::State;
use revm::database::states::bundle_state::BundleRetention;
use revm::{ExecuteCommitEvm, MainBuilder, MainContext, context::Context, context::TxEnv};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (alice, bob) = (
        address!("0x1000000000000000000000000000000000000001"),
        address!("0x2000000000000000000000000000000000000002"),
    );
    let mut state = MemoryState::new(8)?;
    let funded = AccountState {
        balance: U256::from(10u64.pow(18)),
        ..Default::default()
    };
    state.import_accounts([(&alice, &funded)], 0)?;

    // revm's State over the trie database, tracking a bundle.
    let db = state.trie_db();
    let mut revm_state = State::builder()
        .with_database_ref(&db)
        .with_bundle_update()
        .build();
    {
        let mut evm = Context::mainnet().with_db(&mut revm_state).build_mainnet();
        for nonce in 0..3 {
            let tx = TxEnv::builder()
                .caller(alice)
                .to(bob)
                .nonce(nonce)
                .value(U256::from(1000))
                .gas_limit(21_000)
                .gas_price(0)
                .build()
                .map_err(|e| format!("{e:?}"))?;
            let result = evm.transact_commit(tx)?;
            println!("tx {nonce}: success {}", result.is_success());
        }
    }
    revm_state.merge_transitions(BundleRetention::PlainState);
    let bundle = revm_state.take_bundle();
    let changes = db.bundle_changes(&bundle)?;
    println!(
        "bundle: {} accounts, {} tree writes",
        bundle.state.len(),
        changes.writes.len()
    );
    println!(
        "root of the bundle (not committed) {}",
        state.root_with(&changes)?
    );
    println!("committed root is still {}", state.root());
    Ok(())
}
