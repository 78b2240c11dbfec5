//! Collectives against sequential references: ring all-reduce (sum) of
//! awkward lengths, broadcast from every root, barrier.

#[path = "support/bounded.rs"]
mod bounded;
mod comm_support;

use comm_support::{no_tweak, with_mesh};
use leapgnn::comm::{Category, CommError, frame};
use leapgnn::util::rng;
use rand::Rng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(10);

/// Worker r's buffer: small integers, so every summation order gives the exact sum.
fn exact_input(r: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 31 + r * 1009) % 2003) as f32 - 1000.0).collect()
}

fn random_input(r: usize, n: usize) -> Vec<f32> {
    let mut g = rng::stream(r as u64, "comm-test-allreduce");
    (0..n).map(|_| g.random_range(-1.0f32..1.0)).collect()
}

#[test]
fn all_reduce_equals_the_sequential_sum_for_awkward_lengths() {
    for w in 1..=4 {
        for n in [0, 1, w - 1, 7, 1000 * w + 3, 45_000] {
            let out = with_mesh(w, no_tweak, |m| {
                let mut exact = exact_input(m.rank(), n);
                m.all_reduce_sum(&mut exact, Category::Gradients, LONG).unwrap();
                let mut random = random_input(m.rank(), n);
                m.all_reduce_sum(&mut random, Category::Gradients, LONG).unwrap();
                (exact, random, m.bytes())
            });
            let exact_inputs: Vec<Vec<f32>> = (0..w).map(|r| exact_input(r, n)).collect();
            let want_exact: Vec<f32> = (0..n).map(|i| exact_inputs.iter().map(|x| x[i]).sum()).collect();
            let inputs: Vec<Vec<f32>> = (0..w).map(|r| random_input(r, n)).collect();
            for (r, (exact, random, _)) in out.iter().enumerate() {
                assert_eq!(exact, &want_exact, "w {w} n {n} rank {r}");
                for i in 0..n {
                    let want: f32 = inputs.iter().map(|x| x[i]).sum();
                    assert!((random[i] - want).abs() <= 1e-5, "w {w} n {n} rank {r} [{i}]: {} vs {want}", random[i]);
                }
                // Every worker ends with bit-identical results, whatever its place in the ring.
                assert_eq!(
                    random.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    out[0].1.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                );
            }
            // Each of the two rings moves every chunk W-1 times: 2 (W-1) n floats in
            // 2 W (W-1) messages per all-reduce, and we ran two.
            let sent: u64 = out.iter().map(|o| o.2.sent.gradients).sum();
            let received: u64 = out.iter().map(|o| o.2.received.gradients).sum();
            let (w64, n64) = (w as u64, n as u64);
            let per_call = 2 * (w64 - 1) * n64 * 4 + 2 * w64 * (w64 - 1) * frame::HEADER_LEN as u64;
            assert_eq!((sent, received), (2 * per_call, 2 * per_call), "w {w} n {n}");
        }
    }
}

#[test]
fn all_reduce_of_different_lengths_is_an_error_naming_a_worker() {
    let out = with_mesh(3, no_tweak, |m| {
        let mut buf = vec![1.0f32; if m.rank() == 2 { 10 } else { 12 }];
        m.all_reduce_sum(&mut buf, Category::Gradients, Duration::from_secs(5)).err().map(|e| e.to_string())
    });
    let errors: Vec<String> = out.into_iter().flatten().collect();
    assert!(!errors.is_empty());
    assert!(
        errors
            .iter()
            .any(|e| e.contains("broke the protocol") && e.contains("different lengths") && e.contains("worker ")),
        "{errors:?}"
    );
}

#[test]
fn broadcast_copies_the_roots_data_to_everyone() {
    for w in 1..=4 {
        for root in 0..w {
            let out = with_mesh(w, no_tweak, |m| {
                let mut weights: Vec<f32> = if m.rank() == root {
                    (0..45_000).map(|i| i as f32 * 0.5 - root as f32).collect()
                } else {
                    vec![0.0; 45_000]
                };
                m.broadcast_f32(root, &mut weights, Category::Control, LONG).unwrap();
                let mut bytes = if m.rank() == root { format!("from {root}").into_bytes() } else { b"stale".to_vec() };
                m.broadcast(root, &mut bytes, Category::Control, LONG).unwrap();
                (weights, bytes)
            });
            for (r, (weights, bytes)) in out.iter().enumerate() {
                assert_eq!(weights[1], 0.5 - root as f32, "w {w} root {root} rank {r}");
                assert_eq!(weights, &out[root].0);
                assert_eq!(bytes, format!("from {root}").as_bytes());
            }
        }
    }
    // A worker that expects a different length says so, naming the root.
    let out = with_mesh(2, no_tweak, |m| {
        let mut buf = vec![0.0f32; if m.rank() == 0 { 4 } else { 5 }];
        m.broadcast_f32(0, &mut buf, Category::Control, LONG).err()
    });
    let e = out[1].as_ref().expect("rank 1 must fail");
    assert!(matches!(e, CommError::Protocol { .. }) && e.to_string().contains("worker 0"), "{e}");
}

#[test]
fn nobody_leaves_a_barrier_before_everyone_entered_it() {
    let rounds = 30;
    for w in 1..=4 {
        let arrived: Vec<AtomicUsize> = (0..rounds).map(|_| AtomicUsize::new(0)).collect();
        with_mesh(w, no_tweak, |m| {
            for (round, count) in arrived.iter().enumerate() {
                count.fetch_add(1, Ordering::SeqCst);
                m.barrier(LONG).unwrap();
                assert_eq!(count.load(Ordering::SeqCst), w, "w {w} round {round} rank {}", m.rank());
            }
        });
    }
}

#[test]
fn collectives_and_messages_interleave_without_mixing_up() {
    let out = with_mesh(4, no_tweak, |m| {
        let mut sums = Vec::new();
        for it in 0..20 {
            let next = (m.rank() + 1) % 4;
            m.send(next, it, Category::Activations, vec![m.rank() as u8, it as u8]).unwrap();
            let mut g = vec![(m.rank() + it as usize) as f32; 33];
            m.all_reduce_sum(&mut g, Category::Gradients, LONG).unwrap();
            m.barrier(LONG).unwrap();
            let prev = (m.rank() + 3) % 4;
            assert_eq!(m.recv(prev, it, LONG).unwrap(), vec![prev as u8, it as u8]);
            sums.push(g[32]);
        }
        sums
    });
    for sums in out {
        assert_eq!(sums, (0..20).map(|it| (6 + 4 * it) as f32).collect::<Vec<_>>());
    }
}

/// Worker r's message to worker p in the all-to-all tests; some are empty.
fn a2a_message(r: usize, p: usize) -> Vec<u8> {
    if (r + p) % 3 == 1 { Vec::new() } else { format!("{r} to {p}: {}", "x".repeat(r * 100 + p)).into_bytes() }
}

#[test]
fn all_to_all_delivers_distinct_and_empty_messages_to_their_workers() {
    for w in 1..=3 {
        let out = with_mesh(w, no_tweak, |m| {
            let r = m.rank();
            let mut got = Vec::new();
            // Twice: the second exchange must not see the first one's messages.
            for _ in 0..2 {
                got = m.all_to_all((0..w).map(|p| a2a_message(r, p)).collect(), Category::Activations, LONG).unwrap();
            }
            (got, m.bytes())
        });
        for (r, (got, bytes)) in out.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..w).map(|p| a2a_message(p, r)).collect();
            assert_eq!(got, &want, "w {w} rank {r}");
            // Every message but the one to itself is framed and sent, empty ones too.
            let sent: u64 =
                (0..w).filter(|&p| p != r).map(|p| (a2a_message(r, p).len() + frame::HEADER_LEN) as u64).sum();
            assert_eq!(bytes.sent.activations, 2 * sent, "w {w} rank {r}");
            assert_eq!(bytes.sent.gradients, 0);
        }
    }
    // One message per worker, or a usage error naming the counts.
    let out = with_mesh(2, no_tweak, |m| m.all_to_all(vec![Vec::new()], Category::Activations, LONG).unwrap_err());
    for e in out {
        assert!(matches!(e, CommError::Usage(_)) && e.to_string().contains("2 workers"), "{e}");
    }
}

#[test]
fn all_to_all_times_out_naming_the_worker_that_did_not_take_part() {
    const DONE: u64 = 99;
    let out = with_mesh(3, no_tweak, |m| {
        if m.rank() == 2 {
            // Stays connected, outside the exchange, until the others have failed.
            for p in 0..2 {
                m.recv(p, DONE, LONG).unwrap();
            }
            return None;
        }
        let e = m.all_to_all(vec![b"a".to_vec(); 3], Category::Activations, Duration::from_millis(300)).unwrap_err();
        m.send(2, DONE, Category::Control, Vec::new()).unwrap();
        Some((e, m.peer(2)))
    });
    for (e, peer) in out.into_iter().flatten() {
        assert!(matches!(e, CommError::Timeout { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("worker 2 ({})", peer.addr)) && msg.contains("all-to-all"), "{msg}");
    }
}

/// The final checkpoint's gather travels uncounted so that two identical
/// runs report the same bytes: a counter moved by it on either end (sent
/// or received, in any category) would bring back the difference.
#[test]
fn an_uncounted_all_to_all_delivers_its_messages_and_moves_no_counter() {
    for w in 1..=3 {
        let all_counted = std::sync::Barrier::new(w);
        let out = with_mesh(w, no_tweak, |m| {
            let out = || (0..w).map(|p| a2a_message(m.rank(), p)).collect::<Vec<_>>();
            let before = m.bytes();
            // No peer sends before every snapshot is taken, and the counted
            // exchange goes first, so no counted message from a faster peer
            // can fall between one of this worker's snapshots and its exchange.
            all_counted.wait();
            let counted = m.all_to_all(out(), Category::Control, LONG).unwrap();
            let between = m.bytes();
            let uncounted = m.all_to_all_uncounted(out(), LONG).unwrap();
            (counted, uncounted, before, between, m.bytes())
        });
        for (r, (counted, uncounted, before, between, after)) in out.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..w).map(|p| a2a_message(p, r)).collect();
            assert_eq!(counted, &want, "w {w} rank {r}: counted");
            assert_eq!(uncounted, &want, "w {w} rank {r}: uncounted");
            let framed = |from: usize, to: usize| (a2a_message(from, to).len() + frame::HEADER_LEN) as u64;
            let sent: u64 = (0..w).filter(|&p| p != r).map(|p| framed(r, p)).sum();
            let received: u64 = (0..w).filter(|&p| p != r).map(|p| framed(p, r)).sum();
            let moved = between.since(before);
            assert_eq!((moved.sent.control, moved.received.control), (sent, received), "w {w} rank {r}: counted");
            assert_eq!(moved.sent.total() + moved.received.total(), sent + received, "w {w} rank {r}: {moved:?}");
            assert_eq!(after, between, "w {w} rank {r}: the uncounted exchange moved a counter");
        }
    }
}
