//! CPU reference kernels: the elementwise adds of the residual stream and of the Switch
//! auxiliary-loss gradient.
//!
//! Every output element is one IEEE addition of its inputs, so the order of work cannot change
//! a result. Not here: anything that sums across elements ([`super::reduce`]).

use rayon::prelude::*;

use crate::scalar::Real;

/// `a += b`, elementwise.
pub fn add_assign<F: Real>(a: &mut [F], b: &[F]) {
    a.par_chunks_mut(4096)
        .zip(b.par_chunks(4096))
        .for_each(|(x, y)| {
            for (p, q) in x.iter_mut().zip(y) {
                *p += *q;
            }
        });
}

/// `buf[n, e] += row[e]` for every row of `[N, E]`.
pub fn add_row_broadcast<F: Real>(buf: &mut [F], row: &[F]) {
    for r in buf.chunks_mut(row.len()) {
        for (p, q) in r.iter_mut().zip(row) {
            *p += *q;
        }
    }
}
