//! Consensus checks of a post-merge block that do not need its state: the header against its
//! parent's, and the body against the header's roots.

use crate::ChainSpec;
use alloy_consensus::{Block, EMPTY_OMMER_ROOT_HASH, Header, Transaction as _, TxEnvelope, proofs};
use alloy_eips::eip1559::BaseFeeParams;
use alloy_eips::eip4844::DATA_GAS_PER_BLOB;
use alloy_hardforks::EthereumHardforks;
use alloy_primitives::{B64, U256};

/// The lowest gas limit a block may have.
const MIN_GAS_LIMIT: u64 = 5000;
/// The highest gas limit a block may have (EIP-1985).
const MAX_GAS_LIMIT: u64 = i64::MAX as u64;

/// The parent may be a test's genesis, never checked itself: a gas used over its gas limit, a
/// base fee whose next value overflows u64, or blob gas fields whose sum overflows it (or a
/// blob gas used over its fork's most) would make the next block's formulas overflow (a panic
/// in a debug build, a wrapped value in a release one). The block is then invalid.
fn parent_in_range(chain: &ChainSpec, parent: &Header) -> Result<(), String> {
    if parent.gas_used > parent.gas_limit {
        return Err(format!(
            "the parent's gas used {} is over its gas limit {}: no base fee follows from it",
            parent.gas_used, parent.gas_limit
        ));
    }
    // With the gas used within the limit, the base fee rises by at most an eighth, plus 1.
    if let Some(fee) = parent.base_fee_per_gas
        && fee.checked_add(fee / 8 + 1).is_none()
    {
        return Err(format!(
            "the parent's base fee {fee} is out of range: the next one would pass 2^64"
        ));
    }
    let (excess, used) = (
        parent.excess_blob_gas.unwrap_or(0),
        parent.blob_gas_used.unwrap_or(0),
    );
    if let Some(params) = chain.blob_params(parent.timestamp)
        && (used > params.max_blob_gas_per_block() || excess.checked_add(used).is_none())
    {
        return Err(format!(
            "the parent's blob gas ({used} used, {excess} excess) is out of range: no excess \
             blob gas follows from it"
        ));
    }
    Ok(())
}

/// Checks `block` against `parent` (the last block accepted) under `chain`'s rules: number,
/// parent hash, timestamp, gas limit bounds, gas used, extra data, proof-of-work fields zero
/// (post-merge), no ommers, base fee, the fork fields (withdrawals root, blob gas, parent beacon
/// root, requests hash) present exactly when their fork is on, excess blob gas, and the
/// transactions and withdrawals roots. Returns the first rule broken.
pub(crate) fn check_block(
    chain: &ChainSpec,
    parent: &Header,
    block: &Block<TxEnvelope>,
) -> Result<(), String> {
    let h = &block.header;
    let parent_hash = parent.hash_slow();
    if h.parent_hash != parent_hash {
        return Err(format!(
            "unknown parent: parent hash {} is not the last block's {parent_hash}",
            h.parent_hash
        ));
    }
    parent_in_range(chain, parent)?;
    // Checked: a parent at u64::MAX has no next number (wrapped, block 0 followed it).
    if parent.number.checked_add(1) != Some(h.number) {
        return Err(format!(
            "block number {} does not follow its parent's {}",
            h.number, parent.number
        ));
    }
    if h.timestamp <= parent.timestamp {
        return Err(format!(
            "timestamp {} is not after its parent's {}",
            h.timestamp, parent.timestamp
        ));
    }
    if h.gas_limit > MAX_GAS_LIMIT {
        return Err(format!("gas limit {} is over 2^63 - 1", h.gas_limit));
    }
    if h.gas_used > h.gas_limit {
        return Err(format!(
            "gas used {} is over the gas limit {}",
            h.gas_used, h.gas_limit
        ));
    }
    let bound = parent.gas_limit / 1024;
    if h.gas_limit.abs_diff(parent.gas_limit) >= bound || h.gas_limit < MIN_GAS_LIMIT {
        return Err(format!(
            "gas limit {} is not within the parent's {} ± {bound} (and at least {MIN_GAS_LIMIT})",
            h.gas_limit, parent.gas_limit
        ));
    }
    if h.extra_data.len() > 32 {
        return Err(format!(
            "extra data of {} bytes (at most 32)",
            h.extra_data.len()
        ));
    }
    if h.difficulty != U256::ZERO || h.nonce != B64::ZERO {
        return Err("difficulty or nonce is not zero after the Merge".into());
    }
    if h.ommers_hash != EMPTY_OMMER_ROOT_HASH || !block.body.ommers.is_empty() {
        return Err("uncles after the Merge".into());
    }
    let base_fee = parent.next_block_base_fee(BaseFeeParams::ethereum());
    if h.base_fee_per_gas != base_fee {
        return Err(format!(
            "base fee {:?}, expected {base_fee:?} from the parent",
            h.base_fee_per_gas
        ));
    }
    let tx_root = proofs::calculate_transaction_root(&block.body.transactions);
    if h.transactions_root != tx_root {
        return Err(format!(
            "transactions root {} does not match the transactions ({tx_root})",
            h.transactions_root
        ));
    }
    let shanghai = chain.is_shanghai_active_at_timestamp(h.timestamp);
    match (&block.body.withdrawals, h.withdrawals_root, shanghai) {
        (Some(w), Some(root), true) => {
            let got = proofs::calculate_withdrawals_root(w);
            if got != root {
                return Err(format!(
                    "withdrawals root {root} does not match the withdrawals ({got})"
                ));
            }
        }
        (None, None, false) => {}
        _ => return Err("withdrawals present before Shanghai or missing after it".into()),
    }
    check_fork_fields(chain, h)?;
    if let (Some(used), Some(params)) = (h.blob_gas_used, chain.blob_params(h.timestamp)) {
        let blobs: u64 = block
            .body
            .transactions
            .iter()
            .filter_map(|t| t.blob_versioned_hashes())
            .map(|v| v.len() as u64)
            .sum();
        if used != blobs * DATA_GAS_PER_BLOB || used > params.max_blob_gas_per_block() {
            return Err(format!(
                "blob gas used {used}: the transactions carry {blobs} blobs (at most {} gas)",
                params.max_blob_gas_per_block()
            ));
        }
        let parent_params = chain.blob_params(parent.timestamp).unwrap_or(params);
        let expected = parent
            .next_block_excess_blob_gas(parent_params)
            .unwrap_or(0);
        if h.excess_blob_gas != Some(expected) {
            return Err(format!(
                "excess blob gas {:?}, expected {expected} from the parent",
                h.excess_blob_gas
            ));
        }
    }
    Ok(())
}

/// The header's fork fields present exactly when their fork is on at its timestamp under
/// `chain`: the withdrawals root (Shanghai), the blob gas fields and the parent beacon root
/// (Cancun), the requests hash (Prague). Returns the first that is not.
pub(crate) fn check_fork_fields(chain: &ChainSpec, h: &Header) -> Result<(), String> {
    if chain.is_shanghai_active_at_timestamp(h.timestamp) != h.withdrawals_root.is_some() {
        return Err("withdrawals present before Shanghai or missing after it".into());
    }
    let cancun = chain.is_cancun_active_at_timestamp(h.timestamp);
    if cancun != (h.blob_gas_used.is_some() && h.excess_blob_gas.is_some())
        || cancun != h.parent_beacon_block_root.is_some()
    {
        return Err(
            "blob gas fields or parent beacon root present before Cancun or missing after it"
                .into(),
        );
    }
    let prague = chain.is_prague_active_at_timestamp(h.timestamp);
    if prague != h.requests_hash.is_some() {
        return Err("requests hash present before Prague or missing after it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parent (a test's genesis, never checked itself) whose gas, base fee or blob gas
    /// fields overflow the next block's formulas makes the block invalid, without a panic (in
    /// this debug build alloy's formulas would panic on the overflow).
    #[test]
    fn a_parent_whose_fields_overflow_the_formulas_makes_the_block_invalid() {
        let chain = ChainSpec::mainnet();
        // In Cancun, before Prague.
        let timestamp = 1_720_000_000;
        let good = Header {
            number: 1,
            timestamp,
            gas_limit: 30_000_000,
            gas_used: 15_000_000,
            base_fee_per_gas: Some(7),
            withdrawals_root: Some(alloy_consensus::constants::EMPTY_WITHDRAWALS),
            blob_gas_used: Some(0),
            excess_blob_gas: Some(0),
            parent_beacon_block_root: Some(Default::default()),
            ..Default::default()
        };
        let child = |parent: &Header| Block::<TxEnvelope> {
            header: Header {
                number: 2,
                parent_hash: parent.hash_slow(),
                timestamp: timestamp + 12,
                gas_limit: 30_000_000,
                base_fee_per_gas: Some(7),
                transactions_root: alloy_consensus::constants::EMPTY_TRANSACTIONS,
                ..good.clone()
            },
            body: alloy_consensus::BlockBody {
                withdrawals: Some(Default::default()),
                ..Default::default()
            },
        };
        // The child of the good parent passes (so the cases below fail on their own field).
        check_block(&chain, &good, &child(&good)).unwrap();
        let over_gas = Header {
            gas_used: 30_000_001,
            ..good.clone()
        };
        let high_fee = Header {
            gas_used: 30_000_000,
            base_fee_per_gas: Some(u64::MAX - 1),
            ..good.clone()
        };
        let blob_excess = Header {
            excess_blob_gas: Some(u64::MAX),
            blob_gas_used: Some(DATA_GAS_PER_BLOB),
            ..good.clone()
        };
        let blob_used = Header {
            blob_gas_used: Some(u64::MAX / 2),
            ..good.clone()
        };
        for (parent, want) in [
            (over_gas, "over its gas limit"),
            (high_fee, "base fee"),
            (blob_excess, "blob gas"),
            (blob_used, "blob gas"),
        ] {
            let err = check_block(&chain, &parent, &child(&parent)).unwrap_err();
            assert!(
                err.contains(want) && err.contains("parent"),
                "{want}: {err}"
            );
        }
    }

    /// A parent at the highest block number has no next one: block 0 (what `+ 1` wrapped to)
    /// is refused, as any number that is not the parent's plus one.
    #[test]
    fn the_block_after_the_highest_number_is_refused() {
        let chain = ChainSpec::mainnet();
        let parent = Header {
            number: u64::MAX,
            ..Default::default()
        };
        for number in [0, 1, u64::MAX] {
            let block = Block::<TxEnvelope> {
                header: Header {
                    number,
                    parent_hash: parent.hash_slow(),
                    ..Default::default()
                },
                body: Default::default(),
            };
            let err = check_block(&chain, &parent, &block).unwrap_err();
            assert!(
                err.contains("does not follow its parent's"),
                "{number}: {err}"
            );
        }
    }
}
