//! [`Comm`] over the system MPI (the `mpi` crate), and the process's MPI lifetime.

use super::comm::{Comm, Reduce};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::*;

/// MPI for the life of the process: initialized by [`Mpi::init`], finalized when
/// dropped (every rank must drop it, after its last collective).
pub struct Mpi {
    universe: mpi::environment::Universe,
}

impl Mpi {
    /// Initializes MPI; `None` if it was initialized before.
    pub fn init() -> Option<Self> {
        mpi::initialize().map(|universe| Mpi { universe })
    }

    /// The communicator of every rank of the run.
    pub fn world(&self) -> MpiComm {
        MpiComm {
            comm: self.universe.world(),
        }
    }

    /// Ends every rank of the run at once with `code` (for a rank that cannot reach
    /// the agreement its peers wait in).
    pub fn abort(&self, code: i32) -> ! {
        self.universe.world().abort(code)
    }
}

/// An MPI communicator as a [`Comm`].
pub struct MpiComm {
    comm: SimpleCommunicator,
}

/// Backing for empty buffers: an empty `Vec<u8>` points at address 1, which Open MPI
/// reads as `MPI_IN_PLACE`; a zero-length slice of this points at real memory.
static NOTHING: [u8; 8] = [0; 8];

/// `b`, or an empty slice at a real address when `b` is empty.
fn real(b: &[u8]) -> &[u8] {
    if b.is_empty() { &NOTHING[..0] } else { b }
}

fn displs(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0i32, |s, &c| {
            let d = *s;
            *s += c;
            Some(d)
        })
        .collect()
}

fn op(r: Reduce) -> SystemOperation {
    match r {
        Reduce::Sum => SystemOperation::sum(),
        Reduce::Max => SystemOperation::max(),
        Reduce::Min => SystemOperation::min(),
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }
    fn size(&self) -> usize {
        self.comm.size() as usize
    }
    fn all_to_all_bytes(
        &self,
        send: &[u8],
        send_counts: &[i32],
        recv: &mut [u8],
        recv_counts: &[i32],
    ) {
        let (sd, rd) = (displs(send_counts), displs(recv_counts));
        let s = Partition::new(real(send), send_counts, &sd[..]);
        let mut spare = [0u8; 8];
        let recv = if recv.is_empty() {
            &mut spare[..0]
        } else {
            recv
        };
        let mut r = PartitionMut::new(recv, recv_counts, &rd[..]);
        self.comm.all_to_all_varcount_into(&s, &mut r);
    }
    fn all_gather_bytes(&self, send: &[u8], recv: &mut [u8], counts: &[i32]) {
        let d = displs(counts);
        let mut spare = [0u8; 8];
        let recv = if recv.is_empty() {
            &mut spare[..0]
        } else {
            recv
        };
        let mut r = PartitionMut::new(recv, counts, &d[..]);
        self.comm.all_gather_varcount_into(real(send), &mut r);
    }
    fn all_reduce_f64(&self, buf: &mut [f64], r: Reduce) {
        let send = buf.to_vec();
        self.comm.all_reduce_into(&send[..], buf, op(r));
    }
    fn all_reduce_u64(&self, buf: &mut [u64], r: Reduce) {
        let send = buf.to_vec();
        self.comm.all_reduce_into(&send[..], buf, op(r));
    }
    fn split(&self, color: usize) -> Box<dyn Comm> {
        let c = Color::with_value(color as i32);
        let comm = self
            .comm
            .split_by_color(c)
            .expect("a defined color gives every rank a communicator");
        Box::new(MpiComm { comm })
    }
}
