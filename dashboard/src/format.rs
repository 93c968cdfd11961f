//! Numbers and durations as people read them, shared by the rules table, the live view and the
//! what-if plot.

/// A rate as `"0.5/s"`, `"12/s"`, `"1.2k/s"`: short, and without trailing zeros.
pub fn per_second(rate: f64) -> String {
    format!("{}/s", short_number(rate))
}

/// A number in at most about four significant characters: `0.5`, `12`, `1.2k`, `3.4M`.
pub fn short_number(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let (value, suffix) = if x.abs() >= 1e6 {
        (x / 1e6, "M")
    } else if x.abs() >= 1e4 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let text = if value.abs() >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        trim(format!("{value:.1}"))
    } else if value.abs() >= 0.01 {
        trim(format!("{value:.2}"))
    } else {
        trim(format!("{value:.4}"))
    };
    format!("{text}{suffix}")
}

fn trim(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Seconds as a plot-axis label: `"0"`, `"250ms"`, `"30s"`, `"2m"`, `"2.5h"`, `"3d"`.
pub fn duration_label(seconds: f64) -> String {
    if seconds <= 0.0 {
        "0".into()
    } else if seconds < 1.0 {
        format!("{}ms", short_number(seconds * 1000.0))
    } else if seconds < 120.0 {
        format!("{}s", short_number(seconds))
    } else if seconds < 7200.0 {
        format!("{}m", short_number(seconds / 60.0))
    } else if seconds < 172_800.0 {
        format!("{}h", short_number(seconds / 3600.0))
    } else {
        format!("{}d", short_number(seconds / 86_400.0))
    }
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `x` (1 for nothing): an axis top, or a span
/// that reads well and stays put while the numbers under it change a little.
pub fn nice_ceiling(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let mut step = 10f64.powf(x.log10().floor());
    loop {
        for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
            if m * step >= x * (1.0 - 1e-9) {
                return m * step;
            }
        }
        step *= 10.0;
    }
}

/// A count with thousands separated: `10,000`.
pub fn short_count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_with_separators() {
        assert_eq!(short_count(0), "0");
        assert_eq!(short_count(999), "999");
        assert_eq!(short_count(10_000), "10,000");
        assert_eq!(short_count(1_234_567), "1,234,567");
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(short_number(12.0), "12");
        assert_eq!(short_number(12.34), "12.3");
        assert_eq!(short_number(1234.0), "1234");
        assert_eq!(short_number(12_345.0), "12.3k");
        assert_eq!(short_number(2_000_000.0), "2M");
        assert_eq!(short_number(0.000_277_8), "0.0003");
        assert_eq!(per_second(0.0), "0/s");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration_label(0.0), "0");
        assert_eq!(duration_label(0.25), "250ms");
        assert_eq!(duration_label(30.0), "30s");
        assert_eq!(duration_label(180.0), "3m");
        assert_eq!(duration_label(5400.0), "90m");
        assert_eq!(duration_label(9000.0), "2.5h");
        assert_eq!(duration_label(3.0 * 86_400.0), "3d");
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(11.0), 20.0);
        assert_eq!(nice_ceiling(239.0), 250.0);
        assert_eq!(nice_ceiling(0.03), 0.05);
    }
}
