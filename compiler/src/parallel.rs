//! Independent jobs on every core: `tilec build`'s code generation (one LLVM module per kernel
//! and target) and `--verify`'s interpreter runs (one operator, or its wide twin, per job).
//!
//! The jobs are claimed longest first by an estimated cost (LPT scheduling: no thread starts a
//! long job while the others run out of work) and the results come back in the jobs' order, so
//! what is printed from them does not depend on the schedule.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `f` on every item on up to `available_parallelism` threads of `stack_bytes` stack each;
/// result `i` is `f(&items[i])`, or `None` when no thread could be started to run it.
///
/// `cost` orders the claims (largest first); it never changes a result.
pub fn map_longest_first<T: Sync, R: Send>(items: &[T], cost: impl Fn(&T) -> usize, stack_bytes: usize, f: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    map_on(workers, items, cost, stack_bytes, f)
}

/// [`map_longest_first`] on at most `workers` threads.
fn map_on<T: Sync, R: Send>(workers: usize, items: &[T], cost: impl Fn(&T) -> usize, stack_bytes: usize, f: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    let workers = workers.min(items.len()).max(1);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&items[i])));
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers {
            // A thread that cannot be started leaves its share to the others; with none at all,
            // every slot stays empty and the caller says so.
            let _ = std::thread::Builder::new().name("tilec-worker".into()).stack_size(stack_bytes).spawn_scoped(s, || {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = f(&items[i]);
                    // A poisoned slot can only come from a panic in another job, which `scope`
                    // propagates anyway; store regardless.
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_item_order_whatever_the_claim_order() {
        let items: Vec<usize> = (0..50).collect();
        // Cost reversed against the index: the last items are claimed first.
        let out = map_longest_first(&items, |&i| i, 1 << 20, |&i| i * i);
        assert_eq!(out, items.iter().map(|&i| Some(i * i)).collect::<Vec<_>>());
    }

    #[test]
    fn one_worker_claims_longest_first() {
        let claimed = Mutex::new(vec![]);
        let items = [3usize, 9, 1, 7];
        let out = map_on(1, &items, |&c| c, 1 << 20, |&c| claimed.lock().unwrap().push(c));
        assert_eq!(out.len(), 4);
        assert_eq!(claimed.into_inner().unwrap(), [9, 7, 3, 1]);
    }

    #[test]
    fn no_items_no_results() {
        let out: Vec<Option<u8>> = map_longest_first(&[] as &[u8], |_| 0, 1 << 20, |&x| x);
        assert!(out.is_empty());
    }
}
