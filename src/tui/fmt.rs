//! Compact number formats for narrow table cells.

/// Three significant digits with an SI suffix: `999`, `1.20k`, `45.6M`, `123G`.
pub fn si(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x.abs() < 1000.0 {
        return format!("{x:.0}");
    }
    let mut v = x;
    for unit in ["k", "M", "G", "T", "P"] {
        v /= 1000.0;
        // Rounding may carry into the next unit (999.96k -> 1000k): move on then.
        if v.abs() < 999.95 || unit == "P" {
            return match v.abs() {
                a if a < 9.995 => format!("{v:.2}{unit}"),
                a if a < 99.95 => format!("{v:.1}{unit}"),
                _ => format!("{v:.0}{unit}"),
            };
        }
    }
    unreachable!("the last unit always returns")
}

/// A row count: exact below 1000, else [`si`].
pub fn count(n: u64) -> String {
    si(n as f64)
}

/// Bytes (or bytes per second): `512B`, `5.00MB`.
pub fn bytes(x: f64) -> String {
    format!("{}B", si(x))
}

/// A fraction as a percentage with one decimal: `25.0%`.
pub fn pct(f: f64) -> String {
    format!("{:.1}%", 100.0 * f)
}

/// A rate that may have nothing to be a rate of (a miss rate of no requested
/// rows): `25.0%`, or `-`, never a `0.0%` that reads as perfect.
pub fn rate(f: Option<f64>) -> String {
    f.map_or_else(|| "-".into(), pct)
}

/// A loss: four decimals (`0.0266`), and below 0.001 three significant
/// digits (`2.35e-6`), so that a loss still falling (full-graph training
/// without dropout reaches 1e-6) never reads as a flat `0.0000`.
pub fn loss(x: f64) -> String {
    if x != 0.0 && x.abs() < 1e-3 { format!("{x:.2e}") } else { format!("{x:.4}") }
}

/// Columns `s` takes on a terminal (a CJK character two, a combining mark none).
pub fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` cut to `max` columns, the cut marked with `…` in the last one: a name
/// that does not fit says so instead of ending mid-word as if that were all.
pub fn elide(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    if max > 0 {
        out.push('…');
    }
    out
}

/// The first of `variants` (longest first) that fits `max` columns, else the
/// last elided: a title keeps its numbers by dropping words, not by being cut.
pub fn first_fitting(variants: &[String], max: usize) -> String {
    match variants.iter().find(|v| width(v) <= max) {
        Some(v) => v.clone(),
        None => variants.last().map_or_else(String::new, |v| elide(v, max)),
    }
}

/// Seconds as `m:ss` or `h:mm:ss`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "--".into();
    }
    let s = secs.round() as u64;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 { format!("{h}:{m:02}:{s:02}") } else { format!("{m}:{s:02}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_fit_their_cells() {
        assert_eq!(si(999.0), "999");
        assert_eq!(si(1200.0), "1.20k");
        assert_eq!(si(999_960.0), "1.00M");
        assert_eq!(si(45_600_000.0), "45.6M");
        assert_eq!(bytes(5e6), "5.00MB");
        assert_eq!(pct(0.25), "25.0%");
        assert_eq!((rate(Some(0.0)), rate(None)), ("0.0%".into(), "-".into()));
        assert_eq!(duration(20.0), "0:20");
        assert_eq!(duration(3723.4), "1:02:03");
        assert_eq!(duration(f64::NAN), "--");
        assert_eq!((loss(0.02664), loss(0.001), loss(0.0)), ("0.0266".into(), "0.0010".into(), "0.0000".into()));
        assert_eq!((loss(2.3456e-6), loss(0.000_91)), ("2.35e-6".into(), "9.10e-4".into()));
        assert_eq!(
            (elide("compute-node-01", 8), elide("node", 8), elide("ab", 0)),
            ("compute…".into(), "node".into(), "".into())
        );
        assert_eq!(elide("数据集名", 5), "数据…");
        let v = [" comm/step 1.60MB (max 1.60MB) ".to_string(), " comm 1.60MB ".to_string()];
        assert_eq!(
            (first_fitting(&v, 40), first_fitting(&v, 14), first_fitting(&v, 8)),
            (v[0].clone(), v[1].clone(), " comm 1…".into())
        );
    }
}
