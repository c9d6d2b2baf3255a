//! The fixed-size SHA-256 fast path against `sha2`'s generic `Digest` API.
//!
//! Two groups, each with the same two functions, so the report reads as a ratio:
//!
//! - `hash64/fast` vs `hash64/sha2_digest`: 64-byte input (an internal node or a stem node).
//! - `hash32/fast` vs `hash32/sha2_digest`: 32-byte input (a leaf value).
//!
//! Run: `cargo bench -p bintrie-node --bench hash`.

use bintrie_node::{Sha256Hasher, TreeHasher};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sha2::{Digest, Sha256};
use std::hint::black_box;

/// A non-trivial input (not all zeros, not constant-foldable through `black_box`).
fn input<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    buf
}

fn bench_hash64(c: &mut Criterion) {
    let buf: [u8; 64] = input();
    // Same answer, or the comparison is meaningless.
    let expect: [u8; 32] = Sha256::digest(buf).into();
    assert_eq!(Sha256Hasher::hash64(&buf), expect);

    let mut group = c.benchmark_group("hash64");
    group.throughput(Throughput::Bytes(64));
    group.bench_function("fast", |b| b.iter(|| Sha256Hasher::hash64(black_box(&buf))));
    group.bench_function("sha2_digest", |b| {
        b.iter(|| -> [u8; 32] { Sha256::digest(black_box(&buf)).into() })
    });
    group.finish();
}

fn bench_hash32(c: &mut Criterion) {
    let buf: [u8; 32] = input();
    let expect: [u8; 32] = Sha256::digest(buf).into();
    assert_eq!(Sha256Hasher::hash32(&buf), expect);

    let mut group = c.benchmark_group("hash32");
    group.throughput(Throughput::Bytes(32));
    group.bench_function("fast", |b| b.iter(|| Sha256Hasher::hash32(black_box(&buf))));
    group.bench_function("sha2_digest", |b| {
        b.iter(|| -> [u8; 32] { Sha256::digest(black_box(&buf)).into() })
    });
    group.finish();
}

criterion_group!(benches, bench_hash64, bench_hash32);
criterion_main!(benches);
