//! The communicator the distributed models talk through: a small object-safe
//! [`Comm`] (what MPI provides: all-to-all, all-gather and all-reduce, splitting into
//! sub-communicators) and [`Channel`], the typed layer over it that the models use.
//!
//! [`Channel`] adds what the raw calls lack: 64-bit counts (a message of any size goes
//! out in rounds whose per-call counts and displacements fit MPI's `int`), element
//! types other than bytes, agreement on failure (so that no rank waits in a collective
//! that a failed rank never enters), and the accounting the run reports: the bytes this
//! rank handed to MPI for other ranks and the time spent in communication.
//!
//! [`SelfComm`] is the one-process communicator (no MPI needed); the MPI one lives in
//! `dist::mpi` behind the `mpi` feature.

use crate::error::Error;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

/// A reduction of [`Comm::all_reduce_f64`] and [`Comm::all_reduce_u64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    /// Elementwise sum.
    Sum,
    /// Elementwise maximum.
    Max,
    /// Elementwise minimum.
    Min,
}

/// The collective operations the distributed models need, over raw bytes. Every call
/// is collective: every rank of the communicator makes it, in the same order.
/// Counts here are per call and stay below 2³¹ ([`Channel`] splits larger messages).
pub trait Comm {
    /// This process's rank in the communicator, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Sends `send[send_displs[j]..][..send_counts[j]]` to rank `j` and receives from
    /// rank `j` into `recv[recv_displs[j]..][..recv_counts[j]]` (bytes).
    fn all_to_all_bytes(
        &self,
        send: &[u8],
        send_counts: &[i32],
        recv: &mut [u8],
        recv_counts: &[i32],
    );
    /// Gathers every rank's `send` into `recv`, rank `j`'s `counts[j]` bytes after
    /// those of ranks `0..j`.
    fn all_gather_bytes(&self, send: &[u8], recv: &mut [u8], counts: &[i32]);
    /// Reduces `buf` elementwise over all ranks, in place.
    fn all_reduce_f64(&self, buf: &mut [f64], op: Reduce);
    /// Reduces `buf` elementwise over all ranks, in place.
    fn all_reduce_u64(&self, buf: &mut [u64], op: Reduce);
    /// The sub-communicator of the ranks that pass the same `color`, ordered by their
    /// rank here.
    fn split(&self, color: usize) -> Box<dyn Comm>;
}

/// The communicator of a single process: every collective is a copy or nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct SelfComm;

impl Comm for SelfComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_to_all_bytes(&self, send: &[u8], send_counts: &[i32], recv: &mut [u8], _: &[i32]) {
        let n = send_counts[0] as usize;
        recv[..n].copy_from_slice(&send[..n]);
    }
    fn all_gather_bytes(&self, send: &[u8], recv: &mut [u8], _: &[i32]) {
        recv[..send.len()].copy_from_slice(send);
    }
    fn all_reduce_f64(&self, _: &mut [f64], _: Reduce) {}
    fn all_reduce_u64(&self, _: &mut [u64], _: Reduce) {}
    fn split(&self, _: usize) -> Box<dyn Comm> {
        Box::new(SelfComm)
    }
}

/// Plain numbers that travel as their bytes.
///
/// # Safety
/// Implemented only for types with no padding and no invalid bit patterns.
pub unsafe trait Plain: Copy + Default + 'static {}
// SAFETY: primitive numbers: no padding, every bit pattern valid.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for f64 {}

fn as_bytes<T: Plain>(s: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding; the length covers exactly the slice.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T: Plain>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: `T: Plain` accepts every bit pattern; the length covers exactly the slice.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}

/// What a rank's communication cost so far, shared by a channel and the channels split
/// from it.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Bytes handed to MPI for other ranks (an all-reduce of `b` bytes over `P` ranks
    /// counts `2 b (P − 1) / P`, what a ring all-reduce sends).
    pub bytes: Cell<u64>,
    /// Seconds spent inside collectives (waiting for other ranks included).
    pub seconds: Cell<f64>,
}

/// A distributed step that failed: on the lowest rank that failed, its error (to be
/// reported); on every other rank, the note that some rank failed (reported there).
#[derive(Debug)]
pub enum Failure {
    /// This rank's own error; this rank reports it.
    Here(Error),
    /// Another rank failed and reports it; this one exits quietly.
    Elsewhere,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Here(e)
    }
}

/// The result of a distributed step.
pub type DistResult<T> = std::result::Result<T, Failure>;

/// The largest payload one raw collective call carries per round, in bytes (so that
/// counts and displacements, MPI `int`s, never overflow).
pub const ROUND_BYTES: usize = 1 << 30;

/// The typed, accounted layer over a [`Comm`].
pub struct Channel {
    comm: Box<dyn Comm>,
    traffic: Rc<Traffic>,
    round_bytes: usize,
}

impl Channel {
    /// A channel over `comm` with fresh accounting.
    pub fn new(comm: Box<dyn Comm>) -> Self {
        Channel {
            comm,
            traffic: Rc::new(Traffic::default()),
            round_bytes: ROUND_BYTES,
        }
    }

    /// The single-process channel.
    pub fn single() -> Self {
        Self::new(Box::new(SelfComm))
    }

    /// The same channel with another per-round payload limit (tests use a small one to
    /// exercise messages of many rounds).
    pub fn with_round_bytes(mut self, bytes: usize) -> Self {
        self.round_bytes = bytes.max(8);
        self
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The accounting shared with every channel split from this one.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// The sub-channel of the ranks that pass the same `color` (ordered by rank here),
    /// sharing this channel's accounting.
    pub fn split(&self, color: usize) -> Channel {
        let comm = self.timed(0, || self.comm.split(color));
        Channel {
            comm,
            traffic: self.traffic.clone(),
            round_bytes: self.round_bytes,
        }
    }

    fn timed<R>(&self, bytes: u64, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = f();
        let t = &self.traffic;
        t.seconds
            .set(t.seconds.get() + start.elapsed().as_secs_f64());
        t.bytes.set(t.bytes.get() + bytes);
        r
    }

    /// Agrees on the outcome of a step every rank took on its own: when any rank
    /// failed, every rank returns a [`Failure`] (the lowest failing rank its error), so
    /// that all leave together and none waits in a later collective.
    pub fn agree<T>(&self, r: crate::error::Result<T>) -> DistResult<T> {
        let me = self.rank() as u64;
        let mut first = [if r.is_err() { me } else { u64::MAX }];
        self.reduce_u64(&mut first, Reduce::Min);
        match r {
            Ok(v) if first[0] == u64::MAX => Ok(v),
            Err(e) if first[0] == me => Err(Failure::Here(e)),
            _ => Err(Failure::Elsewhere),
        }
    }

    /// Element-wise reduction of `buf` over all ranks, in place.
    pub fn reduce_f64(&self, buf: &mut [f64], op: Reduce) {
        let bytes = self.reduce_bytes(std::mem::size_of_val(buf));
        self.timed(bytes, || self.comm.all_reduce_f64(buf, op));
    }

    /// Element-wise reduction of `buf` over all ranks, in place.
    pub fn reduce_u64(&self, buf: &mut [u64], op: Reduce) {
        let bytes = self.reduce_bytes(std::mem::size_of_val(buf));
        self.timed(bytes, || self.comm.all_reduce_u64(buf, op));
    }

    /// What a ring all-reduce of `b` bytes sends from each rank.
    fn reduce_bytes(&self, b: usize) -> u64 {
        let p = self.size() as u64;
        2 * b as u64 * (p - 1) / p
    }

    /// Every rank's value of `x`, in rank order.
    pub fn gather_u64(&self, x: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size()];
        all[self.rank()] = x;
        self.reduce_u64(&mut all, Reduce::Sum);
        all
    }

    /// The sum of `x` over the ranks before this one.
    pub fn exclusive_sum(&self, x: u64) -> u64 {
        self.gather_u64(x)[..self.rank()].iter().sum()
    }

    /// Sends `send[offset_j..offset_j + counts[j]]` to rank `j` (`offset_j` the sum of
    /// the counts before `j`); returns what every rank sent here, in rank order, and
    /// how many elements came from each. Counts are 64-bit: a message of any size goes
    /// out in rounds of at most the round limit per peer.
    pub fn all_to_all<T: Plain>(&self, send: &[T], counts: &[u64]) -> (Vec<T>, Vec<u64>) {
        let p = self.size();
        assert_eq!(counts.len(), p, "one count per rank");
        let elem = std::mem::size_of::<T>();
        // How many elements each rank sends here.
        let mut recv_counts = vec![0u64; p];
        {
            let sc: Vec<i32> = vec![8; p];
            let mut rb = vec![0u8; 8 * p];
            self.timed(0, || {
                self.comm
                    .all_to_all_bytes(as_bytes(counts), &sc, &mut rb, &sc)
            });
            for (c, b) in recv_counts.iter_mut().zip(rb.chunks_exact(8)) {
                *c = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
            }
        }
        let per_peer = (self.round_bytes / p / elem).max(1) as u64;
        let most = counts
            .iter()
            .chain(&recv_counts)
            .copied()
            .max()
            .unwrap_or(0);
        let mut rounds = [most.div_ceil(per_peer)];
        self.reduce_u64(&mut rounds, Reduce::Max);
        let total: u64 = recv_counts.iter().sum();
        let mut out = vec![T::default(); total as usize];
        self.exchange(send, counts, &recv_counts, rounds[0], &mut out);
        (out, recv_counts)
    }

    /// [`Channel::all_to_all`] between ranks that already know what they receive:
    /// `counts[j]` elements of `send` go to rank `j`, and `recv_counts[j]` come from it
    /// into `out` (in rank order, exactly filling it). `most` is the largest count any
    /// rank of the communicator sends to or receives from one peer, the same on every
    /// rank: it sets the rounds. No collective is made besides the exchange itself.
    pub fn all_to_all_known<T: Plain>(
        &self,
        send: &[T],
        counts: &[u64],
        recv_counts: &[u64],
        most: u64,
        out: &mut [T],
    ) {
        let p = self.size();
        assert_eq!(counts.len(), p, "one count per rank");
        assert_eq!(recv_counts.len(), p, "one count per rank");
        assert_eq!(
            recv_counts.iter().sum::<u64>(),
            out.len() as u64,
            "room for exactly what arrives"
        );
        let per_peer = (self.round_bytes / p / std::mem::size_of::<T>()).max(1) as u64;
        self.exchange(send, counts, recv_counts, most.div_ceil(per_peer), out);
    }

    /// The all-to-all of [`Channel::all_to_all`] in `rounds` rounds (the same on every
    /// rank), counts known on both sides.
    fn exchange<T: Plain>(
        &self,
        send: &[T],
        counts: &[u64],
        recv_counts: &[u64],
        rounds: u64,
        out: &mut [T],
    ) {
        let p = self.size();
        let elem = std::mem::size_of::<T>();
        let per_peer = (self.round_bytes / p / elem).max(1) as u64;
        let starts = |c: &[u64]| -> Vec<u64> {
            c.iter()
                .scan(0u64, |s, &x| {
                    let v = *s;
                    *s += x;
                    Some(v)
                })
                .collect()
        };
        let (send_at, recv_at) = (starts(counts), starts(recv_counts));
        let me = self.rank();
        for round in 0..rounds {
            let lo = round * per_peer;
            let take = |c: u64| c.saturating_sub(lo).min(per_peer);
            let mut sc = vec![0i32; p];
            let mut rc = vec![0i32; p];
            let mut sent = 0u64;
            for j in 0..p {
                let n = take(counts[j]);
                sc[j] = (n as usize * elem) as i32;
                rc[j] = (take(recv_counts[j]) as usize * elem) as i32;
                if j != me {
                    sent += n * elem as u64;
                }
            }
            if rounds == 1 {
                // One round: `send` and `out` are laid out as the collective's buffers
                // already, so no staging copy of either is made.
                let n = counts.iter().sum::<u64>() as usize;
                self.timed(sent, || {
                    (self.comm).all_to_all_bytes(as_bytes(&send[..n]), &sc, as_bytes_mut(out), &rc)
                });
                continue;
            }
            let mut sbuf = Vec::new();
            for j in 0..p {
                let s = (send_at[j] + lo) as usize;
                sbuf.extend_from_slice(as_bytes(&send[s..s + take(counts[j]) as usize]));
            }
            let mut rbuf = vec![0u8; rc.iter().map(|&c| c as usize).sum()];
            self.timed(sent, || {
                self.comm.all_to_all_bytes(&sbuf, &sc, &mut rbuf, &rc)
            });
            let mut at = 0;
            for j in 0..p {
                let n = take(recv_counts[j]) as usize;
                let d = (recv_at[j] + lo) as usize;
                as_bytes_mut(&mut out[d..d + n]).copy_from_slice(&rbuf[at..at + n * elem]);
                at += n * elem;
            }
        }
    }

    /// Every rank's `send`, concatenated in rank order, and how many elements each gave.
    pub fn all_gather<T: Plain>(&self, send: &[T]) -> (Vec<T>, Vec<u64>) {
        let counts = self.gather_u64(send.len() as u64);
        let mut out = vec![T::default(); counts.iter().sum::<u64>() as usize];
        self.gather_counted(send, &counts, &mut out);
        (out, counts)
    }

    /// [`Channel::all_gather`] into `out`, which must have room for exactly every
    /// rank's `send` (a caller that knows the layout: a layer's owned pieces fill its
    /// slab); no other buffer of that size is made when one round carries it all.
    pub fn all_gather_into<T: Plain>(&self, send: &[T], out: &mut [T]) {
        let counts = self.gather_u64(send.len() as u64);
        assert_eq!(
            counts.iter().sum::<u64>(),
            out.len() as u64,
            "room for every rank's elements"
        );
        self.gather_counted(send, &counts, out);
    }

    /// [`Channel::all_gather_into`] where every rank knows every rank's count
    /// (`counts[j]` elements from rank `j`): no collective besides the gather itself.
    pub fn all_gather_known<T: Plain>(&self, send: &[T], counts: &[u64], out: &mut [T]) {
        assert_eq!(counts[self.rank()], send.len() as u64, "this rank's count");
        assert_eq!(
            counts.iter().sum::<u64>(),
            out.len() as u64,
            "room for every rank's elements"
        );
        self.gather_counted(send, counts, out);
    }

    /// Gathers every rank's `send` (`counts[j]` elements from rank `j`) into `out`.
    fn gather_counted<T: Plain>(&self, send: &[T], counts: &[u64], out: &mut [T]) {
        let p = self.size();
        let elem = std::mem::size_of::<T>();
        let per_rank = (self.round_bytes / p / elem).max(1) as u64;
        let most = counts.iter().copied().max().unwrap_or(0);
        let rounds = most.div_ceil(per_rank);
        for round in 0..rounds {
            let lo = round * per_rank;
            let take = |c: u64| c.saturating_sub(lo).min(per_rank);
            let rc: Vec<i32> = counts
                .iter()
                .map(|&c| (take(c) as usize * elem) as i32)
                .collect();
            let mine = take(send.len() as u64) as usize;
            let s = lo.min(send.len() as u64) as usize;
            let sent = (mine * elem * (p - 1)) as u64;
            if rounds == 1 {
                // One round: `out` is laid out as the collective's buffer already.
                self.timed(sent, || {
                    (self.comm).all_gather_bytes(
                        as_bytes(&send[s..s + mine]),
                        as_bytes_mut(out),
                        &rc,
                    )
                });
                continue;
            }
            let mut rbuf = vec![0u8; rc.iter().map(|&c| c as usize).sum()];
            self.timed(sent, || {
                self.comm
                    .all_gather_bytes(as_bytes(&send[s..s + mine]), &mut rbuf, &rc)
            });
            let mut at = 0;
            let mut dst = 0u64;
            for &c in counts {
                let n = take(c) as usize;
                let d = (dst + lo) as usize;
                as_bytes_mut(&mut out[d..d + n]).copy_from_slice(&rbuf[at..at + n * elem]);
                at += n * elem;
                dst += c;
            }
        }
    }
}
