// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

// Token: a plain ERC-20 for the whole-system benchmark (see README.md).
//
// The runtime bytecode of this contract is placed directly into state and its
// storage is written by hand, so the storage layout below is a CONTRACT with
// the benchmark's state generator. Do not reorder, insert or remove state
// variables.
//
//   slot 0  mapping(address => uint256) balanceOf
//             balanceOf[holder]          at keccak256(abi.encode(holder, 0))
//   slot 1  mapping(address => mapping(address => uint256)) allowance
//             allowance[owner][spender]  at keccak256(abi.encode(spender,
//                                            keccak256(abi.encode(owner, 1))))
//   slot 2  uint256 totalSupply
//   slot 3  string name    (short string: bytes left-aligned, low byte = 2*len)
//   slot 4  string symbol  (short string: bytes left-aligned, low byte = 2*len)
//
// There is no constructor and no immutable: the runtime code depends on
// nothing but the storage above. decimals() is the constant 18 (no storage).
// Nothing mints; balances and totalSupply exist only as written into state.
// An allowance of type(uint256).max is treated as infinite by transferFrom
// (not decremented). Zero addresses are not rejected.
contract Token {
    // slot 0
    mapping(address => uint256) public balanceOf;
    // slot 1
    mapping(address => mapping(address => uint256)) public allowance;
    // slot 2
    uint256 public totalSupply;
    // slot 3
    string public name;
    // slot 4
    string public symbol;

    uint8 public constant decimals = 18;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    error InsufficientBalance(address from, uint256 balance, uint256 needed);
    error InsufficientAllowance(address owner, address spender, uint256 allowance, uint256 needed);

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < value) {
                revert InsufficientAllowance(from, msg.sender, allowed, value);
            }
            unchecked {
                allowance[from][msg.sender] = allowed - value;
            }
        }
        _move(from, to, value);
        return true;
    }

    function _move(address from, address to, uint256 value) private {
        uint256 fromBalance = balanceOf[from];
        if (fromBalance < value) {
            revert InsufficientBalance(from, fromBalance, value);
        }
        unchecked {
            // Cannot underflow (checked above). The sum of all balances is
            // bounded by totalSupply, so the credit cannot overflow either;
            // it is still checked in case state was written inconsistently.
            balanceOf[from] = fromBalance - value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
