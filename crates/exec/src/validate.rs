//! Checking an executed block: against its header, and against the fixture's post values.

use crate::ExecError;
use crate::execute::Executed;
use crate::fixture::Fixture;
use alloy_consensus::{Header, ReceiptEnvelope, TxReceipt as _};
use alloy_evm::block::BlockExecutionResult;
use alloy_primitives::{B256, Bloom, U256};
use bintrie_revm::{BinTrieState, StateBackend, StateError, TrieDb};
use bintrie_store::ReadPath;
use bintrie_trie::WitnessError;
use revm::database_interface::DatabaseRef;
use revm::primitives::hardfork::SpecId;

/// One check of the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Gas used equals the header's.
    GasUsed,
    /// The receipts root equals the header's.
    ReceiptsRoot,
    /// The logs bloom equals the header's.
    LogsBloom,
    /// The EIP-7685 requests hash equals the header's (Prague on).
    RequestsHash,
    /// Blob gas used equals the header's (Cancun on).
    BlobGasUsed,
    /// Every post value the fixture records is what the committed state holds.
    PostState,
    /// The fixture itself is consistent (header hashes, senders, roots of its lists).
    Fixture,
}

impl Check {
    /// The check's name in output (`gas_used`, `receipts_root`, …).
    pub fn name(self) -> &'static str {
        match self {
            Check::GasUsed => "gas_used",
            Check::ReceiptsRoot => "receipts_root",
            Check::LogsBloom => "logs_bloom",
            Check::RequestsHash => "requests_hash",
            Check::BlobGasUsed => "blob_gas_used",
            Check::PostState => "post_state",
            Check::Fixture => "fixture",
        }
    }
}

/// What [`validate`] found.
#[derive(Clone, Debug, Default)]
pub struct Validation {
    /// Each check made, and whether it passed, in order.
    pub checks: Vec<(Check, bool)>,
    /// A description of every difference found (empty when valid).
    pub findings: Vec<String>,
    /// Accounts whose post values were compared.
    pub post_accounts: usize,
    /// Storage slots whose post values were compared.
    pub post_slots: usize,
    /// Post values not compared because the state holds no proof of them (a stateless state:
    /// the block did not touch them).
    pub post_unproven: usize,
}

impl Validation {
    /// True when every check passed.
    pub fn valid(&self) -> bool {
        self.findings.is_empty() && self.checks.iter().all(|(_, ok)| *ok)
    }

    /// The checks that failed.
    pub fn failed(&self) -> Vec<Check> {
        self.checks
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(c, _)| *c)
            .collect()
    }

    fn check(&mut self, check: Check, ok: bool, finding: impl FnOnce() -> String) {
        if !ok {
            self.findings.push(finding());
        }
        self.checks.push((check, ok));
    }
}

/// Checks `executed` (the fixture's block, committed to `state`) against the header (gas used,
/// receipts root, logs bloom, requests hash, blob gas used) and against the fixture's post
/// values read back from the committed state by `read_path`, and reports the fixture's own
/// problems. Errors only when the state cannot be read.
pub fn validate(
    state: &BinTrieState,
    fx: &Fixture,
    executed: &Executed,
    read_path: ReadPath,
) -> Result<Validation, ExecError> {
    validate_over(
        &bintrie_revm::MdbxBackend::new(state.store(), read_path),
        fx,
        executed,
    )
}

/// [`validate`] over any committed state: the post values are read through `backend` (for
/// instance a [`bintrie_revm::StatelessState`]'s, after the block). An account or slot the
/// backend holds no proof of (a stateless state's witness does not reach it: the block did
/// not touch it) is not compared; [`Validation::post_unproven`] counts them.
pub fn validate_over<B: StateBackend>(
    backend: &B,
    fx: &Fixture,
    executed: &Executed,
) -> Result<Validation, ExecError> {
    let header = &fx.block.header.inner;
    let result = &executed.run.output;
    let mut v = Validation::default();
    check_result(&mut v, header, result);
    if header.requests_hash.is_none() && executed.spec >= SpecId::PRAGUE {
        v.check(Check::RequestsHash, false, || {
            "requests hash: missing `requestsHash` in the header of a Prague block".into()
        });
    }
    if let Some(expected) = &fx.expected {
        let db = TrieDb::open(backend)?;
        let before = v.findings.len();
        for (a, e) in expected {
            let got = match unproven(db.basic_ref(*a))? {
                Some(got) => got,
                None => {
                    v.post_unproven += 1 + e.storage.len();
                    continue;
                }
            };
            v.post_accounts += 1;
            let got = got
                .filter(|i| !i.is_empty())
                .map(|i| (i.balance, i.nonce, i.code_hash));
            let want = e.info.filter(|(b, n, h)| {
                !(b.is_zero() && *n == 0 && *h == bintrie_keys::EMPTY_CODE_HASH)
            });
            if got != want {
                let show = |x: Option<(U256, u64, B256)>| match x {
                    None => "absent".to_string(),
                    Some((b, n, h)) => format!("balance {b} nonce {n} code hash {h}"),
                };
                v.findings.push(format!(
                    "account {a}: expected {}, state holds {}",
                    show(want),
                    show(got)
                ));
            }
            for (k, want) in &e.storage {
                let Some(got) = unproven(db.storage_ref(*a, *k))? else {
                    v.post_unproven += 1;
                    continue;
                };
                v.post_slots += 1;
                if got != *want {
                    v.findings.push(format!(
                        "account {a} slot {}: expected {}, state holds {}",
                        B256::from(*k),
                        B256::from(*want),
                        B256::from(got)
                    ));
                }
            }
        }
        let ok = v.findings.len() == before;
        v.checks.push((Check::PostState, ok));
    }
    v.checks.push((Check::Fixture, fx.problems.is_empty()));
    v.findings.extend(fx.problems.iter().cloned());
    Ok(v)
}

/// `Ok(None)` for a read a witness-backed state cannot answer (it holds no proof of the key);
/// other errors stay errors.
fn unproven<T>(r: Result<T, StateError>) -> Result<Option<T>, StateError> {
    match r {
        Ok(x) => Ok(Some(x)),
        Err(StateError::Witness(
            WitnessError::Incomplete { .. } | WitnessError::IncompleteLeaf { .. },
        )) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) fn check_result(
    out: &mut Validation,
    header: &Header,
    result: &BlockExecutionResult<ReceiptEnvelope>,
) {
    out.check(Check::GasUsed, result.gas_used == header.gas_used, || {
        format!(
            "gas used: header {}, execution {}",
            header.gas_used, result.gas_used
        )
    });
    let receipts_root = alloy_consensus::proofs::calculate_receipt_root(&result.receipts);
    out.check(
        Check::ReceiptsRoot,
        receipts_root == header.receipts_root,
        || {
            format!(
                "receipts root: header {}, execution {receipts_root}",
                header.receipts_root
            )
        },
    );
    let mut bloom = Bloom::ZERO;
    for r in &result.receipts {
        bloom.accrue_bloom(&r.bloom());
    }
    out.check(Check::LogsBloom, bloom == header.logs_bloom, || {
        format!(
            "logs bloom: header {}, execution {bloom}",
            header.logs_bloom
        )
    });
    if let Some(h) = header.requests_hash {
        let got = result.requests.requests_hash();
        out.check(Check::RequestsHash, got == h, || {
            format!("requests hash: header {h}, execution {got}")
        });
    }
    if let Some(b) = header.blob_gas_used {
        out.check(Check::BlobGasUsed, b == result.blob_gas_used, || {
            format!(
                "blob gas used: header {b}, execution {}",
                result.blob_gas_used
            )
        });
    }
}
