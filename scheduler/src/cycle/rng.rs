//! The randomness of a scheduling attempt, from a seedable source.
//!
//! Upstream draws at random in two places of a cycle: which of several
//! equally scored nodes wins (`selectHost`'s reservoir sampling) and where
//! preemption's dry run starts among the candidate nodes
//! (`GetOffsetAndNumCandidates`). Flotilla draws both from a [`CycleRng`]
//! made for the attempt. Without a seed it is seeded from the OS, as
//! upstream. With a seed, its stream depends only on the seed, the pod's
//! uid and the attempt's number ([`CycleRng::for_attempt`]), not on which
//! attempts of other pods ran before: `flotilla simulate` (one pod after
//! another) and a worker (pods interleaved with their binding and
//! preemption round trips) given the same seed draw the same numbers for
//! the same attempt of the same pod.

/// The random source of one scheduling attempt (splitmix64: tiny, fast,
/// and the same stream on every platform and version).
#[derive(Debug, Clone)]
pub struct CycleRng {
    state: u64,
}

/// splitmix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl CycleRng {
    /// A stream that depends only on `seed`.
    #[must_use]
    pub fn from_seed(seed: u64) -> Self {
        CycleRng { state: mix(seed) }
    }

    /// A stream seeded from the OS: a different one every time.
    #[must_use]
    pub fn from_entropy() -> Self {
        Self::from_seed(rand::random())
    }

    /// The stream for attempt number `attempt` (0 for the first) of the pod
    /// with uid `uid`: a function of the three when `seed` is given, else
    /// [`CycleRng::from_entropy`].
    #[must_use]
    pub fn for_attempt(seed: Option<u64>, uid: &str, attempt: u32) -> Self {
        match seed {
            Some(seed) => Self::from_seed(
                mix(seed)
                    ^ mix(flotilla_shared::stable_hash::fnv1a(uid.as_bytes()))
                    ^ mix(u64::from(attempt).wrapping_add(GAMMA)),
            ),
            None => Self::from_entropy(),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// A number uniform over `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        let n = n as u64;
        // Rejection sampling: drop the top values that would bias `% n`.
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                // `x % n < n`, which came from a usize.
                #[allow(clippy::cast_possible_truncation)]
                return (x % n) as usize;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CycleRng;

    #[test]
    fn a_seed_gives_the_same_stream_for_the_same_pod_and_attempt() {
        let draws = |seed, uid: &str, attempt| {
            let mut r = CycleRng::for_attempt(Some(seed), uid, attempt);
            (0..8).map(|_| r.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7, "uid-a", 0), draws(7, "uid-a", 0));
        assert_ne!(
            draws(7, "uid-a", 0),
            draws(7, "uid-a", 1),
            "attempts differ"
        );
        assert_ne!(draws(7, "uid-a", 0), draws(7, "uid-b", 0), "pods differ");
        assert_ne!(draws(7, "uid-a", 0), draws(8, "uid-a", 0), "seeds differ");
    }

    #[test]
    fn below_is_in_range_and_covers_it_evenly() {
        let mut r = CycleRng::from_seed(1);
        let mut counts = [0u32; 5];
        for _ in 0..50_000 {
            counts[r.below(5)] += 1;
        }
        // Each bucket expects 10,000; 5 % off would be a broken sampler.
        for c in counts {
            assert!((9_500..=10_500).contains(&c), "{counts:?}");
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
    }
}
