//! A tiny document model rendered both as Markdown (`report.md`) and as HTML (`index.html`), so
//! the two always say the same thing.

use std::fmt::Write as _;

/// One block of the report.
pub(super) enum Block {
    /// A heading of level 1..=4.
    Heading(u8, String),
    /// A paragraph; inline `code` and **bold** are allowed.
    Para(String),
    /// A bulleted list; inline markup as in paragraphs.
    List(Vec<String>),
    /// A preformatted block, shown verbatim.
    Code(String),
    /// A table.
    Table(Table),
    /// An image (an SVG chart next to the report).
    Image {
        /// Path relative to the report.
        src: String,
        /// Alternative text and caption.
        alt: String,
    },
}

/// A table: a header row and body rows of plain-text cells (inline markup allowed).
pub(super) struct Table {
    /// Column titles.
    pub header: Vec<String>,
    /// Body rows, each as long as `header`.
    pub rows: Vec<Vec<String>>,
}

/// The cell text meaning "no value".
pub(super) const NONE: &str = "—";

impl Table {
    /// An empty table with the given column titles.
    pub(super) fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Removes every column after the first whose body cells are all [`NONE`] (or empty).
    pub(super) fn drop_empty_columns(&mut self) {
        let keep: Vec<bool> = (0..self.header.len())
            .map(|c| {
                c == 0
                    || self.rows.iter().any(|r| {
                        r.get(c)
                            .is_some_and(|cell| !cell.is_empty() && cell != NONE)
                    })
            })
            .collect();
        let filter = |cells: &mut Vec<String>| {
            let mut i = 0;
            cells.retain(|_| {
                let k = keep.get(i).copied().unwrap_or(true);
                i += 1;
                k
            });
        };
        filter(&mut self.header);
        for r in &mut self.rows {
            filter(r);
        }
    }
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Renders `blocks` as GitHub-flavoured Markdown.
pub(super) fn to_markdown(blocks: &[Block]) -> String {
    let mut out = String::new();
    for b in blocks {
        match b {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "{} {text}\n", "#".repeat(usize::from(*level).max(1)));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "{text}\n");
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(out, "- {item}");
                }
                out.push('\n');
            }
            Block::Code(text) => {
                let _ = writeln!(out, "```\n{text}\n```\n");
            }
            Block::Table(t) => {
                let row = |cells: &[String]| {
                    let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
                    format!("| {} |\n", cells.join(" | "))
                };
                out.push_str(&row(&t.header));
                let sep: Vec<&str> = (0..t.header.len())
                    .map(|i| if i == 0 { "---" } else { "---:" })
                    .collect();
                let _ = writeln!(out, "|{}|", sep.join("|"));
                for r in &t.rows {
                    out.push_str(&row(r));
                }
                out.push('\n');
            }
            Block::Image { src, alt } => {
                let _ = writeln!(out, "![{alt}]({src})\n");
            }
        }
    }
    out
}

/// Escapes `&`, `<`, `>` and `"` for HTML text and attribute values.
pub(super) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// Converts the inline markup the report emits (`code`, **bold**) to escaped HTML.
pub(super) fn inline_html(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape_html(part));
            continue;
        }
        for (j, run) in part.split("**").enumerate() {
            if j % 2 == 1 {
                let _ = write!(out, "<strong>{}</strong>", escape_html(run));
            } else {
                out.push_str(&escape_html(run));
            }
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1200px;\
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}\
table{border-collapse:collapse;margin:0.6em 0 1.4em;font-size:0.9em}\
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right;white-space:nowrap}\
th:first-child,td:first-child{text-align:left}th{background:#f2f2f2}\
tbody tr:nth-child(even){background:#fafafa}\
pre{background:#f5f5f5;padding:0.8em;overflow-x:auto}code{font-size:0.95em}\
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}\
figcaption{font-size:0.85em;color:#555}.scroll{overflow-x:auto}";

/// Renders `blocks` as a self-contained HTML page (inline CSS, no external assets besides the
/// images the blocks reference).
pub(super) fn to_html(title: &str, blocks: &[Block]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape_html(title)
    );
    for b in blocks {
        match b {
            Block::Heading(level, text) => {
                let l = (*level).clamp(1, 6);
                let _ = writeln!(out, "<h{l}>{}</h{l}>", inline_html(text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", inline_html(text));
            }
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    let _ = writeln!(out, "<li>{}</li>", inline_html(item));
                }
                out.push_str("</ul>\n");
            }
            Block::Code(text) => {
                let _ = writeln!(out, "<pre><code>{}</code></pre>", escape_html(text));
            }
            Block::Table(t) => {
                out.push_str("<div class=\"scroll\"><table>\n<thead><tr>");
                for h in &t.header {
                    let _ = write!(out, "<th>{}</th>", inline_html(h));
                }
                out.push_str("</tr></thead>\n<tbody>\n");
                for r in &t.rows {
                    out.push_str("<tr>");
                    for c in r {
                        let _ = write!(out, "<td>{}</td>", inline_html(c));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</tbody>\n</table></div>\n");
            }
            Block::Image { src, alt } => {
                let _ = writeln!(
                    out,
                    "<figure><img src=\"{}\" alt=\"{}\"><figcaption>{}</figcaption></figure>",
                    escape_html(src),
                    escape_html(alt),
                    escape_html(alt)
                );
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_markup_is_converted_and_escaped() {
        assert_eq!(
            inline_html("a **b<c** `x&y` d"),
            "a <strong>b&lt;c</strong> <code>x&amp;y</code> d"
        );
    }

    #[test]
    fn empty_columns_are_dropped() {
        let mut t = Table::new(["GD", "a", "b"]);
        t.rows.push(vec!["1".into(), NONE.into(), "2".into()]);
        t.rows.push(vec!["2".into(), NONE.into(), NONE.into()]);
        t.drop_empty_columns();
        assert_eq!(t.header, vec!["GD", "b"]);
        assert_eq!(t.rows[1], vec!["2", NONE]);
    }

    #[test]
    fn markdown_table_shape() {
        let mut t = Table::new(["GD", "x|y"]);
        t.rows.push(vec!["1".into(), "2".into()]);
        let md = to_markdown(&[Block::Table(t)]);
        assert_eq!(md, "| GD | x\\|y |\n|---|---:|\n| 1 | 2 |\n\n");
    }
}
