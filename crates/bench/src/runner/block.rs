//! One benchmark chain on one database: sizing the workloads, and measuring one cold block
//! through the pipeline.

use super::*;

/// The state a benchmark chain runs on, in one of the layouts.
pub(super) enum ChainState {
    /// MDBX.
    Mdbx(BinTrieState),
    /// The appending log.
    Log(LogState),
}

/// Runs `$body` with `$s` bound to the state, whichever layout it is in.
macro_rules! on_state {
    ($state:expr, $s:ident => $body:expr) => {
        match $state {
            ChainState::Mdbx($s) => $body,
            ChainState::Log($s) => $body,
        }
    };
}

impl ChainState {
    fn block(&self) -> u64 {
        on_state!(self, s => s.block())
    }
}

/// A built database and the state of the benchmark chain on it.
pub(super) struct Bench {
    dir: PathBuf,
    state: Option<ChainState>,
    /// The sender's next nonce.
    nonce: u64,
    /// Blocks measured so far on this database: makes per-run keys unique.
    seq: u64,
    rng: StdRng,
    holders: u64,
    /// Gas limit of every measured block.
    block_gas_limit: u64,
    /// Gas limit of the one benchmark transaction per block.
    tx_gas_limit: u64,
    /// [`StudyConfig::warm_branches`].
    warm_branches: bool,
}

impl Bench {
    pub(super) fn build(
        dir: &Path,
        g: u8,
        page_size: u32,
        config: &StudyConfig,
        memory_budget: usize,
        progress: &dyn Fn(u64),
    ) -> Result<(Bench, DatabaseInfo)> {
        let t = Instant::now();
        let store_options = StoreOptions {
            group_depth: Some(g),
            page_size: Some(page_size as usize),
            durability: config.durability,
            ..Default::default()
        };
        build_database(dir, &store_options, config, memory_budget, progress)?;
        // The build leaves the whole file in the page cache: drop it, so that the sizing runs
        // map only the pages they read (with the file cached, each page fault maps its
        // cached neighbours too: gigabytes of resident memory at 64M stems).
        evict_page_cache(dir).with_context(|| format!("evicting {}", dir.display()))?;
        let store_options = StoreOptions {
            buffer: buffer_options(config),
            ..store_options
        };
        let state = BinTrieState::open(dir, &store_options)
            .with_context(|| format!("reopening {}", dir.display()))?;
        Self::with_state(dir, ChainState::Mdbx(state), page_size, t.elapsed(), config)
    }

    /// The same state in the log layout, in `dir`: a bulk copy of this bench's MDBX database
    /// (every node blob and code entry, then its root and block), reopened (the scan that
    /// rebuilds the index) and evicted. With `reuse`, a log there that was copied from this
    /// database is cut back to the end the copy had ([`BASE_FILE`], written after each copy;
    /// the blocks earlier invocations ran on it are dropped) instead of copied again; it is
    /// used only when it then opens at this database's root and block, and copied again
    /// otherwise.
    pub(super) fn log_copy(
        &mut self,
        dir: &Path,
        page_size: u32,
        config: &StudyConfig,
        reuse: bool,
    ) -> Result<(Bench, DatabaseInfo)> {
        let Some(ChainState::Mdbx(mdbx)) = self.state.as_ref() else {
            bail!("a log copy is made from an MDBX database");
        };
        let src = mdbx.store();
        let meta = src.meta();
        let options = bintrie_logstore::LogOptions {
            group_depth: Some(meta.group_depth),
            durability: match config.durability {
                Durability::Durable => bintrie_logstore::Durability::Durable,
                _ => bintrie_logstore::Durability::Relaxed,
            },
            // What the MDBX layout's write buffer keeps, the log keeps too: the blobs of the
            // last `buffer_blocks` blocks (the buffer holds 0 to that many between flushes).
            recent_blocks: usize::try_from(config.buffer_blocks).unwrap_or(usize::MAX),
            pinned_bytes: config.log_pinned_mib.saturating_mul(1 << 20),
            ..Default::default()
        };
        let expected = bintrie_logstore::Meta {
            root: meta.root,
            block: meta.block,
            group_depth: meta.group_depth,
        };
        let t = Instant::now();
        let mut reused = reuse && rewind_to_base(dir, &expected)?;
        let rewound = t.elapsed();
        let mut copied = None;
        let state = loop {
            if !reused {
                super::remove_database_dir(dir)?;
                super::claim_database_dir(dir)?;
                copy_into_log(src, dir, &options)?;
                copied = Some(t.elapsed());
            }
            bintrie_logstore::evict_page_cache(dir)
                .with_context(|| format!("evicting {}", dir.display()))?;
            let t_open = Instant::now();
            let opened =
                LogState::open(dir, &options).with_context(|| format!("opening {}", dir.display()));
            // A cut-back log that does not open at the database's state (a record that lied,
            // a log changed by hand) is copied again; a fresh copy must.
            let state = match opened {
                Ok(state) if state.store().stored_meta() == expected => state,
                Ok(state) => {
                    let stored = state.store().stored_meta();
                    ensure!(
                        reused,
                        "{}: the copy opens at block {} root {}, not at the database's",
                        dir.display(),
                        stored.block,
                        B256::from(stored.root)
                    );
                    tracing::warn!(dir = %dir.display(), block = stored.block, "the cut-back log is not the database's state: copying it again");
                    reused = false;
                    continue;
                }
                Err(e) if reused => {
                    tracing::warn!(dir = %dir.display(), error = %format!("{e:#}"), "the cut-back log does not open: copying it again");
                    reused = false;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let store = state.store();
            if !reused {
                write_base(dir, store.end().as_ref())?;
            }
            tracing::info!(
                copy_s = copied.unwrap_or(rewound).as_secs_f64(),
                reused,
                open_s = t_open.elapsed().as_secs_f64(),
                info = ?store.info(),
                pinned_depth = ?store.pinned_depth(),
                "log layout ready"
            );
            break state;
        };
        // The copy's time, or the cut's when the copy was reused.
        let copy = copied.unwrap_or(rewound);
        Self::with_state(dir, ChainState::Log(state), page_size, copy, config)
    }

    pub(super) fn reopen(
        dir: &Path,
        g: u8,
        page_size: u32,
        config: &StudyConfig,
    ) -> Result<(Bench, DatabaseInfo)> {
        let store_options = StoreOptions {
            group_depth: Some(g),
            create: false,
            durability: config.durability,
            buffer: buffer_options(config),
            ..Default::default()
        };
        let state = BinTrieState::open(dir, &store_options)
            .with_context(|| format!("reopening {}", dir.display()))?;
        Self::with_state(
            dir,
            ChainState::Mdbx(state),
            page_size,
            Duration::ZERO,
            config,
        )
    }

    pub(super) fn with_state(
        dir: &Path,
        state: ChainState,
        page_size: u32,
        build: Duration,
        config: &StudyConfig,
    ) -> Result<(Bench, DatabaseInfo)> {
        let info = match &state {
            ChainState::Mdbx(state) => {
                let (nodes, stems, _) = state.store().counts()?;
                DatabaseInfo {
                    random_stems: config.stems,
                    page_size,
                    group_depth: state.store().meta().group_depth,
                    build_s: build.as_secs_f64(),
                    file_bytes: state.store().file_size()?,
                    nodes,
                    stems,
                    layout: Layout::Mdbx,
                    index_bytes: None,
                }
            }
            ChainState::Log(state) => {
                let i = state.store().info();
                DatabaseInfo {
                    random_stems: config.stems,
                    page_size,
                    group_depth: state.store().meta().group_depth,
                    build_s: build.as_secs_f64(),
                    file_bytes: i.log_bytes,
                    nodes: i.nodes,
                    stems: i.stems,
                    layout: Layout::Log,
                    index_bytes: Some(i.index_bytes),
                }
            }
        };
        let nonce = on_state!(&state, s => {
            let mut db = s.block_db(BlockDbOptions::default())?;
            revm::Database::basic(&mut db, SENDER)?
                .context("the database lacks the benchmark sender")?
                .nonce
        });
        // Per-block keys derive from the block number (a session makes far fewer than 10^6
        // transactions), so they stay fresh on a reused database.
        let seq = state.block() * 1_000_000;
        Ok((
            Bench {
                dir: dir.to_path_buf(),
                state: Some(state),
                nonce,
                seq,
                rng: StdRng::seed_from_u64(config.seed ^ 0x5eed ^ seq),
                holders: config.holders,
                block_gas_limit: config.block_gas_limit,
                tx_gas_limit: config.tx_gas_limit,
                warm_branches: config.warm_branches,
            },
            info,
        ))
    }

    pub(super) fn state(&mut self) -> &mut ChainState {
        self.state.as_mut().expect("state is open between blocks")
    }

    /// The layout this bench runs on.
    pub(super) fn layout(&self) -> Layout {
        match self.state {
            Some(ChainState::Log(_)) => Layout::Log,
            _ => Layout::Mdbx,
        }
    }

    /// Closes the database, evicts it from the page cache, and reopens it with empty caches
    /// (the store's write buffer survives, as a running node's would).
    ///
    /// Before the eviction the data file's dirty pages are written out and the time it takes
    /// is returned: the device writes that commits without an fsync (the write buffer)
    /// deferred, which a measured block would otherwise not show (evicting starts them).
    pub(super) fn go_cold(&mut self) -> Result<Duration> {
        let state = self
            .state
            .take()
            .context("the state is open between blocks")?;
        let dir = self.dir.clone();
        let warm_branches = self.warm_branches;
        let mut writeback = Duration::ZERO;
        let t = Instant::now();
        let state = match state {
            ChainState::Mdbx(state) => ChainState::Mdbx(
                state
                    .reopen(|_| {
                        // MDBX syncs what its commits left unsynced when it closes: that is
                        // counted, and whatever the OS still holds.
                        std::fs::File::open(dir.join("mdbx.dat"))?.sync_data()?;
                        writeback = t.elapsed();
                        evict_page_cache(&dir)?;
                        if warm_branches {
                            let t = Instant::now();
                            let warm = warm_branch_pages(&dir).map_err(std::io::Error::other)?;
                            tracing::debug!(
                                ?warm,
                                ms = t.elapsed().as_secs_f64() * 1e3,
                                "branch pages warmed"
                            );
                        }
                        Ok(())
                    })
                    .with_context(|| {
                        format!("evicting {} from the page cache", self.dir.display())
                    })?,
            ),
            ChainState::Log(state) => {
                // What a relaxed log left unsynced is written now (nothing when durable); the
                // index stays in memory (it is the layout's directory), the trie is dropped.
                state.store().sync()?;
                writeback = t.elapsed();
                bintrie_logstore::evict_page_cache(&dir)
                    .with_context(|| format!("evicting {}", dir.display()))?;
                ChainState::Log(state.drop_trie()?)
            }
        };
        self.state = Some(state);
        Ok(writeback)
    }

    /// Flushes the store's write buffer (before the database is kept or dropped).
    pub(super) fn finish(&mut self) -> Result<()> {
        match self.state() {
            ChainState::Mdbx(s) => s.flush()?,
            ChainState::Log(s) => s.store().sync()?,
        }
        Ok(())
    }

    /// The calldata of one block of `w` with `sizing`, with keys fresh for this block.
    pub(super) fn calldata(&mut self, w: Workload, sizing: &Sizing) -> Bytes {
        self.seq += 1;
        let unique = U256::from(SPENDER_BASE) + U256::from(self.seq) * U256::from(1u64 << 24);
        match w {
            Workload::Erc20Balanceof => {
                let start = HOLDER_BASE + self.rng.random_range(0..self.holders * 4);
                contracts::balance_of_loop(U256::from(start), sizing.count)
            }
            Workload::Erc20Approve => contracts::approve_loop(unique, sizing.count),
            Workload::Mixed => contracts::mixed(unique, sizing.count, sizing.writes),
            Workload::SloadBenchmark => contracts::sload_loop(0, sizing.count),
            Workload::SstoreVariants => {
                let regions = SstoreRegions {
                    fresh: U256::from(FRESH_BASE) + U256::from(self.seq) * U256::from(1u64 << 20),
                    other: U256::from(OTHER_BASE),
                    same: U256::from(SAME_BASE),
                    zero: U256::from(ZERO_BASE),
                };
                // Differs from whatever the previous block wrote (and from the initial 1).
                let value = U256::from(self.seq + 1);
                contracts::sstore_variants(
                    &regions,
                    sizing.count,
                    value,
                    U256::from(SAME_VALUE),
                    false,
                )
            }
        }
    }

    pub(super) fn tx(&self, data: Bytes, access_list: Option<AccessList>) -> Result<TxEnv> {
        let b = TxEnv::builder()
            .caller(SENDER)
            .nonce(self.nonce)
            .to(DRIVER)
            .data(data)
            .gas_limit(self.tx_gas_limit)
            .gas_price(0)
            .chain_id(Some(1));
        let b = match access_list {
            Some(list) => b.tx_type(Some(1)).access_list(list),
            None => b.tx_type(Some(0)),
        };
        b.build()
            .map_err(|e| anyhow::anyhow!("building the transaction: {e:?}"))
    }

    /// Executes `tx` on the current state without committing: gas used and touched state.
    pub(super) fn dry_run(&mut self, tx: TxEnv) -> Result<(u64, EvmState)> {
        let number = self.state().block() + 1;
        let gas_limit = self.block_gas_limit;
        on_state!(self.state.as_ref().expect("open"), state => {
            let mut db = state.block_db(BlockDbOptions::default())?;
            let out = evm(&mut db, number, gas_limit).transact(tx)?;
            let gas = success_gas(&out.result)?;
            Ok((gas, out.state))
        })
    }

    /// The witness (both encodings) of the next block with calldata `data`, built from the
    /// committed state: a dry run through a block database gives the tree keys execution reads
    /// and the code it runs, its changes the keys it writes (what the pipeline would record).
    fn witness(&mut self, data: Bytes) -> Result<bintrie_revm::Witnesses> {
        let number = self.state().block() + 1;
        let tx = self.tx(data, None)?;
        let gas_limit = self.block_gas_limit;
        let state = self
            .state
            .as_mut()
            .context("the state is open between blocks")?;
        on_state!(state, state => {
            let (keys, codes) = {
                let mut db =
                    state.block_db(BlockDbOptions::default().with_record_touched(true))?;
                let out = evm(&mut db, number, gas_limit).transact(tx)?;
                success_gas(&out.result)?;
                let (mut keys, codes) = db.touched();
                revm::DatabaseCommit::commit(&mut db, out.state);
                keys.extend(db.into_changes()?.writes.into_iter().map(|(k, _)| k));
                keys.sort_unstable();
                keys.dedup();
                (keys, codes)
            };
            Ok(state.witness(number, &keys, &codes)?)
        })
    }

    /// Gas per loop iteration and fixed gas of calldata `f(count)`, from two dry runs.
    pub(super) fn gas_line(&mut self, f: impl Fn(&mut Self, u64) -> Bytes) -> Result<(f64, f64)> {
        let (a, b) = (16u64, 80u64);
        let da = f(self, a);
        let ga = self.dry_run(self.tx(da, None)?)?.0 as f64;
        let db = f(self, b);
        let gb = self.dry_run(self.tx(db, None)?)?.0 as f64;
        let per = (gb - ga) / (b - a) as f64;
        ensure!(
            per > 0.0,
            "a loop iteration costs no gas: the driver is broken"
        );
        Ok((per, ga - per * a as f64))
    }

    /// Loop counts that fill [`GAS_FILL`] of the transaction gas limit.
    pub(super) fn size(&mut self, w: Workload, config: &StudyConfig) -> Result<Sizing> {
        let budget = self.tx_gas_limit as f64 * GAS_FILL;
        let fit = |(per, fixed): (f64, f64), gas: f64| ((gas - fixed) / per).max(1.0) as u64;
        let one = |count| Sizing { count, writes: 0 };
        Ok(match w {
            Workload::Mixed => {
                let reads = self.gas_line(|s, n| {
                    s.calldata(
                        Workload::Mixed,
                        &Sizing {
                            count: n,
                            writes: 0,
                        },
                    )
                })?;
                let writes = self.gas_line(|s, n| {
                    s.calldata(
                        Workload::Mixed,
                        &Sizing {
                            count: 0,
                            writes: n,
                        },
                    )
                })?;
                let share = f64::from(config.mixed_read_pct) / 100.0;
                Sizing {
                    count: fit(reads, budget * share),
                    writes: fit((writes.0, 0.0), budget * (1.0 - share) - reads.1),
                }
            }
            Workload::SloadBenchmark => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget).min(SLOAD_SLOTS))
            }
            Workload::SstoreVariants => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget).min(SSTORE_REGION))
            }
            _ => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget))
            }
        })
    }

    /// One measured block.
    pub(super) fn measure(
        &mut self,
        key: ConfigKey,
        run: u32,
        block_in_run: u32,
        sizing: &Sizing,
        config: &StudyConfig,
    ) -> Result<RunRow> {
        let data = self.calldata(key.workload, sizing);
        let data_for_witness = data.clone();
        let mut prefetch_list = None;
        // The stems the block will write (what an EIP-7928 block access list tells apart from
        // its reads): the trie prefetcher preloads their paths.
        let mut write_stems: Vec<bintrie_keys::Stem> = Vec::new();
        let tx = if key.prefetch {
            // What eth_createAccessList gives: everything the transaction touches.
            let (_, touched) = self.dry_run(self.tx(data.clone(), None)?)?;
            let mut items = Vec::new();
            let mut list = PrefetchList::new();
            list.account(SENDER).account(DRIVER).account(COINBASE);
            for (address, account) in &touched {
                write_stems.push(bintrie_keys::basic_data_key(address).stem);
                write_stems.extend(
                    account
                        .changed_storage_slots()
                        .map(|(k, _)| bintrie_keys::storage_slot_key(address, k).stem),
                );
                let keys: Vec<B256> = account.storage.keys().map(|k| B256::from(*k)).collect();
                list.access_list([(*address, keys.as_slice())]);
                // The sender and the callee are warm anyway; list the callee's slots only.
                if *address != SENDER && !(*address == DRIVER && keys.is_empty()) {
                    items.push(AccessListItem {
                        address: *address,
                        storage_keys: keys,
                    });
                }
            }
            prefetch_list = Some(list);
            self.tx(data, Some(AccessList(items)))?
        } else {
            self.tx(data, None)?
        };

        // The witness is built from the pre-state before the eviction and the reopen, so the
        // measured block finds neither its pages cached nor its nodes loaded.
        let witness = if config.witness {
            Some(self.witness(data_for_witness)?)
        } else {
            None
        };
        // The hash cost of this moment, for the block's hash floor (the VM's CPU speed moves
        // within a run); measured before the eviction, outside the block's timing, and only
        // for a workload that writes (one that does not hashes nothing).
        let hash64_ns = key.workload.writes().then(super::block_hash64_ns);
        let writeback = self.go_cold()?;
        let read_path = key.read_path;
        let plan = BlockPlan {
            number: self.state().block() + 1,
            prefetch: prefetch_list,
            write_stems,
            block_hashes: Vec::new(),
        };
        let options = PipelineOptions::default()
            .with_db(
                BlockDbOptions::default()
                    .with_cache(true)
                    .with_read_path(read_path),
            )
            .with_workers(config.prefetch_workers);
        let (number, gas_limit) = (plan.number, self.block_gas_limit);
        // MDBX reads through its memory map: every device read is a major page fault. The log
        // reads with pread: the bytes the process had read from the device, in 4 KB pages.
        let layout = self.layout();
        let device = || match layout {
            Layout::Mdbx => major_faults(),
            Layout::Log => device_read_pages(),
        };
        let faults = device();
        let minor = minor_faults();
        let steal = steal_ms();
        let cpu = process_cpu();
        super::perf::enable();
        let block = on_state!(self.state.as_mut().expect("open"), state => state
        .run_block(&plan, &options, |db| {
            evm(db, number, gas_limit).transact_commit(tx)
        }));
        super::perf::disable();
        let block = block.with_context(|| format!("block {number}"))?;
        let device_reads = faults
            .zip(device())
            .map(|(before, after)| after.saturating_sub(before));
        let minor_faults = minor
            .zip(minor_faults())
            .map(|(before, after)| after.saturating_sub(before));
        let steal_ms = steal
            .zip(steal_ms())
            .map(|(before, after)| (after - before).max(0.0));
        let cpu_ms = cpu
            .zip(process_cpu())
            .map(|(before, after)| after.saturating_sub(before).as_secs_f64() * 1e3);
        let gas = success_gas(&block.output)?;
        let (reads, report, t) = (block.reads, block.commit, block.timings);
        let slots_written = block.writes.slots as u64;
        self.nonce += 1;

        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let state_read_ms = ms(t.state_read);
        let total_ms = ms(t.total);
        // Waiting for the trie prefetcher is part of the update.
        let trie_update_ms = ms(t.trie_update);
        let cold_reads = reads.unique_keys;
        let slots_read = reads.slot_reads;
        let hashes = report.trie.hashes;
        Ok(RunRow {
            key,
            run,
            block_in_run,
            kept: run > 0,
            gas,
            total_ms,
            state_read_ms,
            execution_ms: ms(t.execution),
            trie_update_ms,
            trie_warm_ms: ms(t.trie_prefetch),
            trie_wait_ms: Some(ms(t.trie_prefetch_wait)),
            commit_ms: ms(t.commit),
            writeback_ms: ms(writeback),
            mgas_s: gas as f64 / 1e6 / t.total.as_secs_f64(),
            store_reads: reads.lookups,
            bytes_read: reads.bytes,
            nodes_loaded: report.trie.nodes_loaded,
            hashes,
            bytes_written: report.stats.bytes as u64,
            device_reads,
            cpu_ms,
            minor_faults,
            steal_ms,
            cold_reads,
            slots_read,
            slots_written,
            ms_per_cold_read: (slots_read > 0).then(|| state_read_ms / slots_read as f64),
            ms_per_written_slot: (slots_written > 0).then(|| total_ms / slots_written as f64),
            hash_floor: hash64_ns
                .filter(|_| hashes > 0)
                .map(|ns| trie_update_ms * 1e6 / (hashes as f64 * ns)),
            hash64_ns,
            witness_keys: witness.as_ref().map(|w| w.keys as u64),
            witness_multiproof_bytes: witness.as_ref().map(|w| w.multiproof.bytes().total),
            witness_blobs_bytes: witness.as_ref().map(|w| w.blobs.bytes().total),
        })
    }
}

/// The file in a study's log copy that records where the copy ended ([`LogStore::end`]), so
/// a later invocation can cut the log back there ([`bintrie_logstore::rewind`]) instead of
/// copying the database again.
pub(super) const BASE_FILE: &str = "bench-base.json";

/// [`BASE_FILE`]'s contents.
#[derive(serde::Serialize, serde::Deserialize)]
struct Base {
    segment: u32,
    offset: u64,
    block: u64,
    root: B256,
    group_depth: u8,
}

/// Records where the freshly copied log in `dir` ends (written to a temporary file, synced,
/// then renamed over [`BASE_FILE`]); removes any old record when the end is unknown.
fn write_base(dir: &Path, end: Option<&bintrie_logstore::LogEnd>) -> Result<()> {
    let path = dir.join(BASE_FILE);
    let Some(end) = end else {
        let _ = std::fs::remove_file(&path);
        return Ok(());
    };
    let base = Base {
        segment: end.segment,
        offset: end.offset,
        block: end.meta.block,
        root: B256::from(end.meta.root),
        group_depth: end.meta.group_depth,
    };
    super::write_json_replacing(&path, &base)
}

/// Cuts the log in `dir` back to the end its [`BASE_FILE`] records, when that record names
/// `expected` (the database's state); whether it did. A missing or unreadable record, another
/// state, or a cut the log cannot take is a `false`: the caller copies the database again.
/// A log another process has open is an error: copying again would delete it under that
/// process.
fn rewind_to_base(dir: &Path, expected: &bintrie_logstore::Meta) -> Result<bool> {
    let Some(base) = std::fs::read(dir.join(BASE_FILE))
        .ok()
        .and_then(|text| serde_json::from_slice::<Base>(&text).ok())
    else {
        return Ok(false);
    };
    if base.block != expected.block
        || base.root != B256::from(expected.root)
        || base.group_depth != expected.group_depth
    {
        return Ok(false);
    }
    let end = bintrie_logstore::LogEnd {
        segment: base.segment,
        offset: base.offset,
        meta: *expected,
    };
    match bintrie_logstore::rewind(dir, &end) {
        Ok(()) => Ok(true),
        Err(e @ bintrie_logstore::LogError::Locked(_)) => {
            Err(e).context("another process has the study's log copy open")
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "could not cut the log back: copying it again");
            Ok(false)
        }
    }
}

/// Copies the state of the MDBX store `src` into a new log in `dir` (created; it must hold no
/// log): every node blob and code entry in one bulk load, ending at `src`'s root and block,
/// synced. Returns the log. (Every blob is checked against its parent's hash when a trie
/// loads it, as from MDBX.)
pub fn copy_into_log(
    src: &StateStore,
    dir: &Path,
    options: &bintrie_logstore::LogOptions,
) -> Result<LogStore> {
    let meta = src.meta();
    // The log holds what the MDBX file does, less its free pages: refuse up front rather than
    // fill the disk part-way through the copy.
    let need = std::fs::metadata(src.dir().join("mdbx.dat")).map_or(0, |m| m.len());
    if let Some(free) = bintrie_store::free_bytes(dir.parent().unwrap_or(dir)) {
        anyhow::ensure!(
            free >= need,
            "copying the state into the log layout needs about {} free beside {} (the MDBX \
             database's size); {} are free",
            indicatif::DecimalBytes(need),
            dir.display(),
            indicatif::DecimalBytes(free)
        );
    }
    let options = bintrie_logstore::LogOptions {
        group_depth: Some(meta.group_depth),
        create: true,
        ..options.clone()
    };
    let mut log =
        LogStore::open(dir, &options).with_context(|| format!("creating {}", dir.display()))?;
    let mut load = log
        .bulk_load()
        .with_context(|| format!("{} already holds a state", dir.display()))?;
    let mut failed = None;
    src.for_each_node(|k, v| {
        if failed.is_none() {
            failed = load.node(k, v).err();
        }
    })?;
    src.for_each_code(|k, v| {
        if failed.is_none() {
            failed = match <&[u8; 32]>::try_from(k) {
                Ok(h) => load.code(h, v).err(),
                Err(_) => Some(bintrie_logstore::LogError::Corrupt(format!(
                    "a code key of {} bytes",
                    k.len()
                ))),
            };
        }
    })?;
    if let Some(e) = failed {
        return Err(e).context("copying the MDBX state into the log");
    }
    load.finish(meta.root, meta.block)?;
    Ok(log)
}

/// The store's write buffer for a study (`None` when `buffer_blocks` is 0).
fn buffer_options(config: &StudyConfig) -> Option<bintrie_store::BufferOptions> {
    (config.buffer_blocks > 0).then(|| bintrie_store::BufferOptions {
        max_blocks: config.buffer_blocks,
        ..Default::default()
    })
}

/// Pages (4 KB) the process has had read from the storage device so far, all threads:
/// `read_bytes` of `/proc/self/io`; `None` where it is unreadable.
pub(crate) fn device_read_pages() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|b| b / 4096)
}

/// CPU time the process has used so far, every thread (finished ones included):
/// `CLOCK_PROCESS_CPUTIME_ID`, exact to the scheduler's accounting (not to the tick as
/// `/proc/self/stat` is). `None` where the clock cannot be read.
pub(crate) fn process_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

/// The process's major page faults so far, all threads (finished ones included): field 12 of
/// `/proc/self/stat`, as `getrusage(RUSAGE_SELF)` counts them; `None` where it is unreadable.
pub(crate) fn major_faults() -> Option<u64> {
    stat_field(12)
}

/// The process's minor page faults so far (pages mapped without a device read), all threads:
/// field 10 of `/proc/self/stat`; `None` where it is unreadable.
pub(crate) fn minor_faults() -> Option<u64> {
    stat_field(10)
}

/// The machine's steal time so far, ms, summed over its CPUs: `/proc/stat`'s `cpu` line;
/// `None` where it is unreadable.
pub(crate) fn steal_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // In USER_HZ ticks, which Linux's /proc fixes at 100 per second on every architecture.
    Some(cpu_steal_ticks(&stat)? as f64 * 10.0)
}

/// The `steal` value (the 8th after the label: user, nice, system, idle, iowait, irq,
/// softirq, steal) of the all-CPU `cpu` line of a `/proc/stat` text, in clock ticks.
fn cpu_steal_ticks(stat: &str) -> Option<u64> {
    stat.lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()
}

/// Field `n` (counted from 1, as proc(5) does) of `/proc/self/stat`, from field 3 on.
fn stat_field(n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its last `)`.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(n.checked_sub(3)?))
        .and_then(|f| f.parse().ok())
}

pub(super) fn success_gas(result: &ExecutionResult) -> Result<u64> {
    match result {
        ExecutionResult::Success { .. } => Ok(result.tx_gas_used()),
        other => bail!("the benchmark transaction failed: {other:?}"),
    }
}

pub(super) fn evm<DB: revm::Database>(
    db: DB,
    number: u64,
    block_gas_limit: u64,
) -> revm::handler::MainnetEvm<revm::handler::MainnetContext<DB>> {
    Context::mainnet()
        .modify_cfg_chained(|c| c.set_spec_and_mainnet_gas_params(SpecId::PRAGUE))
        .modify_block_chained(|b| {
            b.number = U256::from(number);
            b.timestamp = U256::from(1_800_000_000u64 + number * 12);
            b.basefee = 0;
            b.beneficiary = COINBASE;
            b.gas_limit = block_gas_limit;
            b.prevrandao = Some(B256::from(keccak256(number.to_be_bytes())));
        })
        .with_db(db)
        .build_mainnet()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writing to fresh memory raises the minor faults (64 MiB: at least one fault per huge
    /// page, many more with 4 KB pages), and not the major ones by as much.
    #[test]
    fn minor_faults_count_fresh_memory_touched() {
        let before = (minor_faults().unwrap(), major_faults().unwrap());
        let mut fresh = vec![0u8; 64 << 20];
        for page in fresh.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&fresh);
        let after = (minor_faults().unwrap(), major_faults().unwrap());
        assert!(after.0 - before.0 >= 32, "{before:?} -> {after:?}");
        assert!(
            after.1 - before.1 < after.0 - before.0,
            "{before:?} -> {after:?}"
        );
    }

    /// The steal value is the 8th of the all-CPU line, not of a per-CPU line; the live file
    /// reads.
    #[test]
    fn steal_is_read_from_the_all_cpu_line() {
        let stat = "cpu  1586994 0 548767 2460629 182168 0 15397 14878 0 0\n\
                    cpu0 534159 0 104277 1751861 24545 0 1045 5885 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(cpu_steal_ticks(stat), Some(14878));
        assert_eq!(cpu_steal_ticks("cpu0 1 2 3 4 5 6 7 8 9\n"), None);
        assert_eq!(cpu_steal_ticks("cpu  1 2 3\n"), None);
        assert!(steal_ms().is_some_and(|s| s >= 0.0));
    }

    /// Reading a cold database through its memory map raises the count: every lookup of an
    /// evicted file faults its B-tree pages in.
    #[test]
    fn major_faults_count_the_pages_a_cold_read_maps() {
        let dir = tempfile::tempdir().unwrap();
        let config = StudyConfig {
            stems: 20_000,
            holders: 10,
            ..StudyConfig::for_scale(crate::model::Scale::Smoke)
        };
        let options = StoreOptions {
            group_depth: Some(4),
            ..Default::default()
        };
        build_database(dir.path(), &options, &config, 1 << 20, &|_| {}).unwrap();
        evict_page_cache(dir.path()).unwrap();
        let store = StateStore::open_read_only(dir.path()).unwrap();
        let reader = store.reader().unwrap();
        let before = major_faults().unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..200 {
            reader
                .get_stem(&rng.random(), bintrie_store::ReadPath::Flat)
                .unwrap();
        }
        let faults = major_faults().unwrap() - before;
        assert!(
            faults > 0,
            "200 lookups of a cold database faulted nothing in"
        );
    }
}
