//! Summary statistics over benchmark runs.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Coefficient of variation: sample standard deviation / mean.
    pub cv: f64,
}

pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    Some(Summary {
        median,
        mean,
        min: v[0],
        max: v[n - 1],
        cv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_runs() {
        // The seed's five runs: 92.6, 92.5, 92.4, 93.2, 92.5 tok/s.
        let s = summarize(&[92.6, 92.5, 92.4, 93.2, 92.5]).unwrap();
        assert_eq!((s.median, s.min, s.max), (92.5, 92.4, 93.2));
        assert!((s.mean - 92.64).abs() < 1e-9);
        assert!((s.cv - 0.003_464_3).abs() < 1e-6, "{}", s.cv); // sample sd 0.32094 / mean 92.64
        assert!((summarize(&[1.0, 3.0]).unwrap().median - 2.0).abs() < 1e-12);
        assert!(summarize(&[]).is_none());
    }
}
