//! Latency attribution from Prometheus histograms: scrape a `/metrics` text
//! before and after a measured window, and read a quantile of what was
//! observed in between (the benchmarks use it to say whether a latency tail
//! is etcd's disk, the API server, or the operator).

use prometheus_parse::{Scrape, Value};

/// Cumulative bucket counts `(upper bound in seconds, count)` of histogram
/// `name`, summed over the series whose labels pass `keep`, sorted by bound
/// (bounds are compared bit for bit: they are parsed from the same text).
pub fn buckets(text: &str, name: &str, keep: impl Fn(&prometheus_parse::Labels) -> bool) -> Vec<(f64, f64)> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let Ok(scrape) = Scrape::parse(lines) else { return Vec::new() };
    let mut sum: Vec<(f64, f64)> = Vec::new();
    for sample in scrape.samples.iter().filter(|s| s.metric == name && keep(&s.labels)) {
        if let Value::Histogram(hist) = &sample.value {
            for b in hist {
                match sum.iter_mut().find(|(le, _)| le.to_bits() == b.less_than.to_bits()) {
                    Some((_, c)) => *c += b.count,
                    None => sum.push((b.less_than, b.count)),
                }
            }
        }
    }
    sum.sort_by(|a, b| a.0.total_cmp(&b.0));
    sum
}

/// The upper bound (seconds) of the bucket holding quantile `q` of what was
/// observed between `before` and `after` (same histogram); `None` when
/// nothing was observed. A bucket bound, so a coarse figure: an answer of
/// 0.025 means "between the previous bound and 25 ms".
pub fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, c)| (*le, c - before.iter().find(|(l, _)| l.to_bits() == le.to_bits()).map_or(0.0, |(_, b)| *b)))
        .collect();
    let total = delta.iter().map(|(_, c)| *c).fold(0.0, f64::max);
    if total <= 0.0 {
        return None;
    }
    delta.iter().find(|(_, c)| *c >= q * total).map(|(le, _)| *le)
}

/// Observations between two scrapes of the same histogram.
pub fn count(before: &[(f64, f64)], after: &[(f64, f64)]) -> f64 {
    let last = |v: &[(f64, f64)]| v.last().map_or(0.0, |(_, c)| *c);
    last(after) - last(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE lat histogram\n\
        lat_bucket{verb=\"PUT\",le=\"0.005\"} 90\n\
        lat_bucket{verb=\"PUT\",le=\"0.025\"} 99\n\
        lat_bucket{verb=\"PUT\",le=\"0.1\"} 100\n\
        lat_bucket{verb=\"PUT\",le=\"+Inf\"} 100\n\
        lat_sum{verb=\"PUT\"} 1\n\
        lat_count{verb=\"PUT\"} 100\n\
        lat_bucket{verb=\"GET\",le=\"0.005\"} 5\n\
        lat_bucket{verb=\"GET\",le=\"0.025\"} 5\n\
        lat_bucket{verb=\"GET\",le=\"0.1\"} 5\n\
        lat_bucket{verb=\"GET\",le=\"+Inf\"} 5\n\
        lat_sum{verb=\"GET\"} 1\n\
        lat_count{verb=\"GET\"} 5\n";

    #[test]
    fn quantiles_of_the_window_only() {
        let after = buckets(TEXT, "lat", |l| l.get("verb") == Some("PUT"));
        assert_eq!(after.len(), 4);
        assert_eq!(quantile(&[], &after, 0.5), Some(0.005));
        assert_eq!(quantile(&[], &after, 0.99), Some(0.025));
        assert_eq!(quantile(&[], &after, 1.0), Some(0.1));
        // Before the window, 90 fast observations: the window held 10, one slow.
        let before = vec![(0.005, 90.0), (0.025, 90.0), (0.1, 90.0), (f64::INFINITY, 90.0)];
        assert_eq!(quantile(&before, &after, 0.5), Some(0.025));
        assert!((count(&before, &after) - 10.0).abs() < 1e-9);
        assert_eq!(quantile(&after, &after, 0.99), None);
        assert!(buckets("not prometheus {", "lat", |_| true).is_empty());
    }
}
