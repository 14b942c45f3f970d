//! Many small symmetric positive definite solves, without faer's per-call overhead:
//! completion ALS solves one `R × R` system per row of a factor.

/// Solves `G x = b` in place for a small symmetric positive definite `G` (row-major
/// `r × r`; only its upper triangle is read, and it is overwritten by the Cholesky
/// factor `U`, `G = UᵀU`; `b` becomes `x`). Returns `false`, with `G` and `b` partly
/// overwritten, when a pivot is not positive (not positive definite to working
/// precision).
///
/// For the thousands of independent `R × R` systems of completion ALS (`R` ≈ 8–64):
/// faer's LLᵀ costs about 1 µs per 16 × 16 system in dispatch, blocking and
/// dependent dot products. This is the right-looking (outer-product) form, whose
/// trailing updates are contiguous row AXPYs the compiler vectorizes; checked against
/// faer in the tests. Completion's row solves take [`cholesky_solve_lanes`], several at a
/// time.
pub(crate) fn cholesky_solve_small(g: &mut [f64], b: &mut [f64], r: usize) -> bool {
    debug_assert!(g.len() == r * r && b.len() == r);
    for j in 0..r {
        let (top, bottom) = g.split_at_mut((j + 1) * r);
        let row_j = &mut top[j * r..];
        let d = row_j[j];
        if !(d > 0.0 && d.is_finite()) {
            return false;
        }
        let d = d.sqrt();
        row_j[j] = d;
        for u in &mut row_j[j + 1..] {
            *u /= d;
        }
        // Trailing update of the upper triangle: G[i][i..] −= U[j][i] · U[j][i..].
        for (i, row_i) in (j + 1..r).zip(bottom.chunks_exact_mut(r)) {
            let s = row_j[i];
            for (a, &u) in row_i[i..].iter_mut().zip(&row_j[i..]) {
                *a -= s * u;
            }
        }
    }
    // Uᵀ y = b (column-oriented: row j of U is column j of Uᵀ), then U x = y.
    for j in 0..r {
        let row_j = &g[j * r..(j + 1) * r];
        let y = b[j] / row_j[j];
        b[j] = y;
        for (bi, &u) in b[j + 1..].iter_mut().zip(&row_j[j + 1..]) {
            *bi -= u * y;
        }
    }
    for i in (0..r).rev() {
        let row_i = &g[i * r..(i + 1) * r];
        let dot: f64 = row_i[i + 1..]
            .iter()
            .zip(&b[i + 1..])
            .map(|(u, x)| u * x)
            .sum();
        b[i] = (b[i] - dot) / row_i[i];
    }
    true
}

/// Solves `L` systems `G_l x_l = b_l` at once by Cholesky, lane `l` of every entry
/// holding system `l` (`g[p][q][l]` is `G_l[p][q]`, only the upper triangle read): the
/// square roots, divisions and substitutions of one system are chains of dependent
/// operations (about 0.6 µs for one 16 × 16 system), and `L` interleaved systems run
/// in SIMD lanes through one such chain (4 lanes: one AVX2 vector per entry; 8: two
/// independent vectors, twice the work in flight). `b` becomes the solutions. Returns, per lane, whether
/// its system was positive definite to working precision; a lane that was not holds
/// garbage (possibly not finite) and must be solved otherwise.
pub(crate) fn cholesky_solve_lanes<const R: usize, const L: usize>(
    g: &mut [[[f64; L]; R]; R],
    b: &mut [[f64; L]; R],
) -> [bool; L] {
    let mut ok = [true; L];
    for j in 0..R {
        let (top, bottom) = g.split_at_mut(j + 1);
        let row_j = &mut top[j];
        let mut d = [0f64; L];
        let mut inv = [0f64; L];
        for l in 0..L {
            let v = row_j[j][l];
            let good = v > 0.0 && v.is_finite();
            ok[l] &= good;
            d[l] = if good { v.sqrt() } else { 1.0 };
            inv[l] = 1.0 / d[l];
        }
        for u in &mut row_j[j + 1..] {
            for l in 0..L {
                u[l] *= inv[l];
            }
        }
        row_j[j] = d;
        for (i, row_i) in (j + 1..R).zip(bottom.iter_mut()) {
            let s = row_j[i];
            for (a, u) in row_i[i..].iter_mut().zip(&row_j[i..]) {
                for l in 0..L {
                    a[l] -= s[l] * u[l];
                }
            }
        }
    }
    // Uᵀ y = b (row j of U is column j of Uᵀ), then U x = y.
    for j in 0..R {
        for l in 0..L {
            b[j][l] /= g[j][j][l];
        }
        let y = b[j];
        for i in j + 1..R {
            for l in 0..L {
                b[i][l] -= g[j][i][l] * y[l];
            }
        }
    }
    for i in (0..R).rev() {
        let mut x = b[i];
        for k in i + 1..R {
            for l in 0..L {
                x[l] -= g[i][k][l] * b[k][l];
            }
        }
        for l in 0..L {
            b[i][l] = x[l] / g[i][i][l];
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::dense::gram;
    use crate::matrix::Matrix;
    use faer::Side;
    use faer::prelude::*;

    /// A random SPD `r × r` system `(AᵀA + δI) x = b` (row-major `G`, `b`) and faer's
    /// solution.
    fn spd_system(r: usize, seed: u64, delta: f64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let a = Matrix::random(r + 3, r, seed).to_f64();
        let mut v = gram(&a);
        for i in 0..r {
            v[(i, i)] += delta;
        }
        let b: Vec<f64> = (0..r)
            .map(|i| (i as f64 * 0.37 + seed as f64).sin())
            .collect();
        let mut x = Mat::<f64>::from_fn(r, 1, |i, _| b[i]);
        v.llt(Side::Lower).unwrap().solve_in_place(x.as_mut());
        let g = (0..r * r).map(|p| v[(p / r, p % r)]).collect();
        (g, b, (0..r).map(|i| x[(i, 0)]).collect())
    }

    #[test]
    fn small_cholesky_solves_match_faer_and_refuse_indefinite_systems() {
        for (k, r) in [1usize, 5, 8, 16, 32].into_iter().enumerate() {
            let (mut g, mut b, want) = spd_system(r, 10 + k as u64, 0.1);
            // Only the upper triangle is read: garbage below must not matter.
            for p in 0..r {
                for q in 0..p {
                    g[p * r + q] = f64::NAN;
                }
            }
            assert!(cholesky_solve_small(&mut g, &mut b, r));
            for (x, w) in b.iter().zip(&want) {
                assert!(
                    (x - w).abs() <= 1e-9 * w.abs().max(1.0),
                    "r={r}: {x} vs {w}"
                );
            }
        }
        // Indefinite: diag(1, −1).
        let mut g = vec![1.0, 0.0, 0.0, -1.0];
        assert!(!cholesky_solve_small(&mut g, &mut [1.0, 1.0], 2));
    }

    fn lanes<const R: usize, const L: usize>(seed: u64) {
        let systems: Vec<_> = (0..L as u64)
            .map(|l| spd_system(R, seed + l, 0.05))
            .collect();
        let mut g = [[[0f64; L]; R]; R];
        let mut b = [[0f64; L]; R];
        for (l, (gs, bs, _)) in systems.iter().enumerate() {
            for p in 0..R {
                for q in 0..R {
                    g[p][q][l] = if q >= p { gs[p * R + q] } else { f64::NAN };
                }
                b[p][l] = bs[p];
            }
        }
        // Lane 2 indefinite: its first pivot negative.
        g[0][0][2] = -1.0;
        let ok = cholesky_solve_lanes(&mut g, &mut b);
        let want: Vec<bool> = (0..L).map(|l| l != 2).collect();
        assert_eq!(ok.to_vec(), want, "R={R} L={L}");
        for l in (0..L).filter(|&l| l != 2) {
            for (p, w) in systems[l].2.iter().enumerate() {
                let x = b[p][l];
                assert!(
                    (x - w).abs() <= 1e-9 * w.abs().max(1.0),
                    "R={R} lane {l}: {x} vs {w}"
                );
            }
        }
    }

    #[test]
    fn lane_cholesky_solves_each_lane_like_faer() {
        lanes::<8, 4>(40);
        lanes::<16, 4>(50);
        lanes::<32, 4>(60);
        lanes::<9, 8>(70);
        lanes::<17, 8>(80);
        lanes::<33, 8>(90);
    }
}
