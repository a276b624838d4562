//! The chaos specification: what `--chaos seed=N,duplicate=0.3,reorder,crash=0.1`
//! asks for, parsed and printed back.

use std::fmt;
use std::str::FromStr;

/// What `--chaos` asks for: `seed=N,duplicate=0.3,reorder,crash=0.1`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosSpec {
    /// Seed of the random source; the same seed on the same data replays the run.
    pub seed: u64,
    /// Probability that a sent message is delivered a second time.
    pub duplicate: f64,
    /// Reordering window in seconds: a delivery is drawn among the messages due within
    /// this window of the earliest one (never before its own due time). `None`: FIFO.
    pub reorder: Option<u32>,
    /// Probability that a delivery is aborted at a random crash point.
    pub crash: f64,
}

/// The reordering window of a bare `reorder` flag.
pub const DEFAULT_REORDER_WINDOW_S: u32 = 60;

impl Default for ChaosSpec {
    fn default() -> Self {
        ChaosSpec {
            seed: 0,
            duplicate: 0.0,
            reorder: None,
            crash: 0.0,
        }
    }
}

impl FromStr for ChaosSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = ChaosSpec::default();
        let prob = |k: &str, v: &str| -> Result<f64, String> {
            let p: f64 = v
                .parse()
                .map_err(|_| format!("`{k}` needs a probability, got `{v}`"))?;
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(format!("`{k}` must lie between 0 and 1, got {p}"))
            }
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (part, None),
            };
            match (k, v) {
                ("seed", Some(v)) => {
                    spec.seed = v
                        .parse()
                        .map_err(|_| format!("`seed` needs an unsigned integer, got `{v}`"))?
                }
                ("duplicate", Some(v)) => spec.duplicate = prob(k, v)?,
                ("crash", Some(v)) => spec.crash = prob(k, v)?,
                ("reorder", None) => spec.reorder = Some(DEFAULT_REORDER_WINDOW_S),
                ("reorder", Some(v)) => {
                    spec.reorder = Some(v.parse().map_err(|_| {
                        format!("`reorder` takes a window in seconds, got `{v}`")
                    })?)
                }
                _ => {
                    return Err(format!(
                        "unknown chaos setting `{part}` (known: seed=N, duplicate=P, reorder[=S], crash=P)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for ChaosSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={},duplicate={}", self.seed, self.duplicate)?;
        if let Some(w) = self.reorder {
            write!(f, ",reorder={w}")?;
        }
        write!(f, ",crash={}", self.crash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_parses_and_prints_back() {
        let s: ChaosSpec = "seed=7,duplicate=0.3,reorder,crash=0.1".parse().unwrap();
        assert_eq!(
            s,
            ChaosSpec {
                seed: 7,
                duplicate: 0.3,
                reorder: Some(60),
                crash: 0.1
            }
        );
        assert_eq!(s.to_string().parse::<ChaosSpec>().unwrap(), s);
        assert!("crash=2".parse::<ChaosSpec>().is_err());
        assert!("wobble".parse::<ChaosSpec>().is_err());
        assert_eq!("reorder=5".parse::<ChaosSpec>().unwrap().reorder, Some(5));
    }
}
