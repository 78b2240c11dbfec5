//! The mesh itself: delivery per (peer, tag) in order, frame chains, byte
//! counting, timeouts and departures that name the peer, and misuse.

#[path = "support/bounded.rs"]
mod bounded;
mod comm_support;

use comm_support::{listeners, no_tweak, secret, with_mesh};
use leapgnn::comm::{Category, CommError, Deadline, Mesh, MeshConfig, auth, frame};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(10);

fn payload(from: usize, to: usize, tag: u64, i: usize) -> Vec<u8> {
    // Lengths vary (0..=40) so frames of many sizes are exercised.
    (0..(from * 7 + to * 3 + tag as usize + i) % 41).map(|k| (k + from * 31 + i) as u8).collect()
}

#[test]
fn messages_arrive_by_peer_and_tag_in_send_order_for_1_to_4_workers() {
    for w in 1..=4 {
        let per_rank = with_mesh(w, no_tweak, |m| {
            let (r, n) = (m.rank(), 50);
            let mut sent_bytes = 0u64;
            for p in (0..w).filter(|&p| p != r) {
                for i in 0..n {
                    for tag in [1u64, 2] {
                        let data = payload(r, p, tag, i);
                        sent_bytes += (frame::HEADER_LEN + data.len()) as u64;
                        m.send(p, tag, Category::Features, data).unwrap();
                    }
                }
            }
            // Read tag 2 first: tag 1 messages wait in their own mailbox.
            for p in (0..w).filter(|&p| p != r) {
                for tag in [2u64, 1] {
                    for i in 0..n {
                        assert_eq!(
                            m.recv(p, tag, LONG).unwrap(),
                            payload(p, r, tag, i),
                            "w {w}: {p} -> {r} tag {tag} #{i}"
                        );
                    }
                }
            }
            m.barrier(LONG).unwrap();
            (sent_bytes, m.bytes())
        });
        for (r, (sent, bytes)) in per_rank.iter().enumerate() {
            assert_eq!(bytes.sent.features, *sent, "w {w} rank {r}");
        }
        // After the barrier every byte sent has been received (a goodbye,
        // which a worker that finished early may send first, is counted by neither side).
        let total = |f: &dyn Fn(&leapgnn::comm::ByteCounts) -> u64| per_rank.iter().map(|(_, b)| f(b)).sum::<u64>();
        assert_eq!(total(&|b| b.sent.features), total(&|b| b.received.features));
        assert_eq!(total(&|b| b.sent.control), total(&|b| b.received.control), "w {w}");
        assert_eq!(total(&|b| b.sent.gradients + b.received.gradients), 0);
        if w > 1 {
            assert!(total(&|b| b.sent.control) > 0, "handshake and barrier bytes are control traffic");
        }
    }
}

#[test]
fn messages_longer_than_a_frame_travel_as_chains() {
    let big: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
    let out = with_mesh(
        2,
        |c| c.max_frame = 1000,
        |m| {
            if m.rank() == 0 {
                m.send(1, 5, Category::Migration, big.clone()).unwrap();
                m.send(1, 5, Category::Migration, Vec::new()).unwrap();
            } else {
                assert_eq!(m.recv(0, 5, LONG).unwrap(), big);
                assert!(m.recv(0, 5, LONG).unwrap().is_empty());
            }
            m.barrier(LONG).unwrap();
            m.bytes()
        },
    );
    let frames = big.len().div_ceil(1000) as u64 + 1;
    assert_eq!(out[0].sent.migration, big.len() as u64 + frames * frame::HEADER_LEN as u64);
    assert_eq!(out[1].received.migration, out[0].sent.migration);
}

#[test]
fn a_silent_peer_times_out_with_its_name_and_what_was_awaited() {
    let out = with_mesh(2, no_tweak, |m| {
        let r = if m.rank() == 1 {
            let t = Instant::now();
            let e = m.recv(0, 7, Duration::from_millis(300)).unwrap_err();
            Some((e, t.elapsed(), m.peer(0)))
        } else {
            None
        };
        m.barrier(LONG).unwrap();
        r
    });
    let (e, took, peer) = out.into_iter().flatten().next().unwrap();
    assert!(matches!(e, CommError::Timeout { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("worker 0 ({})", peer.addr)), "{msg}");
    assert!(msg.contains("300ms") && msg.contains("message 0x7"), "{msg}");
    // It waited its own 300 ms out, and not the 10 s (LONG) rank 0 then waits at the barrier.
    assert!(took >= Duration::from_millis(300) && took < LONG, "{took:?}");
}

#[test]
fn a_worker_that_leaves_fails_waits_on_it_at_once_but_not_on_the_others() {
    let out = with_mesh(3, no_tweak, |m| {
        m.barrier(LONG).unwrap();
        match m.rank() {
            // Closes its mesh (drop says goodbye) and is gone.
            2 => None,
            1 => {
                m.send(0, 9, Category::Control, b"still here".to_vec()).unwrap();
                None
            }
            _ => {
                let t = Instant::now();
                let e = m.recv(2, 9, LONG).unwrap_err();
                let took = t.elapsed();
                let from_1 = m.recv(1, 9, LONG).unwrap();
                Some((e, took, from_1, m.peer(2)))
            }
        }
    });
    let (e, took, from_1, peer2) = out.into_iter().flatten().next().unwrap();
    let msg = e.to_string();
    assert!(matches!(e, CommError::PeerLost { .. }), "{e:?}");
    assert!(msg.contains(&format!("worker 2 ({})", peer2.addr)) && msg.contains("left the job"), "{msg}");
    assert!(took < Duration::from_secs(5), "noticed after {took:?}");
    assert_eq!(from_1, b"still here");
}

/// A peer's goodbye was counted as received control (16 bytes), though its
/// sender counts it nowhere: it leaves as the mesh closes, after every
/// snapshot. Whether a worker's final report held it depended on whether
/// the peer closed first, so two identical runs' `workers.json` differed.
/// Received here after the goodbye (the wait on the peer failed: it left),
/// the count is exactly what the peer counted as sent.
#[test]
fn a_peers_goodbye_is_counted_by_neither_side() {
    let out = with_mesh(2, no_tweak, |m| {
        m.barrier(LONG).unwrap();
        if m.rank() == 1 {
            // Its last snapshot; its mesh says goodbye as it drops.
            return m.bytes();
        }
        let e = m.recv(1, 9, LONG).unwrap_err();
        assert!(e.to_string().contains("left the job"), "{e}");
        m.bytes()
    });
    assert!(out[1].sent.control > 0, "handshake and barrier are control: {:?}", out[1]);
    assert_eq!(out[0].received, out[1].sent);
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let out = with_mesh(2, no_tweak, |m| {
        let to_self = m.send(m.rank(), 1, Category::Control, vec![]).unwrap_err();
        let too_far = m.recv(5, 1, LONG).unwrap_err();
        let bad_root = m.broadcast(2, &mut vec![], Category::Control, LONG).unwrap_err();
        [to_self, too_far, bad_root].map(|e| matches!(e, CommError::Usage(_)))
    });
    assert!(out.iter().flatten().all(|&ok| ok));

    let (mut ls, addrs) = listeners(2);
    let short = Mesh::establish(ls.remove(0), &MeshConfig::new(0, addrs.clone(), b"short".to_vec())).unwrap_err();
    assert!(short.to_string().contains("secret has 5 bytes"), "{short}");
    let rank = Mesh::establish(ls.remove(0), &MeshConfig::new(2, addrs.clone(), secret())).unwrap_err();
    assert!(rank.to_string().contains("rank 2 but only 2"), "{rank}");
    let (ls, _) = listeners(1);
    let wrong = Mesh::establish(ls.into_iter().next().unwrap(), &MeshConfig::new(0, addrs, secret())).unwrap_err();
    assert!(wrong.to_string().contains("listener is bound to"), "{wrong}");
}

#[test]
fn a_stopped_peer_makes_send_wait_instead_of_growing_memory() {
    let (mut ls, addrs) = listeners(2);
    let l0 = ls.remove(0);
    let mut cfg = MeshConfig::new(0, addrs.clone(), secret());
    cfg.write_timeout = Duration::from_secs(1);
    cfg.max_queued = 4 << 20;
    cfg.linger = Duration::from_millis(100);
    // Worker 1 proves the secret, then never reads again, like a stopped process.
    let stalled = std::thread::spawn(move || {
        let s = std::net::TcpStream::connect(addrs[0]).unwrap();
        auth::connect(&s, &secret(), 2, 1, 0, &Deadline::after(Duration::from_secs(10))).unwrap();
        s
    });
    let m = Mesh::establish(l0, &cfg).unwrap();
    let _peer = bounded::join_within(stalled, Duration::from_secs(120), "worker 1's stand-in proving the secret");
    let chunk = vec![7u8; 1 << 20];
    let (mut queued, t) = (0usize, Instant::now());
    let err = loop {
        match m.send(1, 7, Category::Features, chunk.clone()) {
            Ok(()) => queued += chunk.len(),
            Err(e) => break e,
        }
        assert!(t.elapsed() < Duration::from_secs(30), "send never pushed back ({queued} bytes queued)");
    };
    // The queue's bound plus what the kernel's socket buffers took, not the
    // gigabytes an unbounded queue accepts in the same second.
    assert!(queued < 64 << 20, "{queued} bytes accepted for a peer that reads nothing");
    assert!(matches!(err, CommError::Timeout { .. } | CommError::PeerLost { .. }), "{err}");
    assert!(err.to_string().contains("worker 1"), "{err}");
}

#[test]
fn a_peer_that_runs_ahead_is_no_longer_read_and_the_wait_says_why() {
    const CAP: usize = 1 << 20;
    const PIECE: usize = 256 << 10;
    const PIECES: usize = 32; // 8 times the cap, on a tag nobody reads
    let out = with_mesh(
        2,
        |c| {
            c.max_inbox = CAP;
            c.linger = Duration::from_millis(100);
        },
        |m| {
            if m.rank() == 1 {
                for i in 0..PIECES {
                    m.send(0, 9, Category::Features, vec![i as u8; PIECE]).unwrap();
                }
                return None;
            }
            let e = m.recv(1, 5, Duration::from_secs(5)).unwrap_err();
            Some((e, m.inbox_held(1), m.bytes().received.features, m.peer(1)))
        },
    );
    let (e, held, received, peer) = out.into_iter().flatten().next().unwrap();
    assert!(held > 0 && held <= CAP, "{held} bytes held with a cap of {CAP}");
    assert!(received < (PIECE * PIECES) as u64, "all {received} bytes were read from a peer past its cap");
    let CommError::InboxFull { held: said, cap, .. } = e else { panic!("not an inbox-full error: {e:?}") };
    assert_eq!((said, cap), (held, CAP));
    let msg = e.to_string();
    assert!(msg.contains(&format!("worker 1 ({})", peer.addr)) && msg.contains("message 0x5"), "{msg}");
    assert!(msg.contains(&format!("{held} bytes")) && msg.contains(&format!("{CAP} bytes")), "{msg}");
}

#[test]
fn an_inbox_cap_smaller_than_one_message_still_delivers_every_message() {
    const CAP: usize = 1 << 10;
    let msg = |from: usize, to: usize, t: u64| -> Vec<u8> {
        (0..100_000 + t as usize).map(|k| (k * 7 + from * 13 + to * 5 + t as usize) as u8).collect()
    };
    let out = with_mesh(
        3,
        |c| c.max_inbox = CAP,
        |m| {
            let others: Vec<usize> = (0..3).filter(|&p| p != m.rank()).collect();
            for &p in &others {
                for t in 1..=4 {
                    m.send(p, t, Category::Activations, msg(m.rank(), p, t)).unwrap();
                }
            }
            for &p in &others {
                for t in 1..=4 {
                    assert_eq!(m.recv(p, t, LONG).unwrap(), msg(p, m.rank(), t), "from {p}, tag {t}");
                }
            }
            let mut sum = vec![m.rank() as f32 + 1.0; 50_000];
            m.all_reduce_sum(&mut sum, Category::Gradients, LONG).unwrap();
            (sum, others.iter().map(|&p| m.inbox_held(p)).sum::<usize>())
        },
    );
    for (sum, held) in out {
        assert!(sum.iter().all(|&x| x == 6.0));
        assert_eq!(held, 0);
    }
}
