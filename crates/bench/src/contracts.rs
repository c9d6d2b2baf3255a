//! The workload contracts (`testdata/bench/`, compiled from Solidity by `build.sh`) and their
//! calldata.
//!
//! The runtime bytecode is placed straight into the state with its storage written by hand, so
//! the storage layout below must match `Token.sol`'s declaration order (a test checks it by
//! executing `balanceOf`, `totalSupply` and `allowance` against hand-written slots).

use alloy_primitives::{Address, Bytes, U256, address, keccak256};

/// Runtime bytecode of the ERC-20 (`testdata/bench/Token.sol`).
pub fn token_code() -> Vec<u8> {
    decode_hex(include_str!("../../../testdata/bench/Token.runtime.hex"))
}

/// Runtime bytecode of the loop driver (`testdata/bench/Driver.sol`).
pub fn driver_code() -> Vec<u8> {
    decode_hex(include_str!("../../../testdata/bench/Driver.runtime.hex"))
}

fn decode_hex(s: &str) -> Vec<u8> {
    // The files are produced by build.sh and checked by the tests; a corrupt file is a build
    // defect, not user input.
    hex::decode(s.trim().trim_start_matches("0x")).expect("testdata/bench/*.hex is valid hex")
}

/// Where the ERC-20 lives.
pub const TOKEN: Address = address!("0x00000000000000000000000000000000007070aa");
/// Where the driver lives.
pub const DRIVER: Address = address!("0x0000000000000000000000000000000000d71e00");
/// The externally owned account that sends every benchmark transaction.
pub const SENDER: Address = address!("0x00000000000000000000000000000000000005e0");
/// The blocks' fee recipient.
pub const COINBASE: Address = address!("0x00000000000000000000000000000000c0ffee00");

/// Token storage slot of the `balanceOf` mapping.
pub const BALANCES_SLOT: u8 = 0;
/// Token storage slot of the `allowance` mapping.
pub const ALLOWANCES_SLOT: u8 = 1;
/// Token storage slot of `totalSupply`.
pub const TOTAL_SUPPLY_SLOT: u8 = 2;
/// Token storage slot of `name`.
pub const NAME_SLOT: u8 = 3;
/// Token storage slot of `symbol`.
pub const SYMBOL_SLOT: u8 = 4;

/// Solidity's slot of `mapping[key]` for a mapping declared at `slot`.
pub fn mapping_slot(key: U256, slot: U256) -> U256 {
    let mut pre = [0u8; 64];
    pre[..32].copy_from_slice(&key.to_be_bytes::<32>());
    pre[32..].copy_from_slice(&slot.to_be_bytes::<32>());
    U256::from_be_bytes(keccak256(pre).0)
}

/// The token slot of `balanceOf[holder]`.
pub fn balance_slot(holder: Address) -> U256 {
    mapping_slot(address_word(holder), U256::from(BALANCES_SLOT))
}

/// The token slot of `allowance[owner][spender]`.
pub fn allowance_slot(owner: Address, spender: Address) -> U256 {
    let inner = mapping_slot(address_word(owner), U256::from(ALLOWANCES_SLOT));
    mapping_slot(address_word(spender), inner)
}

/// A Solidity short string (< 32 bytes) as stored in one slot: bytes left-aligned, length x 2
/// in the last byte.
pub fn short_string(s: &str) -> U256 {
    assert!(s.len() < 32, "short strings only");
    let mut w = [0u8; 32];
    w[..s.len()].copy_from_slice(s.as_bytes());
    w[31] = (s.len() * 2) as u8;
    U256::from_be_bytes(w)
}

/// The address `start + i` of the workloads' counters (the low 160 bits).
pub fn counter_address(n: U256) -> Address {
    Address::from_word(n.to_be_bytes::<32>().into())
}

/// An address as a 32-byte ABI word.
pub fn address_word(a: Address) -> U256 {
    U256::from_be_slice(a.as_slice())
}

fn call(signature: &str, args: &[U256]) -> Bytes {
    let mut d = keccak256(signature.as_bytes())[..4].to_vec();
    for a in args {
        d.extend_from_slice(&a.to_be_bytes::<32>());
    }
    d.into()
}

/// `token.balanceOf(holder)`.
pub fn balance_of(holder: Address) -> Bytes {
    call("balanceOf(address)", &[address_word(holder)])
}

/// `token.totalSupply()`.
pub fn total_supply() -> Bytes {
    call("totalSupply()", &[])
}

/// `token.allowance(owner, spender)`.
pub fn allowance(owner: Address, spender: Address) -> Bytes {
    call(
        "allowance(address,address)",
        &[address_word(owner), address_word(spender)],
    )
}

/// `driver.balanceOfLoop(TOKEN, start, count)`: balanceOf(start + i) for i < count.
pub fn balance_of_loop(start: U256, count: u64) -> Bytes {
    call(
        "balanceOfLoop(address,uint256,uint256)",
        &[address_word(TOKEN), start, U256::from(count)],
    )
}

/// `driver.approveLoop(TOKEN, start, count)`: approve(start + i, i + 1) for i < count.
pub fn approve_loop(start: U256, count: u64) -> Bytes {
    call(
        "approveLoop(address,uint256,uint256)",
        &[address_word(TOKEN), start, U256::from(count)],
    )
}

/// `driver.mixed(TOKEN, start, reads, writes)`: a balanceOf loop then an approve loop.
pub fn mixed(start: U256, reads: u64, writes: u64) -> Bytes {
    call(
        "mixed(address,uint256,uint256,uint256)",
        &[
            address_word(TOKEN),
            start,
            U256::from(reads),
            U256::from(writes),
        ],
    )
}

/// `driver.sloadLoop(start, count)`: reads the driver's own slots start .. start + count.
pub fn sload_loop(start: u64, count: u64) -> Bytes {
    call(
        "sloadLoop(uint256,uint256)",
        &[U256::from(start), U256::from(count)],
    )
}

/// The four regions of `sstoreVariants`, in driver storage.
#[derive(Clone, Copy, Debug)]
pub struct SstoreRegions {
    /// zero -> nonzero: slots never written before this run.
    pub fresh: U256,
    /// nonzero -> other: pre-populated, rewritten with a run-dependent value.
    pub other: U256,
    /// nonzero -> same: pre-populated with `same_value`, rewritten with it.
    pub same: U256,
    /// zero -> zero: never written, written with 0.
    pub zero: U256,
}

/// `driver.sstoreVariants(...)`: `count` sequential slots through each of the four transitions.
pub fn sstore_variants(
    r: &SstoreRegions,
    count: u64,
    value: U256,
    same_value: U256,
    load_first: bool,
) -> Bytes {
    call(
        "sstoreVariants(uint256,uint256,uint256,uint256,uint256,uint256,uint256,bool)",
        &[
            r.fresh,
            r.other,
            r.same,
            r.zero,
            U256::from(count),
            value,
            same_value,
            U256::from(load_first as u8),
        ],
    )
}
