//! Whole-cluster passes of plugins (PreFilter / PreScore counting over every
//! node): sequential on small clusters, parallel chunks on large ones
//! (upstream counts with its parallelizer).

use rayon::prelude::*;

/// Below this many nodes a pass runs on the calling thread: on 2 cores small
/// clusters lose more to thread wake-ups than they gain.
pub const PARALLEL_PASS_MIN_NODES: usize = 2048;
/// Nodes per parallel task.
pub const PASS_CHUNK: usize = 512;

/// `map` over `nodes` (all at once below [`PARALLEL_PASS_MIN_NODES`], else
/// per chunk of [`PASS_CHUNK`] in parallel) and `merge` the partial results.
/// `merge` must be associative; the result equals `map(nodes)` whenever
/// `map` distributes over concatenation (counting, summing).
pub fn fold_nodes<N, T>(
    nodes: &[N],
    map: impl Fn(&[N]) -> T + Sync + Send,
    merge: impl Fn(T, T) -> T + Sync + Send,
) -> T
where
    N: Sync,
    T: Send,
{
    if nodes.len() < PARALLEL_PASS_MIN_NODES {
        return map(nodes);
    }
    nodes
        .par_chunks(PASS_CHUNK)
        .map(&map)
        .reduce_with(merge)
        .unwrap_or_else(|| map(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_and_sequential_passes_agree() {
        let small: Vec<u64> = (0..10).collect();
        let big: Vec<u64> = (0..(PARALLEL_PASS_MIN_NODES as u64 * 3 + 17)).collect();
        for v in [&small, &big] {
            let got = fold_nodes(v, |c| c.iter().sum::<u64>(), |a, b| a + b);
            assert_eq!(got, v.iter().sum::<u64>());
        }
    }
}
