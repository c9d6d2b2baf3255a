//! Proof verification speed (issue 11's goal: `verify-proof` at 100,000 single-key proofs per
//! second on one core): the hashing alone (`Proof::verify`), and what `verify-proof` does per
//! proof (parse the JSON line, decode the hex, verify); and a block-sized multiproof decoded and
//! checked against its root. Proofs come from a tree of 1M random stems (walks ~21 levels deep,
//! ~31 hashes a proof).
//!
//! `cargo bench -p bintrie-exec --bench proof`

use bintrie_exec::proof::ProofJson;
use bintrie_keys::TreeKey;
use bintrie_node::Sha256Hasher;
use bintrie_trie::{MemoryStore, PartialTree, Proof, Trie};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng, rngs::StdRng};

const STEMS: usize = 1_000_000;
const PROOFS: usize = 1_000;

fn bench(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(11);
    let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
    let keys: Vec<TreeKey> = (0..STEMS)
        .map(|_| TreeKey::from_bytes(rng.random()))
        .collect();
    trie.update(keys.iter().map(|k| (*k, rng.random())).collect())
        .unwrap();
    let root = trie.root();
    // Half present keys, half absent ones.
    let probes: Vec<TreeKey> = (0..PROOFS)
        .map(|i| {
            if i % 2 == 0 {
                keys[i * 997 % STEMS]
            } else {
                TreeKey::from_bytes(rng.random())
            }
        })
        .collect();
    let proofs: Vec<Proof> = probes.iter().map(|k| trie.prove(k).unwrap()).collect();
    let lines: Vec<String> = proofs
        .iter()
        .map(|p| serde_json::to_string(&ProofJson::new(&root, p)).unwrap())
        .collect();

    let mut g = c.benchmark_group("proof");
    g.throughput(Throughput::Elements(PROOFS as u64));
    g.bench_function("verify", |b| {
        b.iter(|| {
            for p in &proofs {
                p.verify::<Sha256Hasher>(&root).unwrap();
            }
        })
    });
    g.bench_function("json_parse_verify", |b| {
        b.iter(|| {
            for l in &lines {
                let j: ProofJson = serde_json::from_str(l).unwrap();
                let (r, p) = j.parse().unwrap();
                p.verify::<Sha256Hasher>(&r).unwrap();
            }
        })
    });
    g.finish();

    // A block-sized witness: 6,000 keys (the study's balanceOf block reads ~5,700 slots).
    let block_keys: Vec<TreeKey> = (0..6_000)
        .map(|i| {
            if i % 2 == 0 {
                keys[i * 7919 % STEMS]
            } else {
                TreeKey::from_bytes(rng.random())
            }
        })
        .collect();
    let mut bytes = Vec::new();
    trie.witness(&block_keys).unwrap().encode(&mut bytes);
    let mut g = c.benchmark_group("multiproof");
    g.throughput(Throughput::Elements(block_keys.len() as u64));
    g.bench_function("decode_verify_6000_keys", |b| {
        b.iter(|| {
            let mut t: PartialTree = PartialTree::decode(&bytes).unwrap();
            t.verify(&root).unwrap();
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
