// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

// Driver: the loops of the whole-system benchmark (see README.md).
//
// It declares NO state variables: the benchmark pre-populates the Driver's own
// storage (slots 0, 1, 2, ...) and sloadLoop / sstoreLoop / sstoreVariants read
// and write those raw slots directly.
//
// Loop bodies are inline assembly to keep per-iteration overhead small, but
// every ERC-20 call is a real STATICCALL/CALL into the token, and its result is
// checked (a failed call's revert data is bubbled up). Address and slot
// arithmetic wraps (no overflow checks): the address of iteration i is
// address(uint160(start + i)), slot start + i is taken mod 2^256.
contract Driver {
    // keccak256("balanceOf(address)")[:4]
    bytes4 private constant BALANCE_OF = 0x70a08231;
    // keccak256("approve(address,uint256)")[:4]
    bytes4 private constant APPROVE = 0x095ea7b3;

    /// sum of token.balanceOf(address(uint160(start + i))) for i in 0..count.
    function balanceOfLoop(address token, uint256 start, uint256 count) external view returns (uint256 sum) {
        sum = _balanceOfLoop(token, start, count);
    }

    /// token.approve(address(uint160(start + i)), i + 1) for i in 0..count:
    /// every call writes allowance[driver][start + i].
    function approveLoop(address token, uint256 start, uint256 count) external {
        _approveLoop(token, start, count);
    }

    /// A balanceOf loop over start .. start+reads-1, then an approve loop over
    /// spenders start+reads .. start+reads+writes-1 (values 1, 2, ...).
    /// Returns the balanceOf sum.
    function mixed(address token, uint256 start, uint256 reads, uint256 writes) external returns (uint256 sum) {
        sum = _balanceOfLoop(token, start, reads);
        uint256 writeStart;
        unchecked {
            writeStart = start + reads;
        }
        _approveLoop(token, writeStart, writes);
    }

    /// Sum (mod 2^256) of the Driver's own slots start .. start+count-1.
    function sloadLoop(uint256 start, uint256 count) external view returns (uint256 acc) {
        assembly ("memory-safe") {
            let end := add(start, count)
            for { let slot := start } iszero(eq(slot, end)) { slot := add(slot, 1) } {
                acc := add(acc, sload(slot))
            }
        }
    }

    /// sstore(start + i, value) for i in 0..count; with loadFirst each slot is
    /// sload-ed first and folded into the returned sum (else 0 is returned).
    function sstoreLoop(uint256 start, uint256 count, uint256 value, bool loadFirst) external returns (uint256 acc) {
        acc = _sstoreRun(start, count, value, loadFirst);
    }

    /// Four sstore phases of `count` sequential slots each, on the Driver's own
    /// storage (the benchmark prepares the slots' prior values):
    ///   freshStart..  zero -> nonzero   (writes value)
    ///   otherStart..  nonzero -> other  (writes value)
    ///   sameStart..   nonzero -> same   (writes sameValue)
    ///   zeroStart..   zero -> zero      (writes 0)
    /// With loadFirst each slot is sload-ed before its sstore; the returned
    /// value is the sum of everything loaded (0 without loadFirst).
    function sstoreVariants(
        uint256 freshStart,
        uint256 otherStart,
        uint256 sameStart,
        uint256 zeroStart,
        uint256 count,
        uint256 value,
        uint256 sameValue,
        bool loadFirst
    ) external returns (uint256 acc) {
        unchecked {
            acc = _sstoreRun(freshStart, count, value, loadFirst);
            acc += _sstoreRun(otherStart, count, value, loadFirst);
            acc += _sstoreRun(sameStart, count, sameValue, loadFirst);
            acc += _sstoreRun(zeroStart, count, 0, loadFirst);
        }
    }

    function _sstoreRun(uint256 start, uint256 count, uint256 value, bool loadFirst) private returns (uint256 acc) {
        assembly ("memory-safe") {
            let end := add(start, count)
            switch loadFirst
            case 0 {
                for { let slot := start } iszero(eq(slot, end)) { slot := add(slot, 1) } {
                    sstore(slot, value)
                }
            }
            default {
                for { let slot := start } iszero(eq(slot, end)) { slot := add(slot, 1) } {
                    acc := add(acc, sload(slot))
                    sstore(slot, value)
                }
            }
        }
    }

    function _balanceOfLoop(address token, uint256 start, uint256 count) private view returns (uint256 sum) {
        bytes4 selector = BALANCE_OF;
        assembly ("memory-safe") {
            // Scratch at the free memory pointer (not advanced: nothing else
            // allocates before this returns). [ptr, ptr+0x24) is the calldata,
            // [ptr+0x40, ptr+0x60) the returned word.
            let ptr := mload(0x40)
            mstore(ptr, selector)
            let out := add(ptr, 0x40)
            for { let i := 0 } lt(i, count) { i := add(i, 1) } {
                mstore(add(ptr, 0x04), and(add(start, i), 0xffffffffffffffffffffffffffffffffffffffff))
                if iszero(staticcall(gas(), token, ptr, 0x24, out, 0x20)) {
                    returndatacopy(ptr, 0, returndatasize())
                    revert(ptr, returndatasize())
                }
                // A token without code "succeeds" with no data: refuse it.
                if lt(returndatasize(), 0x20) { revert(0, 0) }
                sum := add(sum, mload(out))
            }
        }
    }

    function _approveLoop(address token, uint256 start, uint256 count) private {
        bytes4 selector = APPROVE;
        assembly ("memory-safe") {
            // [ptr, ptr+0x44) is the calldata, [ptr+0x60, ptr+0x80) the
            // returned word.
            let ptr := mload(0x40)
            mstore(ptr, selector)
            let out := add(ptr, 0x60)
            for { let i := 0 } lt(i, count) { i := add(i, 1) } {
                mstore(add(ptr, 0x04), and(add(start, i), 0xffffffffffffffffffffffffffffffffffffffff))
                mstore(add(ptr, 0x24), add(i, 1))
                if iszero(call(gas(), token, 0, ptr, 0x44, out, 0x20)) {
                    returndatacopy(ptr, 0, returndatasize())
                    revert(ptr, returndatasize())
                }
                // approve must return exactly true.
                if or(lt(returndatasize(), 0x20), iszero(eq(mload(out), 1))) { revert(0, 0) }
            }
        }
    }
}
