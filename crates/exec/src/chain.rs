//! The chain a block runs on: its id and fork schedule ([`ChainSpec`]), from mainnet's, a
//! fixture's geth `chainConfig`, or a blockchain test's `network` name.
//!
//! The executor is alloy-evm's Ethereum block executor, which applies the rules of every fork
//! from the Merge on. Proof-of-work rules (block rewards, uncles, difficulty) are not among
//! them, so a schedule whose blocks run before the Merge is refused with that reason
//! ([`ChainSpec::from_network`]) rather than run under the wrong rules.

use alloy_eips::eip6110::MAINNET_DEPOSIT_CONTRACT_ADDRESS;
use alloy_eips::eip7840::BlobParams;
use alloy_evm::eth::spec::EthExecutorSpec;
use alloy_hardforks::{EthereumChainHardforks, EthereumHardfork, EthereumHardforks, ForkCondition};
use alloy_primitives::{Address, U256};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// A chain id and fork schedule, for alloy-evm's executor (it implements alloy's
/// `EthereumHardforks` and alloy-evm's `EthExecutorSpec`).
#[derive(Clone, Debug)]
pub struct ChainSpec {
    /// The chain id transactions are signed for.
    pub chain_id: u64,
    hardforks: EthereumChainHardforks,
    deposit_contract: Option<Address>,
}

impl ChainSpec {
    /// Ethereum mainnet.
    pub fn mainnet() -> Self {
        ChainSpec {
            chain_id: 1,
            hardforks: EthereumChainHardforks::mainnet(),
            deposit_contract: Some(MAINNET_DEPOSIT_CONTRACT_ADDRESS),
        }
    }

    /// The schedule of a blockchain test's `network` (chain id 1): a fork from genesis
    /// (`Paris`/`Merge`, `Shanghai`, `Cancun`, `Prague`, `Osaka`) or a timestamp transition
    /// (`ParisToShanghaiAtTime15k`, `ShanghaiToCancunAtTime15k`, `CancunToPragueAtTime15k`,
    /// `PragueToOsakaAtTime15k`). Pre-merge networks and transitions (`Frontier` … `London`,
    /// `…At5`, `ArrowGlacierToParisAtDiffC0000`) are an error saying why: the executor does
    /// not apply proof-of-work rules.
    pub fn from_network(network: &str) -> Result<Self> {
        use EthereumHardfork as F;
        const POST_MERGE: [F; 5] = [F::Paris, F::Shanghai, F::Cancun, F::Prague, F::Osaka];
        let fork = |name: &str| -> Option<F> {
            match name {
                "Paris" | "Merge" => Some(F::Paris),
                "Shanghai" => Some(F::Shanghai),
                "Cancun" => Some(F::Cancun),
                "Prague" => Some(F::Prague),
                "Osaka" => Some(F::Osaka),
                _ => None,
            }
        };
        // (the fork from genesis, the fork from timestamp 15,000 if a transition)
        let (from, to) = match network.split_once("To") {
            Some((a, b)) => match (fork(a), b.strip_suffix("AtTime15k").and_then(fork)) {
                (Some(a), Some(b)) => (a, Some(b)),
                _ => bail!(pre_merge(network)),
            },
            None => (
                fork(network).ok_or_else(|| anyhow!(pre_merge(network)))?,
                None,
            ),
        };
        let mut forks: Vec<(F, ForkCondition)> = PRE_MERGE
            .iter()
            .map(|f| (*f, ForkCondition::ZERO_BLOCK))
            .collect();
        for f in POST_MERGE {
            let condition = if f == F::Paris {
                ForkCondition::TTD {
                    activation_block_number: 0,
                    fork_block: None,
                    total_difficulty: U256::ZERO,
                }
            } else if f <= from {
                ForkCondition::Timestamp(0)
            } else if to.is_some_and(|to| f <= to) {
                ForkCondition::Timestamp(15_000)
            } else {
                break;
            };
            forks.push((f, condition));
        }
        Ok(ChainSpec {
            chain_id: 1,
            hardforks: EthereumChainHardforks::new(forks),
            deposit_contract: Some(MAINNET_DEPOSIT_CONTRACT_ADDRESS),
        })
    }

    /// The schedule of a geth `chainConfig` object (`chainId`, `homesteadBlock` …
    /// `grayGlacierBlock`, `terminalTotalDifficulty`, `shanghaiTime` … `osakaTime`, `bpo1Time`,
    /// `bpo2Time`, `depositContractAddress`; a `blobSchedule` must give the forks' own blob
    /// parameters). Chain id 1 without other fields is mainnet. Errors name the bad field; a
    /// fork by time without `terminalTotalDifficulty` is one. Fields of forks after BPO2 are
    /// not read.
    pub fn from_geth_config(config: &Value) -> Result<Self> {
        use EthereumHardfork as F;
        let obj = config
            .as_object()
            .ok_or_else(|| anyhow!("chainConfig: expected an object"))?;
        let int = |field: &str| -> Result<Option<u64>> {
            obj.get(field)
                .map(|v| {
                    crate::json::json_u256(v, &format!("chainConfig.{field}")).and_then(|n| {
                        u64::try_from(n)
                            .map_err(|_| anyhow!("chainConfig.{field}: does not fit in 64 bits"))
                    })
                })
                .transpose()
        };
        let chain_id = int("chainId")?.unwrap_or(1);
        let blocks = [
            (F::Homestead, "homesteadBlock"),
            (F::Dao, "daoForkBlock"),
            (F::Tangerine, "eip150Block"),
            (F::SpuriousDragon, "eip158Block"),
            (F::Byzantium, "byzantiumBlock"),
            (F::Constantinople, "constantinopleBlock"),
            (F::Petersburg, "petersburgBlock"),
            (F::Istanbul, "istanbulBlock"),
            (F::MuirGlacier, "muirGlacierBlock"),
            (F::Berlin, "berlinBlock"),
            (F::London, "londonBlock"),
            (F::ArrowGlacier, "arrowGlacierBlock"),
            (F::GrayGlacier, "grayGlacierBlock"),
        ];
        let times = [
            (F::Shanghai, "shanghaiTime"),
            (F::Cancun, "cancunTime"),
            (F::Prague, "pragueTime"),
            (F::Osaka, "osakaTime"),
            (F::Bpo1, "bpo1Time"),
            (F::Bpo2, "bpo2Time"),
        ];
        check_blob_schedule(obj)?;
        if chain_id == 1
            && blocks
                .iter()
                .chain(&times)
                .all(|(_, f)| !obj.contains_key(*f))
        {
            return Ok(Self::mainnet());
        }
        let mut forks = vec![(F::Frontier, ForkCondition::ZERO_BLOCK)];
        for (fork, field) in blocks {
            if let Some(n) = int(field)? {
                forks.push((fork, ForkCondition::Block(n)));
            }
        }
        if obj.contains_key("terminalTotalDifficulty") {
            // Geth writes it as a JSON number too big for an integer (5.875e+22): a float is
            // taken as its integer part (the TTD only marks the Merge, which is by block here).
            let v = &obj["terminalTotalDifficulty"];
            let ttd = match v
                .as_f64()
                .filter(|f| v.is_f64() && f.is_finite() && *f >= 0.0)
            {
                Some(f) => U256::from(f as u128),
                None => crate::json::json_u256(v, "chainConfig.terminalTotalDifficulty")?,
            };
            // The merge block is not in a geth config; mainnet's is the only one that matters
            // for recorded blocks, and any later block is post-merge.
            let activation = if chain_id == 1 {
                alloy_hardforks::ethereum::mainnet::MAINNET_PARIS_BLOCK
            } else {
                0
            };
            forks.push((
                F::Paris,
                ForkCondition::TTD {
                    activation_block_number: activation,
                    fork_block: None,
                    total_difficulty: ttd,
                },
            ));
        }
        for (fork, field) in times {
            if let Some(t) = int(field)? {
                forks.push((fork, ForkCondition::Timestamp(t)));
            }
        }
        // The forks by time all come after the Merge, which only the TTD marks here: without
        // it the block would run as before the Merge, and fail for that, not for the config.
        if !obj.contains_key("terminalTotalDifficulty")
            && let Some((_, field)) = times.iter().find(|(_, f)| obj.contains_key(*f))
        {
            bail!(
                "chainConfig: `{field}` is given without `terminalTotalDifficulty`: the forks by \
                 time come after the Merge, which needs it"
            );
        }
        let deposit_contract = match obj.get("depositContractAddress") {
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| anyhow!("chainConfig.depositContractAddress: not a string"))?
                    .parse::<Address>()
                    .context("chainConfig.depositContractAddress")?,
            ),
            None => (chain_id == 1).then_some(MAINNET_DEPOSIT_CONTRACT_ADDRESS),
        };
        Ok(ChainSpec {
            chain_id,
            hardforks: EthereumChainHardforks::new(forks),
            deposit_contract,
        })
    }

    /// True when the block at `number` runs under proof-of-work rules (before the Merge), which
    /// the executor does not apply.
    pub fn is_pre_merge(&self, number: u64) -> bool {
        !self.is_paris_active_at_block(number)
    }

    /// The blob parameters at `timestamp` (those of the latest of Cancun, Prague, Osaka, BPO1
    /// and BPO2 active then), or `None` before Cancun.
    pub fn blob_params(&self, timestamp: u64) -> Option<BlobParams> {
        BLOB_FORKS
            .iter()
            .rev()
            .find(|(fork, _, _)| self.is_ethereum_fork_active_at_timestamp(*fork, timestamp))
            .map(|(_, _, params)| params())
    }
}

/// A fork that sets blob parameters: the fork, its `blobSchedule` name, its parameters.
type BlobFork = (EthereumHardfork, &'static str, fn() -> BlobParams);

/// The forks that set blob parameters, in order: each with its name in a geth config's
/// `blobSchedule` (its activation there is `<name>Time`) and the parameters this executor
/// applies from it on.
const BLOB_FORKS: [BlobFork; 5] = [
    (EthereumHardfork::Cancun, "cancun", BlobParams::cancun),
    (EthereumHardfork::Prague, "prague", BlobParams::prague),
    (EthereumHardfork::Osaka, "osaka", BlobParams::osaka),
    (EthereumHardfork::Bpo1, "bpo1", BlobParams::bpo1),
    (EthereumHardfork::Bpo2, "bpo2", BlobParams::bpo2),
];

/// Refuses a geth `blobSchedule` whose parameters are not the ones this executor applies for
/// the fork ([`BLOB_FORKS`]), or that names another fork the config schedules: a chain with
/// other blob parameters would be checked against the wrong ones, its blocks' blob counts and
/// fees judged by mainnet's.
fn check_blob_schedule(config: &serde_json::Map<String, Value>) -> Result<()> {
    let Some(schedule) = config.get("blobSchedule") else {
        return Ok(());
    };
    let schedule = schedule
        .as_object()
        .ok_or_else(|| anyhow!("chainConfig.blobSchedule: expected an object"))?;
    for (fork, given) in schedule {
        let ours = match BLOB_FORKS.iter().find(|(_, name, _)| name == fork) {
            Some((_, _, params)) => params(),
            // A fork this executor does not know is refused only when the config schedules it
            // (`<fork>Time`): geth lists the next forks' parameters before they are set.
            None if config.contains_key(&format!("{fork}Time")) => bail!(
                "chainConfig.blobSchedule: {} is a fork the config schedules and whose blob \
                 parameters this executor does not apply",
                crate::json::shown(fork)
            ),
            None => continue,
        };
        let at = format!("chainConfig.blobSchedule.{fork}");
        let field = |f: &str| -> Result<U256> {
            let v = given.get(f).ok_or_else(|| anyhow!("{at}.{f} is missing"))?;
            crate::json::json_u256(v, &format!("{at}.{f}"))
        };
        let theirs = (
            field("target")?,
            field("max")?,
            field("baseFeeUpdateFraction")?,
        );
        let expected = (
            U256::from(ours.target_blob_count),
            U256::from(ours.max_blob_count),
            U256::from(ours.update_fraction),
        );
        if theirs != expected {
            bail!(
                "{at}: target {}, max {}, baseFeeUpdateFraction {} differ from the fork's {}, {} \
                 and {}, the ones this executor applies",
                theirs.0,
                theirs.1,
                theirs.2,
                expected.0,
                expected.1,
                expected.2
            );
        }
    }
    Ok(())
}

/// Mainnet's schedule for a fixture block that names only a chain id (in its transactions;
/// none means mainnet): an error for another id, whose schedule the fixture does not give.
pub(crate) fn mainnet_of(block: &alloy_rpc_types_eth::Block) -> Result<ChainSpec> {
    use alloy_consensus::Transaction as _;
    let chain_id = block
        .transactions
        .txns()
        .find_map(|t| t.inner.chain_id())
        .unwrap_or(1);
    if chain_id != 1 {
        bail!(
            "chain id {chain_id}: the fixture gives no fork schedule (`chainConfig`), and only \
             mainnet's (chain id 1) is known"
        );
    }
    Ok(ChainSpec::mainnet())
}

/// Every fork before the Merge, active from genesis in a post-merge test network.
const PRE_MERGE: [EthereumHardfork; 14] = [
    EthereumHardfork::Frontier,
    EthereumHardfork::Homestead,
    EthereumHardfork::Dao,
    EthereumHardfork::Tangerine,
    EthereumHardfork::SpuriousDragon,
    EthereumHardfork::Byzantium,
    EthereumHardfork::Constantinople,
    EthereumHardfork::Petersburg,
    EthereumHardfork::Istanbul,
    EthereumHardfork::MuirGlacier,
    EthereumHardfork::Berlin,
    EthereumHardfork::London,
    EthereumHardfork::ArrowGlacier,
    EthereumHardfork::GrayGlacier,
];

/// Whether `network` names a fork schedule of Ethereum's tests, supported or not: a fork
/// (`Frontier` … `Osaka`) or a transition between two (`BerlinToLondonAt5`,
/// `ArrowGlacierToParisAtDiffC0000`, `ParisToShanghaiAtTime15k`, …). A test whose network is
/// not one (a typo, a fork this code has never heard of) is a fault of the test, not a
/// schedule the executor leaves out.
pub(crate) fn is_known_network(network: &str) -> bool {
    const FORKS: &[&str] = &[
        "Frontier",
        "Homestead",
        "Dao",
        "EIP150",
        "EIP158",
        "Byzantium",
        "Constantinople",
        "ConstantinopleFix",
        "Petersburg",
        "Istanbul",
        "MuirGlacier",
        "Berlin",
        "London",
        "ArrowGlacier",
        "GrayGlacier",
        "Paris",
        "Merge",
        "Shanghai",
        "Cancun",
        "Prague",
        "Osaka",
        // execution-spec-tests' blob-parameter-only forks after Osaka, and the next fork.
        "BPO1",
        "BPO2",
        "BPO3",
        "BPO4",
        "BPO5",
        "Amsterdam",
    ];
    let fork = |name: &str| FORKS.contains(&name);
    match network.split_once("To") {
        None => fork(network),
        Some((from, to)) => {
            fork(from)
                && to.rsplit_once("At").is_some_and(|(to, at)| {
                    fork(to) && !at.is_empty() && at.bytes().all(|b| b.is_ascii_alphanumeric())
                })
        }
    }
}

fn pre_merge(network: &str) -> String {
    format!(
        "network `{network}` is not supported: its blocks run before the Merge (or it is \
         unknown), and the executor (alloy-evm) does not apply proof-of-work rules (block \
         rewards, uncles, difficulty)"
    )
}

impl EthereumHardforks for ChainSpec {
    fn ethereum_fork_activation(&self, fork: EthereumHardfork) -> ForkCondition {
        self.hardforks.ethereum_fork_activation(fork)
    }
}

impl EthExecutorSpec for ChainSpec {
    fn deposit_contract_address(&self) -> Option<Address> {
        self.deposit_contract
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_evm::spec_by_timestamp_and_block_number as spec_at;
    use revm::primitives::hardfork::SpecId;

    #[test]
    fn networks_map_to_their_forks() {
        let at = |n: &str, t: u64| spec_at(&ChainSpec::from_network(n).unwrap(), t, 1);
        assert_eq!(at("Cancun", 0), SpecId::CANCUN);
        assert_eq!(at("Paris", 0), SpecId::MERGE);
        assert_eq!(at("Shanghai", 1), SpecId::SHANGHAI);
        assert_eq!(at("Prague", 1), SpecId::PRAGUE);
        assert_eq!(at("ShanghaiToCancunAtTime15k", 14_999), SpecId::SHANGHAI);
        assert_eq!(at("ShanghaiToCancunAtTime15k", 15_000), SpecId::CANCUN);
        assert_eq!(at("ParisToShanghaiAtTime15k", 14_999), SpecId::MERGE);
        assert_eq!(at("ParisToShanghaiAtTime15k", 15_000), SpecId::SHANGHAI);
        assert_eq!(at("CancunToPragueAtTime15k", 15_001), SpecId::PRAGUE);
        let cancun = ChainSpec::from_network("Cancun").unwrap();
        assert!(cancun.blob_params(0).is_some() && !cancun.is_pre_merge(0));
        assert!(
            ChainSpec::from_network("Shanghai")
                .unwrap()
                .blob_params(0)
                .is_none()
        );
    }

    #[test]
    fn the_networks_of_ethereums_tests_are_known_and_others_are_not() {
        for n in [
            "Cancun",
            "Frontier",
            "FrontierToHomesteadAt5",
            "HomesteadToDaoAt5",
            "HomesteadToEIP150At5",
            "EIP158ToByzantiumAt5",
            "ByzantiumToConstantinopleFixAt5",
            "BerlinToLondonAt5",
            "ArrowGlacierToParisAtDiffC0000",
            "ParisToShanghaiAtTime15k",
            "PragueToOsakaAtTime15k",
            "OsakaToBPO1AtTime15k",
            "BPO1ToBPO2AtTime15k",
            "Amsterdam",
        ] {
            assert!(is_known_network(n), "{n}");
        }
        for n in [
            "",
            "Foo",
            "cancun",
            "Cancun ",
            "CancunToNonsenseAtTime15k",
            "NonsenseToCancunAtTime15k",
            "ParisToShanghai",
            "ParisToShanghaiAt",
            "ParisToShanghaiAt-5",
            "ParisToShanghaiAtTime15kToCancunAtTime15k",
        ] {
            assert!(!is_known_network(n), "{n}");
        }
    }

    #[test]
    fn pre_merge_and_unknown_networks_are_refused_with_the_reason() {
        for n in [
            "Frontier",
            "London",
            "FrontierToHomesteadAt5",
            "ArrowGlacierToParisAtDiffC0000",
            "BerlinToLondonAt5",
            "Nonsense",
            "CancunToNonsenseAtTime15k",
            "",
        ] {
            let e = ChainSpec::from_network(n).unwrap_err().to_string();
            assert!(e.contains("proof-of-work"), "{n}: {e}");
        }
    }

    #[test]
    fn geth_config_gives_the_same_forks_as_mainnet() {
        let config: Value = serde_json::json!({
            "chainId": 1, "homesteadBlock": 1150000, "daoForkBlock": 1920000,
            "eip150Block": 2463000, "eip158Block": 2675000, "byzantiumBlock": 4370000,
            "constantinopleBlock": 7280000, "petersburgBlock": 7280000, "istanbulBlock": 9069000,
            "muirGlacierBlock": 9200000, "berlinBlock": 12244000, "londonBlock": 12965000,
            "arrowGlacierBlock": 13773000, "grayGlacierBlock": 15050000,
            "shanghaiTime": 1681338455u64, "cancunTime": 1710338135u64,
            "pragueTime": 1746612311u64, "terminalTotalDifficulty": 5.875e22,
            "depositContractAddress": "0x00000000219ab540356cbb839cbe05303d7705fa"
        });
        let spec = ChainSpec::from_geth_config(&config).unwrap();
        let mainnet = ChainSpec::mainnet();
        for (number, time) in [
            (1_150_000, 0),
            (15_537_394, 1_663_224_179),
            (17_034_870, 1_681_338_455),
            (19_426_587, 1_710_338_135),
            (22_431_084, 1_746_612_311),
        ] {
            assert_eq!(
                spec_at(&spec, time, number),
                spec_at(&mainnet, time, number)
            );
        }
        assert!(spec.is_pre_merge(15_537_393) && !spec.is_pre_merge(15_537_394));
        assert_eq!(
            spec.deposit_contract_address(),
            mainnet.deposit_contract_address()
        );
        assert_eq!(spec.chain_id, 1);
        let bad = serde_json::json!({"chainId": 1, "cancunTime": "soon"});
        let e = format!("{:#}", ChainSpec::from_geth_config(&bad).unwrap_err());
        assert!(e.contains("chainConfig.cancunTime"), "{e}");
        // A fork by time without the Merge's TTD is named, not run as before the Merge.
        let mut no_ttd = config.clone();
        no_ttd
            .as_object_mut()
            .unwrap()
            .remove("terminalTotalDifficulty");
        let e = format!("{:#}", ChainSpec::from_geth_config(&no_ttd).unwrap_err());
        assert!(
            e.contains("`shanghaiTime` is given without `terminalTotalDifficulty`"),
            "{e}"
        );
    }

    /// A `blobSchedule` equal to the forks' parameters is taken; one that differs, or names a
    /// fork whose parameters are not applied, is refused (it was ignored: a block was judged by
    /// mainnet's parameters whatever the chain's were).
    #[test]
    fn a_blob_schedule_other_than_the_forks_is_refused() {
        let with = |schedule: Value| {
            let config = serde_json::json!({
                "chainId": 1, "terminalTotalDifficulty": 0, "shanghaiTime": 0,
                "cancunTime": 0, "pragueTime": 0, "blobSchedule": schedule
            });
            ChainSpec::from_geth_config(&config).map_err(|e| format!("{e:#}"))
        };
        let mainnet = serde_json::json!({
            "cancun": {"target": 3, "max": 6, "baseFeeUpdateFraction": 3338477},
            "prague": {"target": 6, "max": 9, "baseFeeUpdateFraction": 5007716}
        });
        assert!(with(mainnet.clone()).is_ok());
        let mut other = mainnet.clone();
        other["prague"]["max"] = Value::from(1);
        let e = with(other).unwrap_err();
        assert!(
            e.contains("chainConfig.blobSchedule.prague: target 6, max 1"),
            "{e}"
        );
        // A fork not known here: listed ahead of its time, it is no matter; scheduled, refused.
        let mut unknown = mainnet.clone();
        unknown["bpo9"] = mainnet["prague"].clone();
        assert!(with(unknown.clone()).is_ok());
        let config = serde_json::json!({
            "chainId": 1, "terminalTotalDifficulty": 0, "shanghaiTime": 0, "cancunTime": 0,
            "pragueTime": 0, "bpo9Time": 5, "blobSchedule": unknown
        });
        let e = format!("{:#}", ChainSpec::from_geth_config(&config).unwrap_err());
        assert!(e.contains("the config schedules"), "{e}");
        let mut missing = mainnet;
        missing["cancun"].as_object_mut().unwrap().remove("target");
        let e = with(missing).unwrap_err();
        assert!(e.contains("blobSchedule.cancun.target is missing"), "{e}");
    }
}
