//! The adapter for other tools: [`TrieDb`] inside revm's `CacheDB` and `State` (bundle
//! tracking), `BundleState` → tree writes, roots without committing, and the in-memory backend.
//! The same transactions give the same root through the bundle path and the `BlockDb` path, over
//! memory and over MDBX, and that root is the root of the post-state built from scratch.

mod common;
use common::*;

use alloy_primitives::{Address, Bytes, U256, address, keccak256};
use bintrie_keys::{AccountState, TreeKey, storage_slot_key};
use bintrie_revm::{
    BlockChanges, BlockDbOptions, BlockPlan, BlockState, BlockWitness, MemorySnapshot, MemoryState,
    PipelineError, PipelineOptions, StatelessState, TrieDb, WitnessEncoding, WitnessNodes,
    Witnesses,
};
use revm::bytecode::Bytecode;
use revm::context::result::ExecutionResult;
use revm::context::{Context, TxEnv};
use revm::database::states::bundle_state::BundleRetention;
use revm::database::{BundleState, CacheDB, EmptyDB, State};
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef, WrapDatabaseRef};
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;
use revm::{ExecuteCommitEvm, MainBuilder, MainContext};
use std::sync::Arc;

const ALICE: Address = address!("0x1000000000000000000000000000000000000001");
const BOB: Address = address!("0x2000000000000000000000000000000000000002");
const STORE: Address = address!("0x5000000000000000000000000000000000000005");
const COINBASE: Address = address!("0x00000000000000000000000000000000c0ffee00");
const ETHER: u128 = 1_000_000_000_000_000_000;
const BASEFEE: u64 = 1;

/// Runtime: slot 0 = the first calldata word; slot 1 += 1.
fn runtime() -> Vec<u8> {
    vec![
        0x60, 0x00, 0x35, 0x60, 0x00, 0x55, // sstore(0, calldataload(0))
        0x60, 0x01, 0x54, 0x60, 0x01, 0x01, 0x60, 0x01, 0x55, // sstore(1, sload(1) + 1)
        0x00,
    ]
}

/// A constructor that returns [`runtime`].
fn init_code() -> Vec<u8> {
    let rt = runtime();
    let mut init = vec![
        0x60,
        rt.len() as u8,
        0x80,
        0x60,
        0x0b,
        0x60,
        0x00,
        0x39,
        0x60,
        0x00,
        0xf3,
    ];
    assert_eq!(init.len(), 0x0b);
    init.extend_from_slice(&rt);
    init
}

fn pre_state() -> Vec<(Address, AccountState)> {
    vec![
        (
            ALICE,
            AccountState {
                balance: U256::from(100 * ETHER),
                ..Default::default()
            },
        ),
        (
            BOB,
            AccountState {
                balance: U256::from(5 * ETHER),
                ..Default::default()
            },
        ),
        (
            STORE,
            AccountState {
                balance: U256::from(1),
                code: runtime(),
                storage: vec![
                    (U256::from(1), U256::from(7)),
                    (U256::from(300), U256::from(9)),
                ],
                ..Default::default()
            },
        ),
    ]
}

fn word(v: u64) -> Bytes {
    U256::from(v).to_be_bytes::<32>().to_vec().into()
}

/// Block 1: a transfer, a call with value that writes two slots of an existing contract (its
/// header is rewritten with the stored code size), a deployment, and a call into the deployed
/// contract (from another sender).
fn block1() -> Vec<TxEnv> {
    let deployed = ALICE.create(2);
    vec![
        tx(ALICE, 0, Some(BOB), ETHER, Bytes::new()),
        tx(ALICE, 1, Some(STORE), 3, word(42)),
        tx(ALICE, 2, None, 0, init_code().into()),
        tx(BOB, 0, Some(deployed), 0, word(5)),
    ]
}

/// Block 2: clears STORE's slot 0 (a present zero leaf from now on).
fn block2() -> Vec<TxEnv> {
    vec![tx(BOB, 1, Some(STORE), 0, word(0))]
}

/// revm for block 1 over `db` (Prague, the test's base fee and coinbase).
fn evm1<DB: Database>(db: DB) -> revm::handler::MainnetEvm<revm::handler::MainnetContext<DB>> {
    Context::mainnet()
        .modify_cfg_chained(|c| c.set_spec_and_mainnet_gas_params(SpecId::PRAGUE))
        .modify_block_chained(|b| {
            b.number = U256::from(1);
            b.basefee = BASEFEE;
            b.beneficiary = COINBASE;
            b.gas_limit = 100_000_000;
        })
        .with_db(db)
        .build_mainnet()
}

fn run<DB: Database + DatabaseCommit>(db: DB, txs: &[TxEnv]) -> Vec<ExecutionResult>
where
    DB::Error: std::fmt::Debug,
{
    let mut evm = evm1(db);
    let results: Vec<ExecutionResult> = txs
        .iter()
        .map(|t| evm.transact_commit(t.clone()).unwrap())
        .collect();
    assert!(
        results.iter().all(ExecutionResult::is_success),
        "{results:?}"
    );
    results
}

fn memory_state() -> MemoryState {
    let mut state = MemoryState::new(4).unwrap();
    let pre = pre_state();
    state
        .import_accounts(pre.iter().map(|(a, s)| (a, s)), 0)
        .unwrap();
    state
}

/// The reference: revm's own in-memory database with the same pre-state.
fn reference() -> CacheDB<EmptyDB> {
    let mut db = CacheDB::<EmptyDB>::default();
    for (a, s) in pre_state() {
        let mut info = AccountInfo::default()
            .with_balance(s.balance)
            .with_nonce(s.nonce);
        if !s.code.is_empty() {
            info = info.with_code(Bytecode::new_raw(s.code.clone().into()));
        }
        db.insert_account_info(a, info);
        for (k, v) in &s.storage {
            db.insert_account_storage(a, *k, *v).unwrap();
        }
    }
    db
}

/// What block 1 must leave, read through any revm database.
fn check_block1<DB: DatabaseRef>(db: &DB, results: &[ExecutionResult])
where
    DB::Error: std::fmt::Debug,
{
    let gas: Vec<u128> = results.iter().map(|r| r.tx_gas_used() as u128).collect();
    let deployed = ALICE.create(2);
    let bob = db.basic_ref(BOB).unwrap().unwrap();
    assert_eq!(bob.balance, U256::from(6 * ETHER - gas[3] * GAS_PRICE));
    assert_eq!(bob.nonce, 1);
    let alice = db.basic_ref(ALICE).unwrap().unwrap();
    assert_eq!(
        alice.balance,
        U256::from(99 * ETHER - 3 - (gas[0] + gas[1] + gas[2]) * GAS_PRICE)
    );
    let store = db.basic_ref(STORE).unwrap().unwrap();
    assert_eq!(store.balance, U256::from(4));
    assert_eq!(store.code_hash, keccak256(runtime()));
    assert_eq!(alice.nonce, 3);
    let tip = GAS_PRICE - u128::from(BASEFEE);
    assert_eq!(
        db.basic_ref(COINBASE).unwrap().unwrap().balance,
        U256::from(gas.iter().sum::<u128>() * tip)
    );
    assert_eq!(
        db.storage_ref(STORE, U256::from(0)).unwrap(),
        U256::from(42)
    );
    assert_eq!(db.storage_ref(STORE, U256::from(1)).unwrap(), U256::from(8));
    assert_eq!(
        db.storage_ref(STORE, U256::from(300)).unwrap(),
        U256::from(9)
    );
    let d = db.basic_ref(deployed).unwrap().unwrap();
    assert_eq!(d.code_hash, keccak256(runtime()));
    assert_eq!(
        db.code_by_hash_ref(d.code_hash).unwrap().original_bytes(),
        Bytes::from(runtime())
    );
    assert_eq!(
        db.storage_ref(deployed, U256::from(0)).unwrap(),
        U256::from(5)
    );
    assert_eq!(
        db.storage_ref(deployed, U256::from(1)).unwrap(),
        U256::from(1)
    );
}

/// Runs `txs` through revm's `State` with bundle tracking over `db`; returns the results and
/// the bundle.
fn run_with_bundle<DB: DatabaseRef>(db: DB, txs: &[TxEnv]) -> (Vec<ExecutionResult>, BundleState)
where
    DB::Error: std::fmt::Debug,
{
    let mut state = State::builder()
        .with_database_ref(db)
        .with_bundle_update()
        .build();
    let results = run(&mut state, txs);
    state.merge_transitions(BundleRetention::Reverts);
    (results, state.take_bundle())
}

/// The same block through a `BlockDb` over the memory state: its tree writes.
fn block_db_changes(state: &MemoryState, txs: &[TxEnv]) -> BlockChanges {
    let mut db = state.block_db(BlockDbOptions::default()).unwrap();
    run(&mut db, txs);
    db.into_changes().unwrap()
}

fn sorted(mut c: BlockChanges) -> Vec<(TreeKey, [u8; 32])> {
    bintrie_trie::sort_dedup_last(&mut c.writes);
    c.writes
}

#[test]
fn trie_db_inside_revm_cache_db() {
    let state = memory_state();
    let db = state.trie_db();
    let mut cache = CacheDB::new(WrapDatabaseRef(&db));
    let results = run(&mut cache, &block1());
    check_block1(&cache, &results);
    // The CacheDB kept the changes; the snapshot under it still holds block 0.
    assert_eq!(db.storage_ref(STORE, U256::from(1)).unwrap(), U256::from(7));
    assert_eq!(
        db.basic_ref(BOB).unwrap().unwrap().balance,
        U256::from(5 * ETHER)
    );
    assert!(db.basic_ref(ALICE.create(2)).unwrap().is_none());
    let (stems, _) = db.reads();
    assert!(stems > 0, "CacheDB read through the TrieDb");
}

#[test]
fn trie_db_inside_revm_state_with_bundle_tracking() {
    let state = memory_state();
    let db = state.trie_db();
    let (results, bundle) = run_with_bundle(&db, &block1());
    // The bundle records block 1's changes against block 0.
    let bob = bundle.account(&BOB).unwrap();
    assert_eq!(
        bob.original_info.as_ref().unwrap().balance,
        U256::from(5 * ETHER)
    );
    let gas_bob = results[3].tx_gas_used() as u128;
    assert_eq!(
        bob.info.as_ref().unwrap().balance,
        U256::from(6 * ETHER - gas_bob * GAS_PRICE)
    );
    let slot = &bundle.account(&STORE).unwrap().storage[&U256::from(1)];
    assert_eq!(
        (slot.previous_or_original_value, slot.present_value),
        (U256::from(7), U256::from(8))
    );
    assert!(bundle.bytecode(&keccak256(runtime())).is_some());

    // Commit the bundle's writes: every value reads back through a fresh TrieDb.
    let mut state = state;
    let changes = db.bundle_changes(&bundle).unwrap();
    state.commit_block(changes, 1).unwrap();
    check_block1(&state.trie_db(), &results);
}

/// Bundle path and `BlockDb` path: the same writes, the same root, which is the scratch root of
/// revm's own post-state; the root without committing is the committed root, and computing it
/// changes nothing.
#[test]
fn bundle_and_block_db_give_the_same_root_in_memory() {
    let mut state = memory_state();
    let mut reference = reference();
    assert_eq!(state.root(), scratch_root(&reference), "pre-state root");
    for (number, txs) in [(1, block1()), (2, block2())] {
        let db = state.trie_db();
        let (_, bundle) = run_with_bundle(&db, &txs);
        let from_bundle = db.bundle_changes(&bundle).unwrap();
        let from_block_db = block_db_changes(&state, &txs);
        assert_eq!(from_bundle.accounts_written, from_block_db.accounts_written);
        assert_eq!(from_bundle.slots_written, from_block_db.slots_written);
        let mut code_a = from_bundle.code.clone();
        let mut code_b = from_block_db.code.clone();
        code_a.sort();
        code_b.sort();
        assert_eq!(code_a, code_b);
        assert_eq!(sorted(from_bundle.clone()), sorted(from_block_db.clone()));

        let before = state.root();
        let simulated = state.root_with(&from_bundle).unwrap();
        assert_ne!(simulated, before);
        assert_eq!(simulated, state.root_with(&from_block_db).unwrap());
        assert_eq!(state.root(), before, "root_with commits nothing");
        assert_eq!(state.block(), number - 1);

        let committed = state.commit_block(from_block_db, number).unwrap().root;
        assert_eq!(committed, simulated);
        run(&mut reference, &txs);
        if number == 1 {
            assert_eq!(committed, scratch_root(&reference), "root after block 1");
        }
    }
    // Block 2 cleared STORE's slot 0: a present zero leaf (geth's semantics), so the root is
    // not the scratch root (which leaves zero slots out) but the scratch root plus that leaf.
    let key = storage_slot_key(&STORE, &U256::from(0));
    assert_eq!(state.get(&key), Some([0; 32]));
    assert_ne!(state.root(), scratch_root(&reference));
}

/// The block pipeline over memory: a block whose execution fails commits nothing; a block that
/// runs commits exactly the writes a plain block database gives.
#[test]
fn the_pipeline_runs_over_memory_and_commits_nothing_on_error() {
    let mut state = memory_state();
    let (root0, block0) = (state.root(), state.block());
    let plan = BlockPlan {
        number: 1,
        ..Default::default()
    };
    let failed = state.run_block(&plan, &PipelineOptions::default(), |db| {
        run(db, &block1());
        Err::<(), _>(std::fmt::Error)
    });
    assert!(matches!(failed, Err(PipelineError::Execute(_))));
    assert_eq!((state.root(), state.block()), (root0, block0));

    let expected = state
        .root_with(&block_db_changes(&state, &block1()))
        .unwrap();
    let ran = state
        .run_block(&plan, &PipelineOptions::default(), |db| {
            Ok::<_, std::convert::Infallible>(run(db, &block1()))
        })
        .unwrap();
    assert_eq!(ran.output.len(), block1().len());
    assert_eq!(
        (ran.commit.root, state.root(), state.block()),
        (expected, expected, 1)
    );
    assert!(ran.writes.slots > 0 && ran.commit.stats.blobs > 0);
}

/// Runs block 1 on `state` through the pipeline with its witness built; returns the witness
/// and the committed root.
fn block1_with_witness<S: BlockState>(state: &mut S) -> (Witnesses, alloy_primitives::B256) {
    let plan = BlockPlan {
        number: 1,
        ..Default::default()
    };
    let options = PipelineOptions::default()
        .with_witness(true)
        .with_workers(2);
    let ran = state
        .run_block(&plan, &options, |db| {
            Ok::<_, std::convert::Infallible>(run(db, &block1()))
        })
        .unwrap();
    (ran.witness.unwrap(), ran.commit.root)
}

/// Runs `txs` as block 1 on a stateless state built from the witness file `bytes`: the
/// post-state root, or the first error (decoding, proving, executing, committing).
fn run_stateless(bytes: &[u8], txs: &[TxEnv]) -> Result<alloy_primitives::B256, String> {
    let witness = BlockWitness::decode(bytes).map_err(|e| e.to_string())?;
    let mut state = StatelessState::from_witness(witness).map_err(|e| e.to_string())?;
    let plan = BlockPlan {
        number: 1,
        ..Default::default()
    };
    let ran = state
        .run_block(&plan, &PipelineOptions::default(), |db| {
            let mut evm = evm1(db);
            for t in txs {
                let r = evm
                    .transact_commit(t.clone())
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                if !r.is_success() {
                    return Err(std::io::Error::other(format!("{r:?}")));
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(ran.commit.root)
}

/// Stateless execution: block 1's witness, in either encoding, written out and read back,
/// runs block 1 with no state and gives the stateful root; a block that needs more than the
/// witness holds says where the witness is incomplete; every flipped byte of either file is
/// refused or changes nothing (the same root).
#[test]
fn blocks_run_stateless_from_either_witness() {
    let mut state = memory_state();
    let pre_root = state.root();
    let (witnesses, root) = block1_with_witness(&mut state);
    assert!(witnesses.keys > 0 && witnesses.stems > 0);
    // An address whose walk leaves both witnesses (the pre-state is tiny: most addresses end
    // at a stem or an empty subtree the witness holds).
    let trees: Vec<bintrie_trie::PartialTree> = [&witnesses.multiproof, &witnesses.blobs]
        .iter()
        .map(|w| match &w.nodes {
            WitnessNodes::Multiproof(t) => t.clone(),
            WitnessNodes::Blobs(b) => {
                bintrie_trie::PartialTree::from_blobs(pre_root.0, w.group_depth, b.clone()).unwrap()
            }
        })
        .collect();
    let carol = (1u64..)
        .map(|i| Address::left_padding_from(&i.to_be_bytes()))
        .find(|a| {
            let key = bintrie_keys::basic_data_key(a);
            trees.iter().all(|t| t.get(&key).is_err())
        })
        .unwrap();
    for encoding in [WitnessEncoding::Multiproof, WitnessEncoding::Blobs] {
        let w = witnesses.get(encoding);
        assert_eq!(w.pre_root, pre_root);
        assert_eq!(
            w.codes.len(),
            1,
            "STORE's code (the deployed one is the block's own)"
        );
        let bytes = w.encode();
        assert_eq!(bytes.len() as u64, w.bytes().total, "{encoding:?}");
        assert_eq!(run_stateless(&bytes, &block1()), Ok(root), "{encoding:?}");
        let more = [block1(), vec![tx(BOB, 1, Some(carol), 1, Bytes::new())]].concat();
        let e = run_stateless(&bytes, &more).unwrap_err();
        assert!(
            e.contains("witness incomplete at path"),
            "{encoding:?}: {e}"
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            if let Ok(other) = run_stateless(&bad, &block1()) {
                assert_eq!(other, root, "{encoding:?}: byte {i} changed the root");
            }
        }
    }
    // A witness of STORE's slot 0 alone holds STORE's header stem, but slot 1's leaf (present,
    // beside it) only by hash: TrieDb reads slot 0 and refuses slot 1 instead of reading zero.
    let slot0 = storage_slot_key(&STORE, &U256::from(0));
    let w = memory_state().witness(1, &[slot0], &[]).unwrap();
    let stateless = StatelessState::from_witness(w.multiproof).unwrap();
    let db = TrieDb::open(&stateless.backend()).unwrap();
    let full = memory_state().trie_db();
    assert_eq!(
        db.storage_ref(STORE, U256::from(0)).unwrap(),
        full.storage_ref(STORE, U256::from(0)).unwrap()
    );
    assert_ne!(full.storage_ref(STORE, U256::from(1)).unwrap(), U256::ZERO);
    let e = db.storage_ref(STORE, U256::from(1)).unwrap_err();
    assert!(e.to_string().contains("leaf 65 of stem"), "{e}");
    let m = witnesses.multiproof.bytes();
    let b = witnesses.blobs.bytes();
    assert!(m.total < b.total, "multiproof {m:?} vs blobs {b:?}");
    assert_eq!(m.code, b.code);
}

/// A prefetch is a guess (an access list may name what a block never reads): a stateless
/// run whose prefetch lists what the witness does not hold runs as it would without the
/// prefetch, and only a read execution itself makes of it fails. Here execution reads STORE's
/// account but never runs its code (as a block paying a contract coinbase does), so the
/// witness holds STORE's header stem and not its code; the list also names an account the
/// block never reads, whose stem the witness does not hold.
#[test]
fn a_stateless_prefetch_of_what_the_witness_does_not_hold_is_no_error() {
    let mut state = memory_state();
    let store_code = keccak256(runtime());
    let plan = BlockPlan {
        number: 1,
        ..Default::default()
    };
    fn read_store<D: Database>(db: &mut D) -> Result<(), D::Error> {
        let code_hash = db.basic(STORE)?.map(|a| a.code_hash);
        assert_eq!(code_hash, Some(keccak256(runtime())));
        Ok(())
    }
    let ran = state
        .run_block(
            &plan,
            &PipelineOptions::default().with_witness(true),
            read_store,
        )
        .unwrap();
    let root = ran.commit.root;
    let w = ran.witness.unwrap();
    // An account the block never reads, whose walk leaves both witnesses.
    let held: Vec<StatelessState> = [&w.multiproof, &w.blobs]
        .map(|w| StatelessState::from_witness(w.clone()).unwrap())
        .into();
    let unread = (1u64..)
        .map(|i| Address::left_padding_from(&i.to_be_bytes()))
        .find(|a| {
            held.iter()
                .all(|s| TrieDb::open(&s.backend()).unwrap().basic_ref(*a).is_err())
        })
        .unwrap();
    for witness in [w.multiproof, w.blobs] {
        assert!(witness.codes.is_empty(), "STORE's code never ran");
        let mut list = bintrie_revm::PrefetchList::new();
        list.account(STORE)
            .account(unread)
            .slot(unread, U256::from(7));
        let plan = BlockPlan {
            number: 1,
            prefetch: Some(list),
            ..Default::default()
        };
        let mut stateless = StatelessState::from_witness(witness.clone()).unwrap();
        let ran = stateless
            .run_block(&plan, &PipelineOptions::default(), |db| read_store(db))
            .unwrap();
        assert_eq!(ran.commit.root, root);
        // What the witness does not hold still fails when execution reads it.
        let mut stateless = StatelessState::from_witness(witness).unwrap();
        let err = stateless
            .run_block(&plan, &PipelineOptions::default(), |db| {
                db.code_by_hash(store_code).map(|_| ())
            })
            .unwrap_err();
        assert!(err.to_string().contains("not in the witness"), "{err}");
        let err = stateless
            .run_block(&plan, &PipelineOptions::default(), |db| {
                db.basic(unread).map(|_| ())
            })
            .unwrap_err();
        assert!(err.to_string().contains("witness incomplete"), "{err}");
    }
}

/// A snapshot keeps the state it was opened at while the state commits (copy-on-write), and a
/// `'static` `TrieDb` answers from another thread.
#[test]
fn memory_snapshots_are_isolated_and_shareable() {
    let mut state = memory_state();
    let old: Arc<TrieDb<MemorySnapshot>> = Arc::new(state.trie_db());
    let changes = block_db_changes(&state, &block1());
    state.commit_block(changes, 1).unwrap();
    let reader = Arc::clone(&old);
    let slot = std::thread::spawn(move || reader.storage_ref(STORE, U256::from(1)).unwrap())
        .join()
        .unwrap();
    assert_eq!(slot, U256::from(7), "the old snapshot still holds block 0");
    assert_eq!(
        state.trie_db().storage_ref(STORE, U256::from(1)).unwrap(),
        U256::from(8)
    );
}

/// Commits 5, 3 (refused: below 5, nothing applied), 5 again and 6 on `state`; returns the
/// roots after each accepted commit.
fn commits_in_order<S: BlockState>(state: &mut S) -> Vec<alloy_primitives::B256> {
    let changes = |n: u64| {
        let acct = AccountState {
            balance: U256::from(n),
            ..Default::default()
        };
        BlockChanges::from_accounts([(&BOB, &acct)]).unwrap()
    };
    let mut roots = vec![state.commit_block(changes(5), 5).unwrap().root];
    let err = state.commit_block(changes(3), 3).unwrap_err();
    assert!(
        matches!(
            err,
            bintrie_revm::StateError::BlockOrder { block: 3, last: 5 }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "block 3 is below the last committed block 5"
    );
    assert_eq!(
        (state.block(), state.root()),
        (5, roots[0]),
        "nothing applied"
    );
    roots.push(state.commit_block(changes(55), 5).unwrap().root);
    roots.push(state.commit_block(changes(6), 6).unwrap().root);
    assert_eq!(state.block(), 6);
    roots
}

/// Every backend takes block numbers the same way: one may repeat, none may go below the last
/// (the log refused that first; memory and MDBX took it, and their roots then differed from
/// the log's for the same calls).
#[test]
fn every_backend_refuses_a_block_below_the_last_and_gives_the_same_roots() {
    let memory = commits_in_order(&mut memory_state());
    assert_eq!(memory.len(), 3);
    #[cfg(feature = "mdbx")]
    {
        let dir = tempfile::tempdir().unwrap();
        let mdbx = commits_in_order(&mut mdbx::open(dir.path()));
        assert_eq!(mdbx, memory);
    }
    #[cfg(feature = "logstore")]
    {
        let dir = tempfile::tempdir().unwrap();
        let mut log =
            bintrie_revm::LogState::open(dir.path(), &bintrie_logstore::LogOptions::default())
                .unwrap();
        let pre = pre_state();
        let changes = BlockChanges::from_accounts(pre.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes, 0).unwrap();
        assert_eq!(commits_in_order(&mut log), memory);
    }
}

/// A stateless state built from block 5's witness holds block 4 (the witness's pre-state):
/// block 3 is refused, by its commit and by the pipeline before the block runs; block 5 is
/// taken. A pipeline run below a state's last block is refused before it executes.
#[test]
fn a_stateless_state_and_the_pipeline_refuse_a_block_below_the_last() {
    let mut state = memory_state();
    state.commit_block(BlockChanges::default(), 4).unwrap();
    let plan = |number| BlockPlan {
        number,
        ..Default::default()
    };
    let options = PipelineOptions::default().with_witness(true);
    let mut executed = false;
    let err = state
        .run_block(&plan(3), &options, |_| {
            executed = true;
            Ok::<_, std::convert::Infallible>(())
        })
        .unwrap_err();
    assert!(!executed, "refused before it ran");
    assert!(
        matches!(
            err,
            PipelineError::State(bintrie_revm::StateError::BlockOrder { block: 3, last: 4 })
        ),
        "{err}"
    );
    let ran = state
        .run_block(&plan(5), &options, |db| {
            Ok::<_, std::convert::Infallible>(run(db, &block1()))
        })
        .unwrap();
    let witness = ran.witness.unwrap().multiproof;
    assert_eq!(witness.block, 5);
    let mut stateless = StatelessState::from_witness(witness).unwrap();
    assert_eq!(stateless.block(), 4);
    let err = stateless
        .commit_block(BlockChanges::default(), 3)
        .unwrap_err();
    assert!(
        matches!(
            err,
            bintrie_revm::StateError::BlockOrder { block: 3, last: 4 }
        ),
        "{err}"
    );
    let err = stateless
        .run_block(&plan(3), &PipelineOptions::default(), |_| {
            Ok::<_, std::convert::Infallible>(())
        })
        .unwrap_err();
    assert!(matches!(err, PipelineError::State(_)), "{err}");
    assert_eq!(stateless.block(), 4);
    stateless.commit_block(BlockChanges::default(), 5).unwrap();
    assert_eq!(stateless.block(), 5);
}

#[cfg(feature = "mdbx")]
mod mdbx {
    use super::*;
    use bintrie_revm::BinTrieState;
    use bintrie_store::{Durability, ReadPath, StoreOptions};

    pub(super) fn open(dir: &std::path::Path) -> BinTrieState {
        let mut state = BinTrieState::open(
            dir,
            &StoreOptions {
                group_depth: Some(5),
                durability: Durability::Relaxed,
                ..Default::default()
            },
        )
        .unwrap();
        let pre = pre_state();
        state
            .import_accounts(pre.iter().map(|(a, s)| (a, s)), 0)
            .unwrap();
        state
    }

    /// Over MDBX: revm's `CacheDB` over a `TrieDb` sees the stored state; the bundle's root
    /// without committing equals the root `run_block` commits for the same transactions (the
    /// `BlockDb` path), which equals the in-memory backend's root, for both read paths.
    #[test]
    fn bundle_and_block_db_give_the_same_root_over_mdbx() {
        let mut memory = memory_state();
        let memory_root = memory
            .commit_block(block_db_changes(&memory, &block1()), 1)
            .unwrap()
            .root;
        for read_path in [ReadPath::Flat, ReadPath::TrieWalk] {
            let dir = tempfile::tempdir().unwrap();
            let mut state = open(dir.path());
            assert_eq!(state.root(), memory_state().root(), "same pre-state root");
            let before = state.root();

            let db = TrieDb::new(state.store(), read_path).unwrap();
            let mut cache = CacheDB::new(WrapDatabaseRef(&db));
            let results = run(&mut cache, &block1());
            check_block1(&cache, &results);

            let (_, bundle) = run_with_bundle(&db, &block1());
            let from_bundle = db.bundle_changes(&bundle).unwrap();
            let simulated = state.root_with(&from_bundle).unwrap();
            drop(db);
            assert_eq!(state.root(), before, "root_with commits nothing");
            assert_eq!(state.block(), 0);

            let plan = BlockPlan {
                number: 1,
                ..Default::default()
            };
            let options = PipelineOptions::default()
                .with_db(BlockDbOptions::default().with_read_path(read_path))
                .with_workers(2);
            let block = state
                .run_block(&plan, &options, |db| {
                    run(db, &block1());
                    Ok::<_, std::convert::Infallible>(())
                })
                .unwrap();
            assert_eq!(block.commit.root, simulated);
            assert_eq!(block.commit.root, memory_root);
            let committed = TrieDb::new(state.store(), read_path).unwrap();
            check_block1(&committed, &results);
        }
    }

    /// One block's reads never mix two blocks: a `BlockDb` opened over a store handle before
    /// another writer committed fails its prefetch (whose workers open snapshots of their own)
    /// instead of caching the newer block's values beside the older block's, and a `BlockDb`
    /// over a handle another writer moved past is refused at once, as is a `TrieDb`.
    #[test]
    fn an_mdbx_block_db_never_reads_past_the_block_its_handle_holds() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = open(dir.path());
        let stale = state.store().clone();
        let mut early = bintrie_revm::BlockDb::new(&stale, BlockDbOptions::default()).unwrap();
        let before = early.basic(STORE).unwrap().map(|a| a.balance);
        assert_eq!(before, Some(U256::from(1)));

        let moved = AccountState {
            balance: U256::from(999),
            storage: vec![(U256::from(1), U256::from(2))],
            ..pre_state()[2].1.clone()
        };
        state.import_accounts([(&STORE, &moved)], 1).unwrap();

        let mut list = bintrie_revm::PrefetchList::new();
        list.slot(STORE, U256::from(1)).account(BOB);
        let err = early.prefetch(&list, 2).unwrap_err().to_string();
        assert!(err.contains("moved on under this handle"), "{err}");
        // What it had read stays the block it started on.
        assert_eq!(early.storage(STORE, U256::from(1)).unwrap(), U256::from(7));

        let err = bintrie_revm::BlockDb::new(&stale, BlockDbOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("it is at block 1") && err.contains("reads block 0"),
            "{err}"
        );
        assert!(TrieDb::new(&stale, ReadPath::Flat).is_err());
        // The writer's own handle reads its block.
        let mut db = state.block_db(BlockDbOptions::default()).unwrap();
        db.prefetch(&list, 2).unwrap();
        assert_eq!(db.storage(STORE, U256::from(1)).unwrap(), U256::from(2));
        assert_eq!(
            db.basic(STORE).unwrap().map(|a| a.balance),
            Some(U256::from(999))
        );
    }

    /// The witness of an MDBX state (blobs read back from the store) runs stateless to the
    /// same root; its multiproof is the in-memory state's, byte for byte (the tree is the same;
    /// only the blobs depend on the group depth).
    #[test]
    fn mdbx_witnesses_run_stateless() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = open(dir.path());
        let (witnesses, root) = block1_with_witness(&mut state);
        let (in_memory, memory_root) = block1_with_witness(&mut memory_state());
        assert_eq!(root, memory_root);
        let mut same_depth = witnesses.multiproof.clone();
        same_depth.group_depth = in_memory.multiproof.group_depth;
        assert_eq!(same_depth.encode(), in_memory.multiproof.encode());
        for encoding in [WitnessEncoding::Multiproof, WitnessEncoding::Blobs] {
            let bytes = witnesses.get(encoding).encode();
            assert_eq!(run_stateless(&bytes, &block1()), Ok(root), "{encoding:?}");
        }
    }

    /// A block whose commit fails (the map is full) leaves nothing behind, in the database nor
    /// in the state's trie: the next block commits the root of the blocks that did commit,
    /// not one that also holds the failed block's writes.
    #[test]
    fn a_failed_mdbx_commit_leaves_nothing_for_the_next_block() {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let mut state = BinTrieState::open(
            dir.path(),
            &StoreOptions {
                group_depth: Some(4),
                durability: Durability::Relaxed,
                max_size: Some(1 << 20),
                growth_step: Some(1 << 16),
                ..Default::default()
            },
        )
        .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut writes = |n: usize| -> Vec<(TreeKey, [u8; 32])> {
            (0..n)
                .map(|_| (TreeKey::new(rng.random(), rng.random()), rng.random()))
                .collect()
        };
        let (first, huge, last) = (writes(100), writes(50_000), writes(100));
        state.import_entries(first.clone(), vec![], 1).unwrap();
        let err = state.import_entries(huge, vec![], 2).unwrap_err();
        assert!(err.to_string().to_lowercase().contains("full"), "{err}");
        let root = state.import_entries(last.clone(), vec![], 2).unwrap().root;
        let mut reference = bintrie_trie::Trie::<bintrie_trie::MemoryStore>::new(
            bintrie_trie::MemoryStore::new(),
            4,
        )
        .unwrap();
        reference.update([first, last].concat()).unwrap();
        assert_eq!(
            root.0,
            reference.root(),
            "the failed block's writes reached block 2"
        );
    }
}
