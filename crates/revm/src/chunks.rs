//! The batch prefetch ([`batch_read`]), with code rebuilt from the tree's code chunks
//! ([`ChunkedCode`]).
//!
//! EIP-7864 keeps every account's code in the tree: chunks `0..128` on the header stem
//! (sub-indices 128..255), the rest on stems at tree indices 1, 2, 3, ... of the same address.
//! Those stems are known from the address alone, so a batch read can ask for them beside the
//! header stem, in the same wave, instead of reading the code by hash once the header stem has
//! named it (a second, dependent wave). The code is then rebuilt from the chunks and checked
//! against the code hash exactly as code read by hash is ([`crate::decode_code`]), on another
//! thread: the batch's own thread is busy with the reads (keccak and the jump table analysis
//! of 200-300 KB of code took about half of a mainnet block's 5 ms batch on that thread).

use crate::stream::{Arrivals, code_to_read};
use crate::{StateError, StateSnapshot, StemsBatch};
use alloy_primitives::map::{HashMap, HashSet};
use alloy_primitives::{Address, B256, Bytes, U256};
use bintrie_keys::{
    BASIC_DATA_LEAF_KEY, BasicData, CHUNK_BODY_LEN, CODE_OFFSET, STEM_SUBTREE_WIDTH, Stem,
    code_from_chunks, get_stem,
};
use bintrie_node::StemValues;
use revm::bytecode::Bytecode;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Chunk stems past the header (tree indices `1..=CHUNK_STEMS`) listed per account: with the
/// header's 128 chunks they hold 128 + 3 x 256 chunks of 31 bytes, 27,776 bytes, above
/// EIP-170's 24,576-byte limit on deployed code. Longer code is read by hash.
pub(crate) const CHUNK_STEMS: u64 = 3;

/// The longest code [`ChunkedCode`] rebuilds, bytes.
const MAX_LEN: u64 = (STEM_SUBTREE_WIDTH * (CHUNK_STEMS + 1) - CODE_OFFSET) * CHUNK_BODY_LEN as u64;

/// One account's code being gathered.
#[derive(Debug, Default)]
struct Account {
    /// The code hash the header stem named, and the code's length from its BASIC_DATA, once the
    /// header stem is in (and the code is to be rebuilt here).
    code: Option<(B256, usize)>,
    /// The code was rebuilt, or given up on: later stems are not kept.
    settled: bool,
    /// The values of the header stem (tree index 0) and of each chunk stem, as they arrive.
    stems: [Option<StemValues>; CHUNK_STEMS as usize + 1],
}

/// Rebuilds the code of the accounts of a batch read from their chunk stems, as the stems
/// arrive.
///
/// Use: list [`ChunkedCode::stems`] after the batch's own stems; hand each arriving header
/// stem whose code is to be read to [`ChunkedCode::header`] (which says whether to read it by
/// hash instead) and each arriving chunk stem to [`ChunkedCode::chunk_stem`]. Code whose
/// chunks are all in is rebuilt on the spot, while other reads are in flight, and sent with
/// its hash to the decoder given to [`ChunkedCode::new`], which checks it
/// ([`crate::decode_code`]); [`ChunkedCode::finish`] returns the hashes still owed (a chunk
/// stem or chunk was absent), which the caller reads by hash, as it does code the decoder
/// refuses.
pub(crate) struct ChunkedCode<'a> {
    /// The accounts, in the order given to [`ChunkedCode::new`].
    accounts: Vec<Account>,
    /// The listed chunk stems: the account (index into `accounts`) and tree index of each.
    listed: Vec<(usize, usize)>,
    stems: Vec<Stem>,
    /// Where rebuilt code goes to be checked.
    decode: Sender<(B256, Bytes)>,
    /// Told of each rebuilt code before it is queued (execution may check it first).
    arrivals: &'a dyn Arrivals,
    /// Code that did not rebuild: read by hash.
    owed: Vec<B256>,
    /// The chunk stems read (present in the store).
    read: Vec<Stem>,
}

/// What [`ChunkedCode::finish`] returns.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    /// Hashes named by a header stem whose code did not rebuild: to read by hash.
    pub(crate) owed: Vec<B256>,
    /// The chunk stems read (present in the store).
    pub(crate) stems: Vec<Stem>,
}

impl<'a> ChunkedCode<'a> {
    /// Gathers the code of `accounts` (their position in this list is their number here),
    /// handing each code rebuilt to `arrivals` ([`Arrivals::rebuilt`]) and sending it to
    /// `decode`.
    pub(crate) fn new(
        accounts: &[Address],
        decode: Sender<(B256, Bytes)>,
        arrivals: &'a dyn Arrivals,
    ) -> Self {
        let chunk_stems = accounts.len() * CHUNK_STEMS as usize;
        let mut listed = Vec::with_capacity(chunk_stems);
        let mut stems = Vec::with_capacity(chunk_stems);
        for (a, address) in accounts.iter().enumerate() {
            for t in 1..=CHUNK_STEMS {
                listed.push((a, t as usize));
                stems.push(get_stem(address, &U256::from(t)));
            }
        }
        ChunkedCode {
            accounts: accounts.iter().map(|_| Account::default()).collect(),
            listed,
            stems,
            decode,
            arrivals,
            owed: Vec::new(),
            read: Vec::new(),
        }
    }

    /// The chunk stems to list, in order: chunk stem `i` is `stems()[i]`.
    pub(crate) fn stems(&self) -> &[Stem] {
        &self.stems
    }

    /// Account `a`'s header stem is in, and names code `hash` not read yet. Returns the hash
    /// when the code must be read by hash (BASIC_DATA does not decode, or the code is longer
    /// than the listed chunk stems hold); `None` when it is rebuilt here.
    pub(crate) fn header(&mut self, a: usize, hash: B256, values: &StemValues) -> Option<B256> {
        let len = values
            .get(BASIC_DATA_LEAF_KEY)
            .and_then(|b| BasicData::decode(b).ok())
            .map(|b| u64::from(b.code_size))
            .filter(|&len| len <= MAX_LEN);
        let account = &mut self.accounts[a];
        let Some(len) = len else {
            account.settled = true;
            account.stems = Default::default();
            return Some(hash);
        };
        account.code = Some((hash, len as usize));
        account.stems[0] = Some(values.clone());
        self.try_rebuild(a);
        None
    }

    /// Chunk stem `i` (of [`ChunkedCode::stems`]) is in with `values`.
    pub(crate) fn chunk_stem(&mut self, i: usize, values: &StemValues) {
        self.read.push(self.stems[i]);
        let (a, t) = self.listed[i];
        if !self.accounts[a].settled {
            self.accounts[a].stems[t] = Some(values.clone());
            self.try_rebuild(a);
        }
    }

    /// Rebuilds account `a`'s code if its header and every chunk stem it needs are in.
    fn try_rebuild(&mut self, a: usize) {
        let account = &mut self.accounts[a];
        let Some((hash, len)) = account.code else {
            return;
        };
        let chunks = len.div_ceil(CHUNK_BODY_LEN) as u64;
        let width = STEM_SUBTREE_WIDTH;
        let last_stem = ((CODE_OFFSET + chunks - 1) / width) as usize;
        if account.stems[..=last_stem].iter().any(Option::is_none) {
            return;
        }
        let stems = &account.stems;
        let chunk = |i: u64| {
            let pos = CODE_OFFSET + i;
            stems[(pos / width) as usize]
                .as_ref()?
                .get((pos % width) as u8)
        };
        let rebuilt = code_from_chunks((0..chunks).map(chunk), len);
        *account = Account {
            settled: true,
            ..Account::default()
        };
        // A decoder that is gone (it panicked) leaves the code owed.
        let sent = rebuilt.is_some_and(|code| {
            let code = Bytes::from(code);
            self.arrivals.rebuilt(&hash, &code);
            self.decode.send((hash, code)).is_ok()
        });
        if !sent {
            tracing::debug!(%hash, "the code's chunks are missing; reading it by hash");
            self.owed.push(hash);
        }
    }

    /// The hashes owed: code missing a chunk, and code whose chunk stems did not all arrive
    /// (absent from the store). Drops the sender: the decoder ends once it has checked what
    /// it was sent.
    pub(crate) fn finish(mut self) -> Rebuilt {
        self.owed.extend(
            self.accounts
                .iter()
                .filter_map(|a| a.code.map(|(hash, _)| hash)),
        );
        Rebuilt {
            owed: self.owed,
            stems: self.read,
        }
    }
}

/// The next queued job, waiting for one while the sender lives; `None` once the sender is gone
/// and the queue is empty. The lock is released before this returns, so the threads sharing
/// the queue work on their jobs at the same time (a `while let` on `jobs.lock().recv()` holds
/// the guard through the loop's body, and they would take turns).
fn take_job<T>(jobs: &std::sync::Mutex<std::sync::mpsc::Receiver<T>>) -> Option<T> {
    let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
    job.ok()
}

/// What [`batch_read`] read.
#[derive(Debug)]
pub(crate) struct BatchRead {
    /// The values of each listed stem, in order (`None`: absent).
    pub(crate) values: Vec<Option<StemValues>>,
    /// Every code hash a header stem named and this batch took on, with its code as
    /// [`crate::decode_code`] checks it (`None`: no code stored under it, or rebuilt and
    /// taken by execution to check itself, [`Arrivals::take_job`]; those are in `rebuilt`).
    pub(crate) codes: HashMap<B256, Option<Result<Bytecode, StateError>>>,
    /// The chunk stems read (present in the store).
    pub(crate) chunk_stems: Vec<Stem>,
    /// The hashes of the codes in `codes` rebuilt from chunks (not read by hash).
    pub(crate) rebuilt: HashSet<B256>,
    /// When the reads ended and when the last code was checked, from the call (the trace).
    pub(crate) timings: (Duration, Duration),
}

/// Reads `listed` stems (each with its account when it is a header stem) through the
/// snapshot's batch path, with every account's chunk stems listed beside them, and the code
/// of each header stem whose code hash `arrivals` lets this batch claim
/// ([`crate::stream::code_to_read`]): rebuilt from the chunks when they hold it, otherwise
/// read by hash. Each listed stem is handed to `arrivals` as it arrives (after its code is
/// claimed), and each code once checked. `None` when the snapshot has no batch path (nothing
/// read).
///
/// Rebuilt code is checked and decoded on a thread of its own, beside the reads; once the
/// reads are done, the calling thread takes its share of what is left (keccak runs at about
/// 175 MB/s on the study's machine: a block's code can outlast its reads). Code the decoder
/// refuses, or whose chunks are missing, is read by hash after the batch.
pub(crate) fn batch_read<S: StateSnapshot>(
    snapshot: &S,
    listed: &[(Stem, Option<Address>)],
    arrivals: &dyn Arrivals,
) -> Option<Result<BatchRead, StateError>> {
    let start = Instant::now();
    // Header stems: their number among the accounts, by position in `listed`.
    let mut account_of = vec![usize::MAX; listed.len()];
    let mut accounts = Vec::new();
    for (i, (_, account)) in listed.iter().enumerate() {
        if let Some(a) = account {
            account_of[i] = accounts.len();
            accounts.push(*a);
        }
    }
    let (to_decoder, jobs) = std::sync::mpsc::channel::<(B256, Bytes)>();
    let jobs = std::sync::Mutex::new(jobs);
    let decode_queued = || {
        let mut out = Vec::new();
        while let Some((h, raw)) = take_job(&jobs) {
            if !arrivals.take_job(&h) {
                // Execution checked it itself (and reads it on demand if it failed).
                out.push((h, None));
                continue;
            }
            let code = crate::decode_code(&h, raw);
            // Code that fails is read by hash after the batch, and handed on then.
            if let Ok(code) = &code {
                arrivals.code(&h, Some(code));
            }
            out.push((h, Some(code)));
        }
        out
    };
    let mut reads_done = Duration::ZERO;
    let (batch, decoded) = std::thread::scope(|scope| {
        let decoder = scope.spawn(decode_queued);
        let mut chunked = ChunkedCode::new(&accounts, to_decoder, arrivals);
        // Submitted in the list's order, each account's chunk stems right after its header
        // stem: `order[j]` is the j-th read's place in `listed` followed by the chunk stems.
        let chunk = |a: usize| listed.len() + a * CHUNK_STEMS as usize;
        let order: Vec<usize> = (0..listed.len())
            .flat_map(|i| {
                let chunks = match account_of[i] {
                    usize::MAX => 0..0,
                    a => chunk(a)..chunk(a + 1),
                };
                std::iter::once(i).chain(chunks)
            })
            .collect();
        let stems: Vec<Stem> = order
            .iter()
            .map(|&i| match listed.get(i) {
                Some((s, _)) => *s,
                None => chunked.stems()[i - listed.len()],
            })
            .collect();
        let batch = snapshot.stems_batch(&stems, &mut |j, v| {
            // A backend that names a stem it was not asked for is ignored here, and refused
            // below by the count of its values.
            let &i = order.get(j)?;
            let Some((stem, account)) = listed.get(i) else {
                if let Some(v) = v {
                    chunked.chunk_stem(i - listed.len(), v);
                }
                return None;
            };
            let Some(v) = v else {
                arrivals.stem(stem, None);
                return None;
            };
            // Claimed before the stem is handed on: execution, finding the account, then
            // finds its code on the way.
            let h = code_to_read(account.is_some(), v, arrivals);
            arrivals.stem(stem, Some(v));
            chunked.header(account_of[i], h?, v)
        });
        let rebuilt = chunked.finish();
        reads_done = start.elapsed();
        let mut decoded = decode_queued();
        // A decoder that panicked returns nothing: its codes are read on demand.
        decoded.extend(decoder.join().unwrap_or_default());
        (batch.map(|b| b.map(|b| (b, rebuilt, order))), decoded)
    });
    let decoded_at = start.elapsed();
    let (
        StemsBatch {
            values: read,
            codes,
        },
        rebuilt,
        order,
    ) = match batch? {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    // One value per stem asked for: a backend's short or long list would leave stems cached
    // as absent that it never read.
    if read.len() != order.len() {
        return Some(Err(StateError::Backend(
            format!(
                "the batch read returned {} stems' values for {} stems asked for",
                read.len(),
                order.len()
            )
            .into(),
        )));
    }
    // Back in the list's order (chunk stems dropped).
    let mut values: Vec<Option<StemValues>> = vec![None; listed.len()];
    for (i, v) in order.into_iter().zip(read) {
        if let Some(slot) = values.get_mut(i) {
            *slot = v;
        }
    }
    for (h, code) in &codes {
        arrivals.code(h, code.as_ref().and_then(|c| c.as_ref().ok()));
    }
    let mut codes: HashMap<B256, Option<Result<Bytecode, StateError>>> =
        codes.into_iter().collect();
    let mut from_chunks = HashSet::default();
    let mut owed = rebuilt.owed;
    for (h, code) in decoded {
        match code {
            Some(Ok(code)) => {
                from_chunks.insert(h);
                codes.insert(h, Some(Ok(code)));
            }
            None => {
                from_chunks.insert(h);
                codes.insert(h, None);
            }
            Some(Err(_)) => owed.push(h),
        }
    }
    // Code the chunks did not give: read by hash now (a corrupt or partial state; a
    // consistent one rebuilds every code up to EIP-170's limit).
    for h in owed {
        if codes.contains_key(&h) {
            continue;
        }
        let code = match snapshot.code(&h) {
            Ok(raw) => raw.map(|raw| crate::decode_code(&h, raw)),
            Err(e) => return Some(Err(e)),
        };
        arrivals.code(&h, code.as_ref().and_then(|c| c.as_ref().ok()));
        codes.insert(h, code);
    }
    Some(Ok(BatchRead {
        values,
        codes,
        chunk_stems: rebuilt.stems,
        rebuilt: from_chunks,
        timings: (reads_done, decoded_at),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch path that reads every stem but the last, and names a stem it was not asked for.
    struct Short(crate::MemorySnapshot);

    impl StateSnapshot for Short {
        fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
            self.0.stem(stem)
        }
        fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError> {
            self.0.code(hash)
        }
        fn has_batch_path(&self) -> bool {
            true
        }
        fn stems_batch(
            &self,
            stems: &[Stem],
            code_of: &mut dyn FnMut(usize, Option<&StemValues>) -> Option<B256>,
        ) -> Option<Result<StemsBatch, StateError>> {
            code_of(stems.len() + 7, None);
            let values = stems[..stems.len() - 1].iter().map(|_| None).collect();
            Some(Ok(StemsBatch {
                values,
                codes: Vec::new(),
            }))
        }
    }

    /// A backend's batch that returns fewer values than stems asked for is an error, not the
    /// missing stems taken for absent; an index past the stems is no panic.
    #[test]
    fn a_batch_of_the_wrong_length_is_refused() {
        let state = crate::MemoryState::new(5).unwrap();
        let snapshot = Short(crate::StateBackend::snapshot(&state).unwrap());
        let listed = [(get_stem(&Address::ZERO, &U256::ZERO), None)];
        let claims = crate::stream::Claims::new(HashSet::default());
        let read = batch_read(&snapshot, &listed, &claims).unwrap();
        let e = read.unwrap_err().to_string();
        assert!(e.contains("returned 0 stems' values for 1 stems"), "{e}");
    }

    #[test]
    fn a_taken_job_leaves_the_queue_to_the_other_threads() {
        let (tx, rx) = std::sync::mpsc::channel();
        let jobs = std::sync::Mutex::new(rx);
        tx.send(1u32).unwrap();
        tx.send(2u32).unwrap();
        assert_eq!(take_job(&jobs), Some(1));
        // While the taker works on its job, another thread can take the next one.
        assert!(
            jobs.try_lock().is_ok(),
            "the queue stays locked after a take"
        );
        let other = std::thread::scope(|s| s.spawn(|| take_job(&jobs)).join().unwrap());
        assert_eq!(other, Some(2));
        drop(tx);
        assert_eq!(
            take_job(&jobs),
            None,
            "the sender is gone and the queue empty"
        );
    }
}
