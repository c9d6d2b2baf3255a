//! Real transactions through revm over the binary-trie store: value transfers, a contract
//! deployment, and ERC-20 (WETH9, its runtime code taken from a mainnet fixture) transfers and
//! approvals. After each block the root equals the root of the same post-state built from
//! scratch; reopening gives the same values; prefetch makes read amplification exactly 1.

mod common;
use common::*;

use alloy_primitives::{Address, B256, Bytes, U256, address, keccak256};
use bintrie_keys::{AccountState, storage_slot_key};
use bintrie_revm::{
    BinTrieState, BlockDbOptions, BlockPlan, BlockState, PipelineError, PipelineOptions,
    PrefetchList, ReadStats,
};
use bintrie_store::{Durability, ReadPath, StoreOptions};
use revm::context::result::ExecutionResult;
use revm::context::{Context, TxEnv};
use revm::database::{CacheDB, EmptyDB};
use revm::database_interface::DatabaseRef;
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;
use revm::{ExecuteCommitEvm, ExecuteEvm, MainBuilder, MainContext};
use std::collections::BTreeMap;
use std::path::PathBuf;

const ALICE: Address = address!("0x1000000000000000000000000000000000000001");
const BOB: Address = address!("0x2000000000000000000000000000000000000002");
const CAROL: Address = address!("0x3000000000000000000000000000000000000003");
const WETH: Address = address!("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2");
const COINBASE: Address = address!("0x00000000000000000000000000000000c0ffee00");
const ETHER: u128 = 1_000_000_000_000_000_000;

fn fixtures_dir() -> PathBuf {
    if let Ok(d) = std::env::var("BINTRIE_FIXTURES") {
        return PathBuf::from(d);
    }
    let d = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/mainnet"
    ));
    assert!(
        d.is_dir(),
        "mainnet fixtures not found: set BINTRIE_FIXTURES or provide ../shared/fixtures/mainnet \
         next to the repository (looked at {})",
        d.display()
    );
    d
}

/// WETH9's runtime code, from the recorded pre-state of mainnet block 22615247.
fn weth_code() -> Vec<u8> {
    let path = fixtures_dir().join("22615247-prague.zkpi.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read fixture")).unwrap();
    let pre = json["extra"]["preState"].as_object().unwrap();
    let (_, acct) = pre
        .iter()
        .find(|(k, _)| k.parse::<Address>().ok() == Some(WETH))
        .expect("WETH in the fixture's pre-state");
    let code = hex::decode(acct["code"].as_str().unwrap().trim_start_matches("0x")).unwrap();
    assert_eq!(code.len(), 3124, "WETH9 runtime code");
    code
}

fn selector(sig: &str) -> [u8; 4] {
    keccak256(sig.as_bytes())[..4].try_into().unwrap()
}

fn call(sig: &str, args: &[U256]) -> Bytes {
    let mut d = selector(sig).to_vec();
    for a in args {
        d.extend_from_slice(&a.to_be_bytes::<32>());
    }
    d.into()
}

fn addr_word(a: Address) -> U256 {
    U256::from_be_slice(a.as_slice())
}

/// WETH9's balanceOf slot: mapping at slot 3.
fn balance_slot(owner: Address) -> U256 {
    let mut pre = [0u8; 64];
    pre[12..32].copy_from_slice(owner.as_slice());
    pre[63] = 3;
    U256::from_be_bytes(keccak256(pre).0)
}

/// WETH9's allowance slot: mapping at slot 4.
fn allowance_slot(owner: Address, spender: Address) -> U256 {
    let mut inner = [0u8; 64];
    inner[12..32].copy_from_slice(owner.as_slice());
    inner[63] = 4;
    let mut outer = [0u8; 64];
    outer[12..32].copy_from_slice(spender.as_slice());
    outer[32..].copy_from_slice(keccak256(inner).as_slice());
    U256::from_be_bytes(keccak256(outer).0)
}

fn pre_state() -> BTreeMap<Address, AccountState> {
    let mut m = BTreeMap::new();
    for (a, bal) in [(ALICE, 100 * ETHER), (BOB, 5 * ETHER)] {
        m.insert(
            a,
            AccountState {
                balance: U256::from(bal),
                ..Default::default()
            },
        );
    }
    m.insert(
        WETH,
        AccountState {
            balance: U256::from(3 * ETHER),
            code: weth_code(),
            storage: vec![
                (U256::from(0), U256::from(1)), // slot 0: name (short string stand-in)
                (balance_slot(BOB), U256::from(3 * ETHER)),
            ],
            ..Default::default()
        },
    );
    m
}

/// The reference: revm's in-memory CacheDB with the same pre-state.
fn reference_db(pre: &BTreeMap<Address, AccountState>) -> CacheDB<EmptyDB> {
    let mut db = CacheDB::<EmptyDB>::default();
    for (a, s) in pre {
        let mut info = AccountInfo::default()
            .with_balance(s.balance)
            .with_nonce(s.nonce);
        if !s.code.is_empty() {
            info = info.with_code(revm::bytecode::Bytecode::new_raw(s.code.clone().into()));
        }
        db.insert_account_info(*a, info);
        for (k, v) in &s.storage {
            db.insert_account_storage(*a, *k, *v).unwrap();
        }
    }
    db
}

fn evm_ctx<DB: revm::Database>(
    db: DB,
    number: u64,
) -> revm::handler::MainnetEvm<revm::handler::MainnetContext<DB>> {
    Context::mainnet()
        .modify_cfg_chained(|c| c.set_spec_and_mainnet_gas_params(SpecId::PRAGUE))
        .modify_block_chained(|b| {
            b.number = U256::from(number);
            b.basefee = 1;
            b.beneficiary = COINBASE;
            b.gas_limit = 100_000_000;
        })
        .with_db(db)
        .build_mainnet()
}

/// The complete access list of `txs` in order: every account and slot the reference execution
/// loads (what an EIP-7928 block access list gives).
fn access_list(reference: &CacheDB<EmptyDB>, txs: &[TxEnv], number: u64) -> PrefetchList {
    let mut db = reference.clone();
    let mut list = PrefetchList::new();
    list.account(COINBASE);
    for t in txs {
        let mut evm = evm_ctx(&mut db, number);
        let out = evm.transact(t.clone()).unwrap();
        for (a, acct) in &out.state {
            list.account(*a);
            for k in acct.storage.keys() {
                list.slot(*a, *k);
            }
        }
        evm.commit(out.state);
    }
    list
}

struct BlockRun {
    results: Vec<ExecutionResult>,
    stats: ReadStats,
    root: B256,
}

/// Runs `txs` as the next block through the pipeline ([`BinTrieState::run_block`]): with a
/// prefetch list, the state prefetch reads it and the trie prefetch preloads its stems' paths.
fn run_block(
    state: &mut BinTrieState,
    txs: &[TxEnv],
    options: BlockDbOptions,
    prefetch: Option<&PrefetchList>,
) -> BlockRun {
    let number = state.block() + 1;
    let plan = BlockPlan {
        number,
        prefetch: prefetch.cloned(),
        write_stems: prefetch.map_or_else(Vec::new, |l| l.stem_keys()),
        block_hashes: Vec::new(),
    };
    let options = PipelineOptions::default().with_db(options).with_workers(4);
    let run = state
        .run_block(&plan, &options, |db| {
            let before = db.stats();
            let mut evm = evm_ctx(db, number);
            let results = txs
                .iter()
                .map(|t| evm.transact_commit(t.clone()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, revm::context::result::EVMError<bintrie_revm::StateError>>((results, before))
        })
        .unwrap();
    let (results, before) = run.output;
    if prefetch.is_some() {
        assert_eq!(
            run.reads.misses, before.misses,
            "transactions read the store after prefetch"
        );
    }
    assert_eq!(
        run.reads.prefetch_stems,
        prefetch.map_or(0, |l| l.stems().len() as u64)
    );
    let t = run.timings;
    assert!(t.trie_update >= t.trie_prefetch_wait && t.state_read >= t.prefetch);
    assert!(t.total >= t.state_read + t.execution + t.commit, "{t:?}");
    BlockRun {
        results,
        stats: run.reads,
        root: run.commit.root,
    }
}

fn run_reference(db: &mut CacheDB<EmptyDB>, txs: &[TxEnv], number: u64) -> Vec<ExecutionResult> {
    let mut evm = evm_ctx(db, number);
    txs.iter()
        .map(|t| evm.transact_commit(t.clone()).unwrap())
        .collect()
}

fn open_state(dir: &std::path::Path) -> BinTrieState {
    BinTrieState::open(
        dir,
        &StoreOptions {
            group_depth: Some(5),
            durability: Durability::Relaxed,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn transfers_deployment_and_erc20_match_a_scratch_build() {
    let dir = tempfile::tempdir().unwrap();
    let pre = pre_state();
    let mut state = open_state(dir.path());
    state.import_accounts(pre.iter(), 0).unwrap();
    let mut reference = reference_db(&pre);
    assert_eq!(state.root(), scratch_root(&reference), "pre-state root");

    // Block 1: value transfers (one to a new account) and a contract deployment of WETH9's
    // runtime through a minimal constructor.
    let runtime = weth_code();
    let len = runtime.len() as u16;
    let mut init = vec![
        0x61,
        (len >> 8) as u8,
        len as u8,
        0x80,
        0x60,
        0x0c,
        0x60,
        0x00,
        0x39,
        0x60,
        0x00,
        0xf3,
    ];
    init.extend_from_slice(&runtime);
    let block1 = vec![
        tx(ALICE, 0, Some(BOB), ETHER, Bytes::new()),
        tx(ALICE, 1, Some(CAROL), 2 * ETHER, Bytes::new()),
        tx(BOB, 0, Some(ALICE), 1000, Bytes::new()),
        tx(ALICE, 2, None, 0, init.into()),
    ];
    let run = run_block(&mut state, &block1, BlockDbOptions::default(), None);
    let want = run_reference(&mut reference, &block1, 1);
    assert_eq!(run.results, want);
    assert!(run.results.iter().all(ExecutionResult::is_success));
    let deployed = run.results[3].created_address().expect("created");
    assert_eq!(run.root, scratch_root(&reference), "root after block 1");

    // Block 2: ERC-20 on WETH9 (the fixture's code at its mainnet address): deposit,
    // transfer, approve, transferFrom, and a deposit into the deployed copy.
    let block2 = vec![
        tx(ALICE, 3, Some(WETH), 10 * ETHER, call("deposit()", &[])),
        tx(
            ALICE,
            4,
            Some(WETH),
            0,
            call(
                "transfer(address,uint256)",
                &[addr_word(CAROL), U256::from(ETHER)],
            ),
        ),
        tx(
            BOB,
            1,
            Some(WETH),
            0,
            call(
                "approve(address,uint256)",
                &[addr_word(ALICE), U256::from(7 * ETHER)],
            ),
        ),
        tx(
            ALICE,
            5,
            Some(WETH),
            0,
            call(
                "transferFrom(address,address,uint256)",
                &[addr_word(BOB), addr_word(CAROL), U256::from(ETHER)],
            ),
        ),
        tx(CAROL, 0, Some(deployed), ETHER, call("deposit()", &[])),
    ];
    let list = access_list(&reference, &block2, 2);
    let run = run_block(&mut state, &block2, BlockDbOptions::default(), Some(&list));
    let want = run_reference(&mut reference, &block2, 2);
    assert_eq!(run.results, want);
    assert!(
        run.results.iter().all(ExecutionResult::is_success),
        "{:?}",
        run.results
    );
    assert_eq!(run.root, scratch_root(&reference), "root after block 2");
    assert_eq!(run.stats.read_amplification(), 1.0, "{:?}", run.stats);
    assert_eq!(run.stats.misses, 0);

    // Reopen: the same root and values, through both read paths.
    let root = state.root();
    drop(state);
    let state = open_state(dir.path());
    assert_eq!(state.root(), root);
    assert_eq!(state.block(), 2);
    for read_path in [ReadPath::Flat, ReadPath::TrieWalk] {
        let db = bintrie_revm::TrieDb::new(state.store(), read_path).unwrap();
        for a in [ALICE, BOB, CAROL, WETH, deployed] {
            let got = db.basic_ref(a).unwrap().expect("account exists");
            let want = reference.basic_ref(a).unwrap().unwrap();
            assert_eq!(
                (got.balance, got.nonce, got.code_hash),
                (want.balance, want.nonce, want.code_hash)
            );
            assert_eq!(
                db.code_by_hash_ref(got.code_hash).unwrap().original_bytes(),
                reference
                    .code_by_hash_ref(want.code_hash)
                    .unwrap()
                    .original_bytes()
            );
        }
        for (owner, slot) in [
            (ALICE, balance_slot(ALICE)),
            (CAROL, balance_slot(CAROL)),
            (BOB, allowance_slot(BOB, ALICE)),
        ] {
            let _ = owner;
            assert_eq!(
                db.storage_ref(WETH, slot).unwrap(),
                reference.storage_ref(WETH, slot).unwrap()
            );
        }
        assert_eq!(
            db.storage_ref(deployed, balance_slot(CAROL)).unwrap(),
            U256::from(ETHER)
        );
    }
}

#[test]
fn without_the_cache_repeated_keys_amplify_reads() {
    let pre = pre_state();
    let txs: Vec<TxEnv> = (0..5)
        .map(|i| {
            tx(
                BOB,
                i,
                Some(WETH),
                0,
                call(
                    "transfer(address,uint256)",
                    &[addr_word(CAROL), U256::from(1000)],
                ),
            )
        })
        .collect();
    let mut amp = Vec::new();
    for cache in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut state = open_state(dir.path());
        state.import_accounts(pre.iter(), 0).unwrap();
        let run = run_block(
            &mut state,
            &txs,
            BlockDbOptions::default().with_cache(cache),
            None,
        );
        assert!(run.results.iter().all(ExecutionResult::is_success));
        amp.push((run.stats.read_amplification(), run.root));
    }
    assert_eq!(amp[0].0, 1.0, "with the cache every key is read once");
    assert!(
        amp[1].0 > 1.5,
        "without the cache the same keys are read again: {}",
        amp[1].0
    );
    assert_eq!(amp[0].1, amp[1].1, "same root either way");
}

/// geth's semantics: a slot written non-zero then cleared stays a present zero leaf, so the
/// root differs from never having written it and equals the scratch build with a zero leaf.
#[test]
fn cleared_slot_stays_a_present_zero_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let pre = pre_state();
    let mut state = open_state(dir.path());
    state.import_accounts(pre.iter(), 0).unwrap();
    let mut reference = reference_db(&pre);
    let approve = |nonce, amount: u128| {
        tx(
            BOB,
            nonce,
            Some(WETH),
            0,
            call(
                "approve(address,uint256)",
                &[addr_word(CAROL), U256::from(amount)],
            ),
        )
    };
    run_block(
        &mut state,
        &[approve(0, 5)],
        BlockDbOptions::default(),
        None,
    );
    run_reference(&mut reference, &[approve(0, 5)], 1);
    let run = run_block(
        &mut state,
        &[approve(1, 0)],
        BlockDbOptions::default(),
        None,
    );
    run_reference(&mut reference, &[approve(1, 0)], 2);
    let never_written = scratch_root(&reference);
    assert_ne!(
        run.root, never_written,
        "the cleared slot must stay in the tree"
    );
    // The scratch state plus an explicit zero leaf at the allowance key.
    let mut writes = scratch_writes(&reference);
    writes.push((
        storage_slot_key(&WETH, &allowance_slot(BOB, CAROL)),
        [0; 32],
    ));
    assert_eq!(run.root, root_of(writes));
}

/// Prefetch takes code hashes only from account header stems: a storage stem whose sub-index 1
/// (slot % 256 == 1, past the header slots) holds an ordinary value is not mistaken for code,
/// and an account whose code is missing from the table is left to on-demand reads.
#[test]
fn prefetch_reads_code_hashes_only_from_account_headers() {
    let dir = tempfile::tempdir().unwrap();
    let mut pre = pre_state();
    let odd_slot = (U256::from(5) << 240) | U256::from(1); // sub-index 1 of a storage stem
    pre.get_mut(&WETH)
        .unwrap()
        .storage
        .push((odd_slot, U256::from_be_slice(&[0xab; 20])));
    let mut state = open_state(dir.path());
    state.import_accounts(pre.iter(), 0).unwrap();
    let mut db = state.block_db(BlockDbOptions::default()).unwrap();
    let mut list = PrefetchList::new();
    list.slot(WETH, odd_slot).account(ALICE);
    db.prefetch(&list, 2).unwrap();
    // WETH's header stem, the storage stem, ALICE's header, and WETH's code: nothing else.
    assert_eq!(db.stats().store_reads, 4, "{:?}", db.stats());
    use revm::Database;
    assert_eq!(
        db.storage(WETH, odd_slot).unwrap(),
        U256::from_be_slice(&[0xab; 20])
    );
    assert_eq!(db.stats().misses, 0);
}

/// A block whose execution fails goes nowhere: the trie prefetch is stopped, nothing is
/// committed, and the state is still at the previous block, ready for the next one.
#[test]
fn a_failed_execution_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pre = pre_state();
    let mut state = open_state(dir.path());
    state.import_accounts(pre.iter(), 0).unwrap();
    let (root, block) = (state.root(), state.block());
    let mut list = PrefetchList::new();
    list.account(ALICE).account(BOB).account(COINBASE);
    let plan = BlockPlan {
        number: 1,
        prefetch: Some(list.clone()),
        write_stems: list.stem_keys(),
        block_hashes: Vec::new(),
    };
    #[derive(Debug, thiserror::Error)]
    #[error("the block is invalid")]
    struct Invalid;
    let err = state
        .run_block(&plan, &PipelineOptions::default(), |db| {
            // Writes something, then fails.
            let mut evm = evm_ctx(db, 1);
            evm.transact_commit(tx(ALICE, 0, Some(BOB), ETHER, Bytes::new()))
                .unwrap();
            Err::<(), _>(Invalid)
        })
        .unwrap_err();
    assert!(matches!(err, PipelineError::Execute(Invalid)), "{err}");
    assert_eq!((state.root(), state.block()), (root, block));
    // The next block runs normally from there.
    let mut reference = reference_db(&pre);
    let txs = [tx(ALICE, 0, Some(BOB), ETHER, Bytes::new())];
    run_reference(&mut reference, &txs, 1);
    let run = run_block(&mut state, &txs, BlockDbOptions::default(), Some(&list));
    assert_eq!(run.root, scratch_root(&reference));
}
