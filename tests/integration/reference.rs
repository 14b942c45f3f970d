//! The FP64 reference MTTKRP and TTMc against outputs worked out by hand on a small
//! 6×4×4 tensor with integer values and factors (so every result is exact).

use sptmc::reference::{mttkrp, ttmc};
use sptmc::{CooTensor, Matrix};

/// Twelve nonzeros `(i, j, k) = v`, 0-based.
fn tensor() -> CooTensor {
    CooTensor::from_entries(
        vec![6, 4, 4],
        [
            ([0u32, 0, 0], 1.0),
            ([0, 1, 2], 2.0),
            ([1, 3, 1], 3.0),
            ([2, 0, 3], 1.0),
            ([2, 2, 2], 2.0),
            ([3, 1, 0], 1.0),
            ([3, 3, 3], 4.0),
            ([4, 0, 1], 2.0),
            ([4, 2, 0], 1.0),
            ([5, 1, 1], 3.0),
            ([5, 3, 2], 1.0),
            ([1, 0, 0], 2.0),
        ],
    )
    .unwrap()
}

fn matrix(rows: &[&[f64]]) -> Matrix<f64> {
    let cols = rows[0].len();
    Matrix::new(rows.len(), cols, rows.concat()).unwrap()
}

/// A (6×2), B (4×2), C (4×2).
fn cp_factors() -> Vec<Matrix<f64>> {
    vec![
        matrix(&[
            &[1., 0.],
            &[0., 1.],
            &[1., 1.],
            &[2., 0.],
            &[0., 2.],
            &[1., 2.],
        ]),
        matrix(&[&[1., 2.], &[0., 1.], &[1., 0.], &[2., 1.]]),
        matrix(&[&[1., 1.], &[2., 0.], &[0., 1.], &[1., 3.]]),
    ]
}

/// A (6×2), B (4×3), C (4×2): unequal ranks expose the TTMc column order.
fn tucker_factors() -> Vec<Matrix<f64>> {
    vec![
        matrix(&[
            &[1., 0.],
            &[0., 1.],
            &[1., 1.],
            &[2., 0.],
            &[0., 2.],
            &[1., 2.],
        ]),
        matrix(&[&[1., 0., 2.], &[0., 1., 1.], &[2., 1., 0.], &[1., 1., 1.]]),
        matrix(&[&[1., 1.], &[2., 0.], &[0., 1.], &[1., 3.]]),
    ]
}

fn check(got: Matrix<f64>, want: &[&[f64]]) {
    assert_eq!(got.shape(), (want.len(), want[0].len()));
    for (i, row) in want.iter().enumerate() {
        assert_eq!(got.row(i), *row, "row {i}");
    }
}

#[test]
fn mttkrp_mode_0() {
    // Row 1 holds x(1,3,1) = 3 and x(1,0,0) = 2:
    //   r = 0: 3·B[3,0]·C[1,0] + 2·B[0,0]·C[0,0] = 3·2·2 + 2·1·1 = 14
    //   r = 1: 3·B[3,1]·C[1,1] + 2·B[0,1]·C[0,1] = 3·1·0 + 2·2·1 = 4
    let got = mttkrp(&tensor(), 0, &cp_factors()).unwrap();
    check(
        got,
        &[
            &[1., 4.],
            &[14., 4.],
            &[1., 6.],
            &[8., 13.],
            &[5., 0.],
            &[0., 1.],
        ],
    );
}

#[test]
fn mttkrp_mode_1() {
    // Row 2 holds x(2,2,2) = 2 and x(4,2,0) = 1:
    //   r = 0: 2·A[2,0]·C[2,0] + 1·A[4,0]·C[0,0] = 2·1·0 + 1·0·1 = 0
    //   r = 1: 2·A[2,1]·C[2,1] + 1·A[4,1]·C[0,1] = 2·1·1 + 1·2·1 = 4
    let got = mttkrp(&tensor(), 1, &cp_factors()).unwrap();
    check(got, &[&[2., 5.], &[8., 0.], &[0., 4.], &[8., 2.]]);
}

#[test]
fn mttkrp_mode_2() {
    let got = mttkrp(&tensor(), 2, &cp_factors()).unwrap();
    check(got, &[&[1., 4.], &[0., 17.], &[4., 2.], &[17., 2.]]);
}

#[test]
fn ttmc_mode_0_columns_run_mode_2_fastest() {
    // Column c = a·2 + b pairs B's column a with C's column b (modes increasing, the
    // last fastest). Row 0 holds x(0,0,0) = 1 and x(0,1,2) = 2:
    //   c = 1 (a=0, b=1): 1·B[0,0]·C[0,1] + 2·B[1,0]·C[2,1] = 1·1·1 + 2·0·1 = 1
    //   c = 4 (a=2, b=0): 1·B[0,2]·C[0,0] + 2·B[1,2]·C[2,0] = 1·2·1 + 2·1·0 = 2
    //   c = 5 (a=2, b=1): 1·B[0,2]·C[0,1] + 2·B[1,2]·C[2,1] = 1·2·1 + 2·1·1 = 4
    let got = ttmc(&tensor(), 0, &tucker_factors()).unwrap();
    check(
        got,
        &[
            &[1., 1., 0., 2., 2., 4.],
            &[8., 2., 6., 0., 10., 4.],
            &[1., 7., 0., 2., 2., 6.],
            &[4., 12., 5., 13., 5., 13.],
            &[6., 2., 1., 1., 8., 0.],
            &[0., 1., 6., 1., 6., 1.],
        ],
    );
}

#[test]
fn ttmc_mode_1_columns_run_mode_2_fastest() {
    // Column c = a·2 + b pairs A's column a with C's column b.
    let got = ttmc(&tensor(), 1, &tucker_factors()).unwrap();
    check(
        got,
        &[
            &[2., 4., 11., 5.],
            &[8., 4., 12., 0.],
            &[0., 2., 2., 4.],
            &[8., 25., 6., 2.],
        ],
    );
}

#[test]
fn ttmc_mode_2_columns_run_mode_1_fastest() {
    // Column c = a·3 + b pairs A's column a with B's column b. Row 3 holds
    // x(2,0,3) = 1 and x(3,3,3) = 4:
    //   c = 0 (a=0, b=0): 1·A[2,0]·B[0,0] + 4·A[3,0]·B[3,0] = 1·1·1 + 4·2·1 = 9
    //   c = 3 (a=1, b=0): 1·A[2,1]·B[0,0] + 4·A[3,1]·B[3,0] = 1·1·1 + 4·0·1 = 1
    let got = ttmc(&tensor(), 2, &tucker_factors()).unwrap();
    check(
        got,
        &[
            &[1., 2., 4., 6., 2., 4.],
            &[0., 3., 3., 7., 9., 17.],
            &[5., 5., 3., 6., 4., 2.],
            &[9., 8., 10., 1., 0., 2.],
        ],
    );
}
