//! How `run` draws each descriptor entry's value: one key, uniform, or
//! zipf over `--keys` values.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

use super::MAX_ZIPF_KEYS;

/// How the value of each descriptor entry is drawn.
#[derive(Debug, Clone)]
pub(crate) enum KeyDist {
    /// Always `v0`.
    Hot,
    /// Uniform over `v0 .. v{K-1}`.
    Uniform(u64),
    /// Zipf over K ranks with exponent S: the cumulative weights.
    Zipf { keys: u64, s: f64, cdf: Arc<[f64]> },
}

impl KeyDist {
    pub(crate) fn parse(text: &str) -> Result<KeyDist, String> {
        let bad = || format!("invalid --keys {text:?} (want hot, uniform:K or zipf:K:S)");
        let parts: Vec<&str> = text.split(':').collect();
        match parts.as_slice() {
            ["hot"] => Ok(KeyDist::Hot),
            ["uniform", k] => match k.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(KeyDist::Uniform(k)),
                _ => Err(bad()),
            },
            ["zipf", k, s] => {
                let keys = k.parse::<u64>().map_err(|_| bad())?;
                let s = s.parse::<f64>().map_err(|_| bad())?;
                if keys == 0 || keys > MAX_ZIPF_KEYS || !s.is_finite() || s < 0.0 {
                    return Err(bad());
                }
                Ok(KeyDist::Zipf {
                    keys,
                    s,
                    cdf: zipf_cdf(keys, s),
                })
            }
            _ => Err(bad()),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            KeyDist::Hot => "hot".into(),
            KeyDist::Uniform(k) => format!("uniform:{k}"),
            KeyDist::Zipf { keys, s, .. } => format!("zipf:{keys}:{s}"),
        }
    }

    pub(crate) fn sample(&self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyDist::Hot => 0,
            KeyDist::Uniform(k) => rng.random_range(0..*k),
            KeyDist::Zipf { cdf, .. } => {
                let u: f64 = rng.random();
                let i = cdf.partition_point(|&c| c <= u);
                i.min(cdf.len() - 1) as u64
            }
        }
    }
}

/// Cumulative, normalised weights `1/(r+1)^s` for ranks `0..keys`.
fn zipf_cdf(keys: u64, s: f64) -> Arc<[f64]> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=keys)
        .map(|r| {
            acc += (r as f64).powf(-s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn key_distributions() {
        let mut rng = SmallRng::seed_from_u64(7);
        let hot = KeyDist::parse("hot").expect("hot");
        assert!((0..100).all(|_| hot.sample(&mut rng) == 0));
        let uniform = KeyDist::parse("uniform:10").expect("uniform");
        assert!((0..1000).all(|_| uniform.sample(&mut rng) < 10));
        let zipf = KeyDist::parse("zipf:100:1.2").expect("zipf");
        let mut counts = [0u32; 100];
        for _ in 0..20_000 {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[90]);
        for bad in [
            "",
            "uniform",
            "uniform:0",
            "zipf:10",
            "zipf:0:1",
            "zipf:10:-1",
            "cold",
        ] {
            assert!(KeyDist::parse(bad).is_err(), "{bad}");
        }
    }
}
