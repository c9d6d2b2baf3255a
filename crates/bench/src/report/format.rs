//! Number formatting for the report's tables and prose.

use super::doc::NONE;

/// A number with about three to four significant digits: `6284`, `412.3`, `12.34`, `0.405`,
/// `0.00123`; non-finite values as [`NONE`].
pub(super) fn num(x: f64) -> String {
    if !x.is_finite() {
        return NONE.to_string();
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    let decimals = if a >= 1000.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        (2 - a.log10().floor() as i32).clamp(3, 9) as usize
    };
    format!("{x:.decimals$}")
}

/// A p-value as a clause: `p = 0.029`, `p < 0.001`, or `p = —` when not testable.
pub(super) fn p_is(x: Option<f64>) -> String {
    match x {
        Some(v) if v < 0.001 => "p < 0.001".to_string(),
        _ => format!("p = {}", p(x)),
    }
}

/// A state size in stems: `16M`, `1.5M`, `20k`, `999`.
pub(super) fn stems(n: u64) -> String {
    let short = |x: f64, unit: &str| {
        let t = format!("{x:.1}");
        format!("{}{unit}", t.strip_suffix(".0").unwrap_or(&t))
    };
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => short(n as f64 / 1e3, "k"),
        1_000_000..1_000_000_000 => short(n as f64 / 1e6, "M"),
        _ => short(n as f64 / 1e9, "G"),
    }
}

/// [`num`] of a present value, [`NONE`] otherwise.
pub(super) fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_string(), num)
}

/// A p-value: `<0.001`, three decimals, or [`NONE`].
pub(super) fn p(x: Option<f64>) -> String {
    match x {
        None => NONE.to_string(),
        Some(v) if v < 0.001 => "<0.001".to_string(),
        Some(v) => format!("{v:.3}"),
    }
}

/// A signed percentage with one decimal: `+4.1%`, `-12.3%`.
pub(super) fn pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// A share in whole percent: `62%`.
pub(super) fn share(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// A ratio: `3.2×`, `14×`.
pub(super) fn times(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}×")
    } else {
        format!("{x:.1}×")
    }
}

/// A byte count in binary units: `512 B`, `3.4 MiB`, `1.25 GiB`.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{} {}", num(v), UNITS[u])
    }
}

/// A count with thousands separators: `1,234,567`.
pub(super) fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in seconds as `1h 02m 03s`, `4m 05s` or `6.7 s`.
pub(super) fn duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return NONE.to_string();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let t = s.round() as u64;
    let (h, m, sec) = (t / 3600, t / 60 % 60, t % 60);
    if h > 0 {
        format!("{h}h {m:02}m {sec:02}s")
    } else {
        format!("{m}m {sec:02}s")
    }
}

/// A page size: `4 KB`, `16 KB`, or bytes when not a whole number of KB.
pub(super) fn page(size: u32) -> String {
    if size.is_multiple_of(1024) {
        format!("{} KB", size / 1024)
    } else {
        format!("{size} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_clauses() {
        assert_eq!(p_is(Some(0.0286)), "p = 0.029");
        assert_eq!(p_is(Some(0.0001)), "p < 0.001");
        assert_eq!(p_is(None), format!("p = {NONE}"));
    }

    #[test]
    fn state_sizes() {
        for (n, s) in [
            (999, "999"),
            (20_000, "20k"),
            (1_000_000, "1M"),
            (1_500_000, "1.5M"),
            (16_000_000, "16M"),
            (64_000_000, "64M"),
            (2_000_000_000, "2G"),
        ] {
            assert_eq!(stems(n), s);
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(num(6284.4), "6284");
        assert_eq!(num(412.34), "412.3");
        assert_eq!(num(12.345), "12.35");
        assert_eq!(num(0.405), "0.405");
        assert_eq!(num(0.001234), "0.00123");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(f64::NAN), NONE);
        assert_eq!(p(Some(0.0001)), "<0.001");
        assert_eq!(p(Some(0.04567)), "0.046");
        assert_eq!(pct(-12.34), "-12.3%");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(bytes(3 * 1024 * 1024), "3.00 MiB");
        assert_eq!(duration(3723.0), "1h 02m 03s");
        assert_eq!(page(4096), "4 KB");
    }
}
