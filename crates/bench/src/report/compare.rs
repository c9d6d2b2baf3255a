//! `bintrie compare`'s table: [`crate::ab`]'s rows as Markdown, with the report's own table and
//! number formatting.

use super::doc::{Block, NONE, Table, to_markdown};
use super::format::{num, p, pct};
use super::view::Combo;
use crate::ab::AbRow;
use crate::model::ConfigKey;

/// A configuration in one cell, in the report's words: `GD-5 erc20_approve, flat + prefetch,
/// 4 KB pages, 16M stems`, or for the log `…, log layout (copied from 4 KB pages), 16M stems`.
fn describe(key: &ConfigKey) -> String {
    format!(
        "GD-{} {}, {}",
        key.group_depth,
        key.workload.name(),
        Combo::of(key).label_with(true, true)
    )
}

/// `rows` as a Markdown table, followed by a paragraph saying what each column means.
pub fn compare_markdown(rows: &[AbRow]) -> String {
    let mut table = Table::new([
        "configuration",
        "metric",
        "before",
        "after",
        "change",
        "p, blocks",
        "p, invocations",
        "rounds after lower",
        "p, rounds",
    ]);
    let side = |median: f64, blocks: usize, invocations: usize| {
        format!("{} ({blocks} blocks, {invocations} inv.)", num(median))
    };
    for r in rows {
        table.rows.push(vec![
            describe(&r.key),
            r.metric.name().to_string(),
            side(r.before_median, r.blocks.0, r.invocations.0),
            side(r.after_median, r.blocks.1, r.invocations.1),
            r.change_pct.map_or(NONE.to_string(), pct),
            p(r.p_blocks),
            p(r.p_invocations),
            r.rounds
                .map_or(NONE.to_string(), |r| format!("{}/{}", r.lower, r.paired)),
            p(r.p_rounds),
        ]);
    }
    to_markdown(&[
        Block::Table(table),
        Block::Para(
            "Medians pool every kept block of a side. p, blocks: two-sided Mann-Whitney over \
             the pooled blocks, which treats the blocks of one invocation as independent and \
             overstates when invocations differ; p, invocations: the same over one median per \
             invocation; rounds: the invocations paired by position, with the two-sided sign \
             test over the rounds whose medians differ."
                .to_string(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Layout, ReadPath, Workload};

    #[test]
    fn a_configuration_reads_in_one_cell() {
        let key = ConfigKey {
            stems: 16_000_000,
            page_size: 4096,
            group_depth: 5,
            workload: Workload::Erc20Approve,
            read_path: ReadPath::Flat,
            prefetch: true,
            layout: Layout::Log,
        };
        assert_eq!(
            describe(&key),
            "GD-5 erc20_approve, flat + prefetch, log layout (copied from 4 KB pages), 16M stems"
        );
    }
}
