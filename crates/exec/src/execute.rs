//! Importing a fixture's pre-state and executing its block through the pipeline.

use crate::ChainSpec;
use crate::ExecError;
use crate::fixture::Fixture;
use alloy_consensus::ReceiptEnvelope;
use alloy_consensus::Transaction as _;
use alloy_consensus::transaction::Recovered;
use alloy_consensus::{Header, TxEnvelope};
use alloy_eips::eip4895::Withdrawal;
use alloy_evm::block::{
    BlockExecutionError, BlockExecutionResult, BlockExecutor, BlockExecutorFactory,
};
use alloy_evm::eth::receipt_builder::AlloyReceiptBuilder;
use alloy_evm::eth::{EthBlockExecutionCtx, EthBlockExecutorFactory};
use alloy_evm::{EthEvmFactory, EvmEnv, EvmFactory};
use alloy_primitives::{Address, B256, U256};
use bintrie_keys::{AccountState, BasicData, basic_data_key, code_hash_key, storage_slot_key};
use bintrie_revm::{
    BlockChanges, BlockPlan, BlockRun, BlockState, PipelineError, PipelineOptions, PrefetchList,
};
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// What [`execute_block`] prefetches before executing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prefetch {
    /// Nothing: every key is read when execution first asks for it.
    None,
    /// What the transactions name: senders, recipients, EIP-2930 lists, coinbase, withdrawal
    /// recipients, the system contracts.
    Transactions,
    /// That, and the fixture's record of every key the block touches (an EIP-7928 block
    /// access list).
    #[default]
    BlockAccessList,
}

/// How [`execute_block`] runs a block.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct ExecOptions {
    /// Cache, read path and workers of the pipeline.
    pub pipeline: PipelineOptions,
    /// What the state prefetch reads. No trie prefetch runs during execution: the pipeline
    /// loads the paths of the stems the block wrote, in parallel, after it.
    pub prefetch: Prefetch,
}

impl ExecOptions {
    /// With these pipeline options.
    pub fn with_pipeline(mut self, pipeline: PipelineOptions) -> Self {
        self.pipeline = pipeline;
        self
    }

    /// With this prefetch.
    pub fn with_prefetch(mut self, prefetch: Prefetch) -> Self {
        self.prefetch = prefetch;
        self
    }
}

/// What importing the pre-state did.
#[derive(Clone, Copy, Debug)]
pub struct PreStateImport {
    /// Accounts imported.
    pub accounts: usize,
    /// Of those, accounts imported with their code hash but without code (the fixture lacks
    /// it).
    pub without_code: usize,
    /// The root after the import.
    pub root: B256,
    /// Wall time of the import.
    pub time: Duration,
}

/// Imports the fixture's pre-state into an empty `state` as the block before the fixture's, in
/// one commit (a failure leaves the state where it was): whole accounts
/// ([`BlockChanges::from_accounts`]), and the accounts whose code the fixture lacks as header
/// leaves with their real code hash (code size 0: unknown) and no code.
pub fn import_pre_state<S: BlockState>(
    state: &mut S,
    fx: &Fixture,
) -> Result<PreStateImport, ExecError> {
    import_pre_state_over(state, fx, (0, B256::ZERO))
}

/// [`import_pre_state`] on top of a base state: `state` must be exactly at `base` (block,
/// root), e.g. a database of random stems that gives the fixture's few accounts a realistic
/// B-tree around them, and the base's block must be below the fixture's parent. The base's
/// keys must not overlap the fixture's (random stems do not, but nothing checks it).
pub fn import_pre_state_over<S: BlockState>(
    state: &mut S,
    fx: &Fixture,
    base: (u64, B256),
) -> Result<PreStateImport, ExecError> {
    let block = fx.parent()?;
    if (state.block(), state.root()) != base {
        return Err(ExecError::Unsupported(format!(
            "the database holds block {} (root {}), not {}: the pre-state is imported into {}",
            state.block(),
            state.root(),
            if base.0 == 0 {
                "an empty database".to_string()
            } else {
                format!("block {} (root {})", base.0, base.1)
            },
            if base.0 == 0 {
                "an empty database"
            } else {
                "the base it was built on"
            },
        )));
    }
    if base.0 >= block {
        return Err(ExecError::Unsupported(format!(
            "the base is block {}, not below the fixture's parent block {block}",
            base.0
        )));
    }
    let t = Instant::now();
    let full: Vec<(&Address, &AccountState)> = fx
        .pre
        .iter()
        .filter(|(_, p)| p.code_hash_only.is_none())
        .map(|(a, p)| (a, &p.state))
        .collect();
    // One commit: a database must never hold the parent block with part of its pre-state.
    let mut changes = BlockChanges::from_accounts(full)?;
    let mut without_code = 0;
    for (a, p) in &fx.pre {
        let Some(hash) = p.code_hash_only else {
            continue;
        };
        let basic = BasicData {
            version: 0,
            code_size: 0,
            nonce: p.state.nonce,
            balance: p.state.balance,
        }
        .encode()
        .map_err(|e| ExecError::Fixture(format!("pre-state account {a}: {e}")))?;
        changes.writes.push((basic_data_key(a), basic));
        changes.writes.push((code_hash_key(a), hash.0));
        for (k, v) in &p.state.storage {
            changes
                .writes
                .push((storage_slot_key(a, k), v.to_be_bytes::<32>()));
        }
        changes.accounts_written += 1;
        changes.slots_written += p.state.storage.len();
        without_code += 1;
    }
    state.commit_block(changes, block)?;
    Ok(PreStateImport {
        accounts: fx.pre.len(),
        without_code,
        root: state.root(),
        time: t.elapsed(),
    })
}

/// The keys to read before executing: senders, recipients, EIP-2930 lists, coinbase, withdrawal
/// recipients, the system contracts and (with [`Prefetch::BlockAccessList`]) the fixture's
/// record of the keys the block touches. Empty for [`Prefetch::None`].
pub fn prefetch_list(fx: &Fixture, prefetch: Prefetch) -> PrefetchList {
    if prefetch == Prefetch::None {
        return PrefetchList::new();
    }
    // The coinbase, and the caller of the system calls (EIP-4788 and later).
    let mut accounts = vec![
        fx.block.header.inner.beneficiary,
        alloy_eips::eip4788::SYSTEM_ADDRESS,
    ];
    let mut slots: Vec<(Address, B256)> = Vec::new();
    for tx in fx.block.transactions.txns() {
        accounts.push(tx.inner.signer());
        accounts.extend(tx.inner.to());
        if let Some(list) = tx.inner.access_list() {
            for item in list.iter() {
                accounts.push(item.address);
                slots.extend(item.storage_keys.iter().map(|k| (item.address, *k)));
            }
        }
    }
    if let Some(w) = &fx.block.withdrawals {
        accounts.extend(w.iter().map(|w| w.address));
    }
    if prefetch == Prefetch::BlockAccessList {
        for (a, keys) in &fx.access_list {
            accounts.push(*a);
            slots.extend(keys.iter().map(|k| (*a, *k)));
        }
    }
    let mut list = PrefetchList::new();
    list.system_contracts();
    for a in accounts {
        list.account(a);
    }
    for (a, k) in slots {
        list.slot(a, U256::from_be_bytes(k.0));
    }
    list
}

/// A block executed and committed.
#[derive(Debug)]
pub struct Executed {
    /// The fork the block ran under.
    pub spec: SpecId,
    /// The pipeline's account of it: alloy-evm's result (receipts, gas, requests), reads,
    /// writes, stage timings, the commit.
    pub run: BlockRun<BlockExecutionResult<ReceiptEnvelope>>,
}

/// Executes the fixture's block over `state` (holding its pre-state) with alloy-evm's Ethereum
/// block executor (system calls, withdrawals, the fixture chain's fork and blob parameters at
/// the block's timestamp) through the pipeline, and commits it. A block before the Merge is
/// refused ([`ExecError::Unsupported`]).
pub fn execute_block<S: BlockState>(
    state: &mut S,
    fx: &Fixture,
    options: &ExecOptions,
) -> Result<Executed, ExecError> {
    let number = fx.number();
    if fx.chain.is_pre_merge(number) {
        return Err(ExecError::Unsupported(format!(
            "block {number} runs before the Merge on this chain: the executor (alloy-evm) does \
             not apply proof-of-work rules (block rewards, uncles, difficulty)"
        )));
    }
    let header = &fx.block.header.inner;
    // Prefetch: the state the block reads. No trie prefetch during execution: the fixtures'
    // lists name every key a block touches without telling reads from writes, and walking the
    // tree paths of all of them competed with the state reads for the drive (4M-stem base,
    // cold: total 143-180 ms against 96-123 ms without it). The pipeline loads the paths of
    // the stems actually written in parallel after execution.
    let (prefetch, write_stems) = match options.prefetch {
        Prefetch::None => (None, Vec::new()),
        p => (Some(prefetch_list(fx, p)), Vec::new()),
    };
    let plan = BlockPlan {
        number,
        prefetch,
        write_stems,
        block_hashes: fx.block_hashes.iter().map(|(n, h)| (*n, *h)).collect(),
    };
    let block = EvmBlock {
        header,
        transactions: fx.block.transactions.txns().map(|tx| &tx.inner).collect(),
        withdrawals: fx.block.withdrawals.as_ref().map(|w| w.0.as_slice()),
    };
    let (spec, run) = run_evm_block(
        state,
        &fx.chain,
        &block,
        &plan,
        &options.pipeline,
        |_, _| Ok(()),
    )
    .map_err(|e| match e {
        bintrie_revm::PipelineError::State(e) => ExecError::State(e),
        bintrie_revm::PipelineError::Execute(e) => {
            let mut reason = e.to_string();
            if !fx.problems.is_empty() {
                reason.push_str(&format!(
                    " (the fixture is inconsistent: {})",
                    fx.problems.join("; ")
                ));
            }
            ExecError::Execution { number, reason }
        }
    })?;
    Ok(Executed {
        spec,
        run: BlockRun {
            output: run.output.0,
            reads: run.reads,
            writes: run.writes,
            timings: run.timings,
            commit: run.commit,
            witness: run.witness,
        },
    })
}

/// EIP-7002 and EIP-7251: a Prague block whose withdrawal or consolidation request contract
/// has no code when its end-of-block system call runs is invalid (alloy-evm 0.39 calls the
/// address and takes the empty output as "no requests"). Read from the block's state after
/// the calls, where the calls left those accounts cached.
fn request_contracts_have_code<B: bintrie_revm::StateBackend>(
    db: &mut bintrie_revm::BlockDb<B>,
) -> Result<(), Rejected> {
    use revm::Database as _;
    for (eip, what, address) in [
        (
            7002,
            "withdrawal",
            alloy_eips::eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS,
        ),
        (
            7251,
            "consolidation",
            alloy_eips::eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS,
        ),
    ] {
        let info = db.basic(address).map_err(|e| {
            Rejected::Check(format!(
                "reading the EIP-{eip} {what} request contract {address}: {e}"
            ))
        })?;
        if info.is_none_or(|i| i.code_hash == revm::primitives::KECCAK_EMPTY) {
            return Err(Rejected::Check(format!(
                "no code at the EIP-{eip} {what} request contract {address}: a Prague block is \
                 invalid without it"
            )));
        }
    }
    Ok(())
}

/// One block as alloy-evm's executor takes it.
pub(crate) struct EvmBlock<'a> {
    /// The header (the environment: number, timestamp, coinbase, fees, parent beacon root).
    pub(crate) header: &'a Header,
    /// The transactions, with their senders.
    pub(crate) transactions: Vec<&'a Recovered<TxEnvelope>>,
    /// The withdrawals (Shanghai on).
    pub(crate) withdrawals: Option<&'a [Withdrawal]>,
}

/// Why a block was refused inside the pipeline (so nothing was committed).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejected {
    /// alloy-evm refused it: an invalid transaction, a failed system call.
    #[error(transparent)]
    Execution(#[from] BlockExecutionError),
    /// It executed, but a check of its result failed.
    #[error("{0}")]
    Check(String),
}

/// What the block changed, as [`run_evm_block`]'s `check` sees it.
pub(crate) struct BlockEffects {
    /// Accounts changed: `(address, at block start, now)`; `None` is absent.
    pub(crate) accounts: Vec<(Address, Option<AccountInfo>, Option<AccountInfo>)>,
    /// Slots written: `(address, slot)`.
    pub(crate) slots: Vec<(Address, U256)>,
}

/// A block run by [`run_evm_block`]: alloy-evm's result and what the check returned.
pub(crate) type EvmBlockRun<T> = BlockRun<(BlockExecutionResult<ReceiptEnvelope>, T)>;

/// Runs `block` with alloy-evm's Ethereum block executor on `chain`'s rules through the
/// pipeline. `check` sees the result and can ask what the block changed, before anything is
/// committed;
/// an error from it (or from the executor) rejects the block and commits nothing.
pub(crate) fn run_evm_block<S: BlockState, T>(
    state: &mut S,
    chain: &ChainSpec,
    block: &EvmBlock<'_>,
    plan: &BlockPlan,
    options: &PipelineOptions,
    check: impl FnOnce(
        &BlockExecutionResult<ReceiptEnvelope>,
        &dyn Fn() -> BlockEffects,
    ) -> Result<T, String>,
) -> Result<(SpecId, EvmBlockRun<T>), PipelineError<Rejected>> {
    let header = block.header;
    let factory = EthBlockExecutorFactory::new(
        AlloyReceiptBuilder::default(),
        chain.clone(),
        EthEvmFactory::default(),
    );
    let env = EvmEnv::for_eth_block(
        header,
        factory.spec(),
        chain.chain_id,
        chain.blob_params(header.timestamp),
    );
    let spec = env.cfg_env.spec;
    let run = state.run_block(plan, options, |db| {
        let evm = factory.evm_factory().create_evm(&mut *db, env);
        let ctx = EthBlockExecutionCtx {
            parent_hash: header.parent_hash,
            parent_beacon_block_root: header.parent_beacon_block_root,
            ommers: &[],
            withdrawals: block.withdrawals.map(Cow::Borrowed),
            extra_data: header.extra_data.clone(),
            tx_count_hint: Some(block.transactions.len()),
            slot_number: header.slot_number,
        };
        let executor = factory.create_executor(evm, ctx);
        let result = executor.execute_block(block.transactions.iter().copied())?;
        if alloy_hardforks::EthereumHardforks::is_prague_active_at_timestamp(
            chain,
            header.timestamp,
        ) {
            request_contracts_have_code(db)?;
        }
        // Collected only when the check asks: `bintrie exec` does not.
        let db = &*db;
        let effects = || BlockEffects {
            accounts: db
                .account_changes()
                .map(|(a, o, c)| (a, o.cloned(), c.cloned()))
                .collect(),
            slots: db.slot_changes().map(|(a, k, _, _)| (a, k)).collect(),
        };
        let checked = check(&result, &effects).map_err(Rejected::Check)?;
        Ok::<_, Rejected>((result, checked))
    })?;
    Ok((spec, run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bintrie_revm::{BlockDb, BlockDbOptions, CommitReport, MemoryState, StateError};

    /// A memory state whose commits after the first fail (as a full disk would).
    struct FailsAfterFirst {
        inner: MemoryState,
        commits: usize,
    }

    impl BlockState for FailsAfterFirst {
        type Backend<'a> = <MemoryState as BlockState>::Backend<'a>;

        fn root(&self) -> B256 {
            self.inner.root()
        }
        fn block(&self) -> u64 {
            self.inner.block()
        }
        fn block_db(
            &self,
            options: BlockDbOptions,
        ) -> Result<BlockDb<Self::Backend<'_>>, StateError> {
            self.inner.block_db(options)
        }
        fn trie_prefetcher(&self) -> Option<&dyn bintrie_revm::TriePrefetcher> {
            self.inner.trie_prefetcher()
        }
        fn commit_block(
            &mut self,
            changes: BlockChanges,
            block: u64,
        ) -> Result<CommitReport, StateError> {
            self.commits += 1;
            if self.commits > 1 {
                return Err(StateError::Backend("no space left (planted)".into()));
            }
            self.inner.commit_block(changes, block)
        }
        fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
            self.inner.root_with(changes)
        }
        fn witness(
            &self,
            block: u64,
            keys: &[bintrie_keys::TreeKey],
            codes: &[B256],
        ) -> Result<bintrie_revm::Witnesses, StateError> {
            self.inner.witness(block, keys, codes)
        }
    }

    /// The pre-state is one commit, accounts with code and accounts with their code hash only
    /// together: it was two, both labelled the parent block, and a failure of the second (a
    /// full disk, a kill) left a database at the parent block with part of its pre-state (a
    /// hostile-user pass).
    #[test]
    fn the_pre_state_is_imported_in_one_commit() {
        let Some(dir) = crate::testing::mainnet_fixtures_dir() else {
            return;
        };
        let fx = crate::fixture::load(&dir.join("22188088-cancun.zkpi.json"), None).unwrap();
        assert!(fx.pre.values().any(|p| p.code_hash_only.is_some()));
        assert!(fx.pre.values().any(|p| p.code_hash_only.is_none()));
        let mut state = FailsAfterFirst {
            inner: MemoryState::new(5).unwrap(),
            commits: 0,
        };
        let import = import_pre_state(&mut state, &fx).unwrap();
        assert_eq!(state.commits, 1);
        assert_eq!(state.block(), fx.parent().unwrap());
        assert_eq!(import.root, state.root());
        assert!(import.without_code > 0 && import.without_code < import.accounts);
    }
}
