//! `bintrie prove` and `bintrie verify-proof` end to end: present and absent keys against a
//! real database, and proofs tampered with or malformed as a hostile user would.

use crate::common::*;

use std::path::Path;
use std::process::Output;

fn key(n: u32, sub: u8) -> String {
    // Stems that share long prefixes, so walks end at stems, empty subtrees and other stems.
    format!("{:054x}{n:08x}{sub:02x}", 0)
}

/// A database in `dir`/db holding the `KEY VALUE` `lines`.
fn import(dir: &Path, lines: impl Iterator<Item = String>) -> std::path::PathBuf {
    import_as(dir, lines, &[])
}

/// [`import`], with `extra` arguments (`--layout log`).
fn import_as(
    dir: &Path,
    lines: impl Iterator<Item = String>,
    extra: &[&str],
) -> std::path::PathBuf {
    let file = dir.join("in.txt");
    std::fs::write(&file, lines.collect::<String>()).unwrap();
    let db = dir.join("db");
    let o = bin()
        .args(["import", "--relaxed", "--db"])
        .arg(&db)
        .arg("-i")
        .arg(&file)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    db
}

fn prove(db: &Path, k: &str) -> serde_json::Value {
    let o = bin()
        .args(["prove", "--db"])
        .arg(db)
        .arg(k)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn verify(dir: &Path, proof: &serde_json::Value, extra: &[&str]) -> Output {
    let f = dir.join("proof.json");
    std::fs::write(&f, proof.to_string()).unwrap();
    bin()
        .args(["verify-proof", "--proof"])
        .arg(&f)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn proofs_of_present_and_absent_keys_verify_and_tampered_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = import(
        dir.path(),
        (0..200u32).map(|n| format!("{} {:064x}\n", key(n * 3, (n % 7) as u8), n + 1)),
    );

    // Present: the value `get` reads.
    for n in [0u32, 5, 199] {
        let k = key(n * 3, (n % 7) as u8);
        let p = prove(&db, &k);
        let o = verify(dir.path(), &p, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), format!("0x{:064x}", n + 1));
        assert_eq!(p["stem_siblings"].as_array().map(Vec::len), Some(8));
    }
    // Absent: another sub-index of a present stem, a stem between present ones, a far key.
    let mut ends = std::collections::BTreeSet::new();
    for k in [key(3, 200), key(4, 0), format!("ff{}", &key(1, 1)[2..])] {
        let p = prove(&db, &k);
        assert!(p["value"].is_null());
        let other = p.get("subtree_root").is_some();
        assert_eq!(other, p.get("other_stem_leaf").is_some(), "{p}");
        ends.insert((p["stem"].is_null(), other));
        let o = verify(dir.path(), &p, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), "absent");
    }
    assert!(
        ends.len() >= 2,
        "the absent keys all ended the same way: {ends:?}"
    );

    let good = prove(&db, &key(15, 5));
    let refused = |p: &serde_json::Value, extra: &[&str], why: &str| {
        let o = verify(dir.path(), p, extra);
        assert_eq!(o.status.code(), Some(1), "{why}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{why}: {err}");
        err
    };
    // Against another root.
    let err = refused(&good, &["--root", &format!("0x{:064x}", 9)], "another root");
    assert!(err.contains("does not verify"), "{err}");
    // A changed value, a flipped sibling, a dropped sibling.
    let mut p = good.clone();
    p["value"] = format!("0x{:064x}", 77).into();
    refused(&p, &[], "another value");
    let mut p = good.clone();
    let s = p["siblings"][0].as_str().unwrap().to_string();
    let flipped = format!("{}{}", &s[..65], if s.ends_with('0') { "1" } else { "0" });
    p["siblings"][0] = flipped.into();
    refused(&p, &[], "a flipped sibling");
    let mut p = good.clone();
    p["siblings"].as_array_mut().unwrap().pop();
    refused(&p, &[], "a dropped sibling");
    // Malformed: lengths, non-hex, non-ASCII, unknown fields, too deep, not JSON.
    let mut p = good.clone();
    p["stem_siblings"].as_array_mut().unwrap().pop();
    assert!(refused(&p, &[], "7 stem siblings").contains("expected 8"));
    let mut p = good.clone();
    p["key"] = "0x12".into();
    assert!(refused(&p, &[], "a short key").contains("key"));
    let mut p = good.clone();
    p["value"] = format!("0x{}é", "0".repeat(63)).into();
    refused(&p, &[], "non-ASCII hex");
    let mut p = good.clone();
    p["extra"] = 1.into();
    refused(&p, &[], "an unknown field");
    let mut p = good.clone();
    p["siblings"] = vec![format!("0x{:064x}", 0); 249].into();
    assert!(refused(&p, &[], "249 levels").contains("248"));
    // Proofs in a JSON array: said to be one, not serde's "expected a string".
    let err = refused(
        &serde_json::json!([good.clone(), good.clone()]),
        &[],
        "an array",
    );
    assert!(err.contains("a JSON array, not a proof"), "{err}");
    let f = dir.path().join("garbage.json");
    std::fs::write(&f, b"\xff\x00{").unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// EIP-7864's stem and internal nodes both hash 64 bytes with no domain tag. When every stem
/// starts with bit 1, the root's left child is empty (32 zero bytes), so the root also hashes
/// as a stem of 31 zero bytes over its right child: a proof saying the walk ends there "proves"
/// any key absent, a present one too. `verify-proof` accepted it (a hostile-user pass); it now
/// asks for one of that stem's present leaves, which such a node cannot open.
#[test]
fn an_internal_node_posing_as_a_stem_does_not_prove_a_present_key_absent() {
    let dir = tempfile::tempdir().unwrap();
    let high = |n: u32| format!("ff{:054x}{:08x}", 0, n.wrapping_mul(7919));
    let db = import(
        dir.path(),
        (1..=300u32).map(|n| format!("{} {:064x}\n", high(n), n)),
    );
    let present = prove(&db, &high(17));
    assert_eq!(present["value"], format!("0x{:064x}", 17));
    // The root's right child: the sibling at the root of a key that goes left (not the zero
    // stem's: no proof of that one verifies here, and `prove` refuses it).
    let left = prove(&db, &format!("{:060x}0100", 0));
    assert!(left["stem"].is_null() && left["siblings"].as_array().unwrap().len() == 1);
    let forged = serde_json::json!({
        "root": present["root"],
        "key": present["key"],
        "value": null,
        "siblings": [],
        "stem": format!("0x{}", "00".repeat(31)),
        "subtree_root": left["siblings"][0],
    });
    let o = verify(dir.path(), &forged, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "forged absence accepted: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("other_stem_leaf"), "{}", stderr(&o));
    // A leaf of the key's real stem does not fold to that hash.
    let mut p = forged;
    p["other_stem_leaf"] = serde_json::json!({
        "index": 17 * 7919 % 256,
        "value": present["value"],
        "siblings": present["stem_siblings"],
    });
    let o = verify(dir.path(), &p, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("does not fold"), "{}", stderr(&o));
}

/// Several keys give one proof line each; `verify-proof` checks a file of them line by line
/// and names the first that fails.
#[test]
fn many_proofs_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = import(
        dir.path(),
        (0..50u32).map(|n| format!("{} {:064x}\n", key(n * 2, 1), n + 1)),
    );
    let keys = [key(0, 1), key(1, 1), key(98, 1), key(4, 9)];
    let o = bin()
        .args(["prove", "--db"])
        .arg(&db)
        .args(&keys)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = stdout(&o);
    assert_eq!(lines.lines().count(), 4);
    let proofs = dir.path().join("proofs.jsonl");
    std::fs::write(&proofs, &lines).unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&proofs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("0x{:064x}\nabsent\n0x{:064x}\nabsent", 1, 50)
    );
    // The third proof changed: exit 1 naming it.
    let mut bad: Vec<String> = lines.lines().map(String::from).collect();
    bad[2] = bad[2].replacen("\"value\":\"0x00", "\"value\":\"0x01", 1);
    std::fs::write(&proofs, bad.join("\n")).unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&proofs)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("proof 3 (byte"), "{}", stderr(&o));
    // Two proofs on one line, and one pretty-printed over many lines, are three proofs.
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let one_line = format!("{} {}", first, first);
    let pretty = serde_json::to_string_pretty(&first).unwrap();
    std::fs::write(&proofs, format!("{one_line}\n{pretty}\n")).unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&proofs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 3);
    // An object that never closes is refused once it passes 1 MiB (the input is read once:
    // re-parsing the pending text at every newline took time quadratic in it).
    std::fs::write(&proofs, format!("{{{}", "\n".repeat(2 << 20))).unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&proofs)
        .output()
        .unwrap();
    assert!(stderr(&o).contains("larger than"), "{}", stderr(&o));
    // An empty file holds no proof.
    std::fs::write(&proofs, "\n").unwrap();
    let o = bin()
        .args(["verify-proof", "--proof"])
        .arg(&proofs)
        .output()
        .unwrap();
    assert!(stderr(&o).contains("no proof in it"), "{}", stderr(&o));
    // A bad key among several is named by position.
    let o = bin()
        .args(["prove", "--db"])
        .arg(&db)
        .args([keys[0].as_str(), "0xzz"])
        .output()
        .unwrap();
    assert!(stderr(&o).contains("KEY 2"), "{}", stderr(&o));
}

/// `prove` beside a writer committing block after block: every run succeeds with a proof that
/// verifies against the root it names (the trie's reads span many transactions, and a commit
/// between two of them failed the proof as "the database changed under this writer").
#[test]
fn proofs_beside_a_running_import_succeed_and_verify() {
    proofs_beside_a_running_import(&[]);
}

/// The same on the log layout, whose read-only open proves at the block its scan found.
#[test]
fn proofs_on_a_log_beside_a_running_import_succeed_and_verify() {
    proofs_beside_a_running_import(&["--layout", "log"]);
}

fn proofs_beside_a_running_import(layout: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let db = import_as(
        dir.path(),
        (0..64u32).map(|n| format!("{} {:064x}\n", key(n, 1), n + 1)),
        layout,
    );
    let more = dir.path().join("more.txt");
    std::fs::write(
        &more,
        (0..6000u32)
            .map(|n| format!("{} {:064x}\n", key(n * 7 + 1000, (n % 5) as u8), n + 2))
            .collect::<String>(),
    )
    .unwrap();
    let mut writer = bin()
        .args(["import", "--relaxed", "--batch", "16", "--db"])
        .arg(&db)
        .arg("-i")
        .arg(&more)
        .args(layout)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut runs = 0;
    let mut roots = std::collections::HashSet::new();
    while writer.try_wait().unwrap().is_none() || runs < 3 {
        let k = key(runs % 64, 1);
        let proof = prove(&db, &k);
        roots.insert(proof["root"].as_str().unwrap().to_owned());
        let o = verify(dir.path(), &proof, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        runs += 1;
    }
    assert!(writer.wait().unwrap().success());
    // The proofs were taken at several blocks, so runs overlapped commits.
    assert!(roots.len() >= 2, "{runs} runs saw {} roots", roots.len());
}

/// A key whose stem is 31 zero bytes, with an empty left subtree on its walk: that node hashes
/// alike as the stem's own node, so no proof of the key can be verified. `prove` refuses it
/// by name (it printed a proof that `verify-proof` then refused as malformed); a key beside it
/// is proven as before.
#[test]
fn prove_refuses_the_zero_stem_that_no_proof_can_show() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        format!("80{:062x} {:064x}\n", 0, 1),
        format!("c0{:062x} {:064x}\n", 0, 2),
    ];
    let db = import(dir.path(), lines.into_iter());
    let o = bin()
        .args(["prove", "--db"])
        .arg(&db)
        .arg(format!("0x{:064x}", 0))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let text = stderr(&o);
    assert!(
        text.contains("no proof of key") && text.contains("31 zero bytes"),
        "{text}"
    );
    let proof = prove(&db, &format!("0x80{:062x}", 0));
    let o = verify(dir.path(), &proof, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}
