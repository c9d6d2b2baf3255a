//! The report: results.json, report.md, SVG charts and index.html.
