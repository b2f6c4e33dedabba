//! Small statistics helpers for measurements: exponential moving averages and sample summaries.

use serde::{Deserialize, Serialize};

/// An exponentially weighted moving average and mean deviation, like TCP's RTT estimator
/// (RFC 6298), used to smooth noisy samples such as clock offsets.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ewma {
    mean: f64,
    deviation: f64,
    samples: u64,
}

impl Ewma {
    /// An empty average.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sample with weight `alpha` (0–1) for the mean and `beta` for the deviation. The
    /// first sample sets the mean directly. Non-finite samples are ignored.
    pub fn add(&mut self, sample: f64, alpha: f64, beta: f64) {
        if !sample.is_finite() {
            return;
        }
        if self.samples == 0 {
            self.mean = sample;
            self.deviation = 0.0;
        } else {
            self.deviation += beta * ((sample - self.mean).abs() - self.deviation);
            self.mean += alpha * (sample - self.mean);
        }
        self.samples += 1;
    }

    /// The average, or 0 before any sample.
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// The mean absolute deviation from the average.
    pub fn deviation(&self) -> f64 {
        self.deviation
    }

    /// How many samples were added.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// Summary of a set of samples: count, mean, root mean square, min, max and percentiles.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of finite samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Root mean square.
    pub rms: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
}

impl Summary {
    /// Summarises `samples`, ignoring non-finite ones. All zero for no samples.
    pub fn of(samples: &[f64]) -> Summary {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let rank = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Summary {
            count: n,
            mean: v.iter().sum::<f64>() / n as f64,
            rms: (v.iter().map(|x| x * x).sum::<f64>() / n as f64).sqrt(),
            min: v[0],
            max: v[n - 1],
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
        }
    }
}

/// The value at index `k` of `values` once sorted by [`f64::total_cmp`], found in linear time
/// by reordering `values` (a sort is n·log n: a server takes a median of a client's window on
/// every report and shot copy, on every link). Exactly the sorted slice's `k`-th value: values
/// equal under `total_cmp` are the same bits. Panics when `k` is out of range.
pub fn nth_smallest(values: &mut [f64], k: usize) -> f64 {
    *values.select_nth_unstable_by(k, f64::total_cmp).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_smallest_is_the_sorted_slices_nth_value_bit_for_bit() {
        let mut rng = crate::SplitMix64::new(7);
        for n in 1..40 {
            // Repeats, both zeros, infinities and a NaN among ordinary values.
            let specials = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.25];
            let values: Vec<f64> = (0..n)
                .map(|i| {
                    if i % 5 == 0 {
                        specials[(i / 5) % specials.len()]
                    } else {
                        (rng.next_f64() * 8.0).round() / 4.0 - 1.0
                    }
                })
                .collect();
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            for (k, expected) in sorted.iter().enumerate() {
                let mut scratch = values.clone();
                assert_eq!(
                    nth_smallest(&mut scratch, k).to_bits(),
                    expected.to_bits(),
                    "n {n}, k {k}: {values:?}"
                );
            }
        }
    }

    #[test]
    fn ewma_converges_and_skips_nan() {
        let mut e = Ewma::new();
        e.add(10.0, 0.125, 0.25);
        assert_eq!(e.mean(), 10.0);
        for _ in 0..200 {
            e.add(20.0, 0.125, 0.25);
        }
        e.add(f64::NAN, 0.125, 0.25);
        assert!((e.mean() - 20.0).abs() < 1e-6);
        assert!(e.deviation() < 1e-6);
        assert_eq!(e.samples(), 201);
    }

    #[test]
    fn summary_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.count, 100);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.p50, 50.0);
        assert_eq!(s.p95, 95.0);
        assert_eq!(s.p99, 99.0);
        assert!((s.mean - 50.5).abs() < 1e-12);
        assert_eq!(Summary::of(&[f64::NAN]), Summary::default());
        assert!((Summary::of(&[3.0, -4.0]).rms - (12.5f64).sqrt()).abs() < 1e-12);
    }
}
