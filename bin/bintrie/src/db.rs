//! Database commands: `import`, `info`, `get`.

use crate::{hex0x, input};
use anyhow::{Context, Result, bail};
use bintrie_keys::TreeKey;
use bintrie_store::{ReadPath, StateStore, StoreOptions};
use bintrie_trie::Trie;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

/// Read path names on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ReadPathArg {
    /// From the root through the group blobs to the stem.
    Trie,
    /// One lookup in the flat stem table.
    Flat,
}

impl From<ReadPathArg> for ReadPath {
    fn from(r: ReadPathArg) -> Self {
        match r {
            ReadPathArg::Trie => ReadPath::TrieWalk,
            ReadPathArg::Flat => ReadPath::Flat,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Database directory (created when absent).
    #[arg(long)]
    db: PathBuf,
    /// Group depth (1..=8): for a new database, default 5; an existing one must match.
    #[arg(long, short = 'g', value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: Option<u8>,
    /// `KEY VALUE` lines as for `bintrie root`; `-` is stdin.
    #[arg(long, short = 'i', default_value = "-")]
    input: String,
    /// Lines per committed block.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Skip fsync on commit (a process crash still keeps the last block; an OS crash may lose
    /// recent blocks but never tears one).
    #[arg(long)]
    relaxed: bool,
    /// MDBX page size of a new database: a power of two from 4096 to 65536 (default: the OS
    /// page size). An existing database keeps the page size it was created with.
    #[arg(long)]
    page_size: Option<usize>,
}

pub fn cmd_import(args: ImportArgs) -> Result<()> {
    let store = StateStore::open(
        &args.db,
        &StoreOptions {
            group_depth: args.group_depth,
            page_size: args.page_size,
            durability: if args.relaxed {
                bintrie_store::Durability::Relaxed
            } else {
                bintrie_store::Durability::Durable
            },
            ..Default::default()
        },
    )
    .with_context(|| format!("opening {}", args.db.display()))?;
    let meta = store.meta();
    let mut trie: Trie<StateStore> = Trie::open(store, meta.group_depth, meta.root)?;
    let reader: Box<dyn BufRead> = if args.input == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            std::fs::File::open(&args.input).with_context(|| format!("opening {}", args.input))?,
        ))
    };
    let source = if args.input == "-" {
        "<stdin>".to_string()
    } else {
        args.input.clone()
    };
    let mut out = std::io::stdout().lock();
    let mut batch: Vec<(TreeKey, [u8; 32])> = Vec::new();
    let mut lines = reader.lines().enumerate();
    loop {
        // Parse up to `batch` entries (line numbers stay global for error messages).
        let mut done = true;
        for (n, line) in lines.by_ref() {
            let line = line.with_context(|| format!("{source}: reading line {}", n + 1))?;
            if let Some(kv) = input::parse_kv_line(&line, &source, n + 1)? {
                batch.push(kv);
            }
            if batch.len() as u64 >= args.batch {
                done = false;
                break;
            }
        }
        if !batch.is_empty() {
            let entries = batch.len();
            trie.update(std::mem::take(&mut batch))?;
            let block = trie.store().meta().block + 1;
            let stats = trie.commit_with(|store, set| store.write_block(set, block, &[]))?;
            writeln!(
                out,
                "committed block {block} entries {entries} root {}",
                hex0x(&stats.root)
            )?;
            out.flush()?;
        }
        if done {
            break;
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Database directory.
    #[arg(long)]
    db: PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Opens an existing database (never creates one), at its own group depth.
fn open_existing(dir: &std::path::Path) -> Result<StateStore> {
    StateStore::open(
        dir,
        &StoreOptions {
            create: false,
            ..Default::default()
        },
    )
    .with_context(|| format!("opening {}", dir.display()))
}

pub fn cmd_info(args: InfoArgs) -> Result<()> {
    let store = open_existing(&args.db)?;
    let meta = store.meta();
    let (nodes, stems, codes) = store.counts()?;
    let mut groups = 0u64;
    let mut depth_hist = [0u64; 249];
    store.for_each_node(|key, blob| match blob.first() {
        Some(0x02) => groups += 1,
        Some(0x01) => {
            let depth = key.last().copied().unwrap_or(0) as usize;
            depth_hist[depth.min(248)] += 1;
        }
        _ => {}
    })?;
    let stem_blobs: u64 = depth_hist.iter().sum();
    let (mut min, mut max, mut sum) = (None, 0usize, 0u64);
    for (d, &c) in depth_hist.iter().enumerate() {
        if c > 0 {
            min.get_or_insert(d);
            max = d;
            sum += d as u64 * c;
        }
    }
    let mean = if stem_blobs > 0 {
        sum as f64 / stem_blobs as f64
    } else {
        0.0
    };
    let size = store.file_size()?;
    if args.json {
        let hist: serde_json::Map<String, serde_json::Value> = depth_hist
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(d, c)| (d.to_string(), (*c).into()))
            .collect();
        let j = serde_json::json!({
            "root": hex0x(&meta.root),
            "block": meta.block,
            "group_depth": meta.group_depth,
            "page_size": meta.page_size,
            "format": meta.format,
            "nodes": nodes,
            "groups": groups,
            "stems": stems,
            "code": codes,
            "db_bytes": size,
            "stem_depth": {"min": min.unwrap_or(0), "mean": mean, "max": max, "histogram": hist},
        });
        println!("{j}");
    } else {
        println!("root         {}", hex0x(&meta.root));
        println!("block        {}", meta.block);
        println!("group depth  {}", meta.group_depth);
        println!("page size    {}", meta.page_size);
        println!("groups       {groups}");
        println!("stems        {stems}");
        println!("code entries {codes}");
        println!("db size      {size} bytes");
        println!(
            "stem depth   min {} mean {mean:.2} max {max}",
            min.unwrap_or(0)
        );
    }
    if stems != stem_blobs {
        bail!(
            "flat stem table has {stems} stems but the node table {stem_blobs}: the database is inconsistent"
        );
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Database directory.
    #[arg(long)]
    db: PathBuf,
    /// The 32-byte tree key (hex, 0x optional).
    key: String,
    /// How to find the stem.
    #[arg(long, value_enum, default_value = "flat")]
    read_path: ReadPathArg,
}

pub fn cmd_get(args: GetArgs) -> Result<()> {
    let key = TreeKey::from_bytes(input::parse_b32(&args.key).context("KEY")?);
    let store = open_existing(&args.db)?;
    let reader = store.reader()?;
    if let Some(values) = reader.get_stem(&key.stem, args.read_path.into())?
        && let Some(v) = values.get(key.sub_index)
    {
        println!("{}", hex0x(v));
    }
    Ok(())
}
