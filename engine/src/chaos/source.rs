//! The seeded random source of a chaos run ([`Chaos`], ChaCha8, so a seed replays the
//! same run) that decides every perturbation (where a delivery crashes, which sent
//! message is duplicated, which deliverable message comes next), and what it did
//! ([`ChaosStats`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{ChaosSpec, CrashPoint};
use crate::local::MAX_RECEIVES;

/// What chaos did during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosStats {
    /// Messages delivered to a handler (every receive counts).
    pub deliveries: u64,
    /// Extra copies of sent messages put on the queue.
    pub duplicated: u64,
    /// Deliveries that were not the queue's FIFO head.
    pub reordered: u64,
    /// Handlers aborted, by crash point.
    pub crashes: BTreeMap<CrashPoint, u64>,
}

impl ChaosStats {
    /// Every crash, whatever its point.
    pub fn crashes_total(&self) -> u64 {
        self.crashes.values().sum()
    }

    /// The statistics as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let by_point: serde_json::Map<String, serde_json::Value> = self
            .crashes
            .iter()
            .map(|(p, n)| (p.name().to_string(), (*n).into()))
            .collect();
        serde_json::json!({
            "deliveries": self.deliveries,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "crashes": self.crashes_total(),
            "crashes_by_point": by_point,
        })
    }
}

impl fmt::Display for ChaosStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deliveries={} duplicated={} reordered={} crashes={}",
            self.deliveries,
            self.duplicated,
            self.reordered,
            self.crashes_total()
        )?;
        for (p, n) in &self.crashes {
            write!(f, " {p}={n}")?;
        }
        Ok(())
    }
}

/// The seeded random source of one chaos run and what it did.
pub struct Chaos {
    spec: ChaosSpec,
    rng: Mutex<ChaCha8Rng>,
    stats: Mutex<ChaosStats>,
}

impl fmt::Debug for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chaos").field("spec", &self.spec).finish()
    }
}

impl Chaos {
    /// A chaos source for `spec`.
    pub fn new(spec: ChaosSpec) -> Chaos {
        Chaos {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(spec.seed)),
            spec,
            stats: Mutex::new(ChaosStats::default()),
        }
    }

    /// The specification.
    pub fn spec(&self) -> &ChaosSpec {
        &self.spec
    }

    /// What happened so far.
    pub fn stats(&self) -> ChaosStats {
        self.stats.lock().unwrap().clone()
    }

    /// Where to abort the next delivery, if at all. The last receive the queue allows
    /// is spared: chaos models crashes that a redelivery survives, and a message that
    /// crashed `maxReceiveCount` times would be dead-lettered, by design.
    pub fn plan_delivery(&self, receive_count: u32) -> Option<(CrashPoint, u32)> {
        let mut rng = self.rng.lock().unwrap();
        self.stats.lock().unwrap().deliveries += 1;
        if receive_count >= MAX_RECEIVES || !rng.gen_bool(self.spec.crash) {
            return None;
        }
        let point = CrashPoint::ALL[rng.gen_range(0..CrashPoint::ALL.len())];
        let nth = if rng.gen_bool(0.5) {
            // Near the start. Statements: uniform. Transactions and sends: the first
            // pass half the time, the second a quarter, … (short handlers pass them
            // only once or twice).
            match point {
                CrashPoint::Statement => rng.gen_range(1..=point.max_nth()),
                _ => {
                    let mut n = 1;
                    while n < point.max_nth() && rng.gen_bool(0.5) {
                        n += 1;
                    }
                    n
                }
            }
        } else {
            // Anywhere: log-uniform up to deep inside a long page (a handler that
            // ends earlier is simply not aborted).
            let max = f64::from(point.max_deep_nth());
            (rng.gen_range(0.0..=max.ln()).exp().floor() as u32).clamp(1, point.max_deep_nth())
        };
        Some((point, nth))
    }

    /// Whether a sent message gets a duplicate, and the copy's extra delay.
    pub fn duplicate_delay(&self) -> Option<u32> {
        let mut rng = self.rng.lock().unwrap();
        if !rng.gen_bool(self.spec.duplicate) {
            return None;
        }
        self.stats.lock().unwrap().duplicated += 1;
        let window = self.spec.reorder.unwrap_or(30);
        Some(rng.gen_range(0..=window))
    }

    /// Choose one of `n` deliverable messages (index 0 is the FIFO head).
    pub fn pick(&self, n: usize) -> usize {
        let i = self.rng.lock().unwrap().gen_range(0..n.max(1));
        if i > 0 {
            self.stats.lock().unwrap().reordered += 1;
        }
        i
    }

    /// Record a crash that happened.
    pub fn record_crash(&self, point: CrashPoint) {
        *self.stats.lock().unwrap().crashes.entry(point).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_decisions() {
        let spec: ChaosSpec = "seed=42,duplicate=0.5,reorder,crash=0.5".parse().unwrap();
        let run = || {
            let c = Chaos::new(spec.clone());
            (0..50)
                .map(|i| (c.plan_delivery(1), c.duplicate_delay(), c.pick(i % 4 + 1)))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
        let c = Chaos::new(spec);
        assert!((0..50).all(|_| c.plan_delivery(MAX_RECEIVES).is_none()));
    }
}
